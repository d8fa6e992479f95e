"""A sender process to kill -9 (tests/integration/test_completer.py): a real Sender on the
PostgreSQL queue whose provider does not deduplicate and appends each accepted key, with
the time it accepted it, to a log file before answering.

    python -m tests.support.crash_sender DATABASE_URL PROFILES_FILE ACCEPT_LOG \
        LATENCY_S FLUSH_INTERVAL_S

A line written by `os.write` is in the kernel once the call returns: a SIGKILL right
after it cannot lose it, exactly like an email a real provider accepted.
"""

from __future__ import annotations

import os
import sys
import time
import uuid
from datetime import UTC, datetime
from pathlib import Path

from reminder_core.db.session import make_engine
from reminder_core.profiles import LocalProfileSource
from reminder_core.queue import PostgresQueue
from reminder_core.scheduling import ScheduleConfig
from reminder_core.settings import Settings
from sender.providers.base import OutgoingEmail, SendReceipt
from sender.render import Renderer
from sender.service import Sender


class AcceptLog:
    """Accepts every call after `latency_s` (no deduplication), logging `key time`."""

    name = "file"

    def __init__(self, path: Path, latency_s: float) -> None:
        self._fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
        self.latency_s = latency_s

    def send(self, email: OutgoingEmail, *, idempotency_key: str) -> SendReceipt:
        del email
        time.sleep(self.latency_s)
        os.write(self._fd, f"{idempotency_key} {time.time():.6f}\n".encode())
        return SendReceipt(provider=self.name, provider_message_id=str(uuid.uuid4()))


def main() -> None:
    url, profiles, log_path, latency_s, flush_interval_s = sys.argv[1:6]
    settings = Settings(jwt_secret="x" * 40)
    engine = make_engine(url, pool_size=2, application_name="crash-sender")
    sender = Sender(
        engine,
        PostgresQueue(engine, name="reminders", max_receive_count=5),
        LocalProfileSource(Path(profiles)),
        Renderer(),
        AcceptLog(Path(log_path), float(latency_s)),
        mail_from="r@example.com",
        visibility_timeout_s=60,
        lease_s=60,
        schedule_config=ScheduleConfig.from_settings(settings),
        batch_size=100,
        concurrency=4,
        flush_interval_s=float(flush_interval_s),
    )
    print("ready", flush=True)
    while True:
        if not sender.run_once(datetime.now(UTC)).processed:
            time.sleep(0.01)


if __name__ == "__main__":
    main()
