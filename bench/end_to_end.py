"""End-to-end delivery rate: coordinator → queue → sender → provider, on one database.

Prints occurrences per second for one coordinator and one sender in this process with
(a) an in-process provider that accepts everything and (b) the fake Resend-compatible
provider over HTTP (tests/support/fake_provider.py), each beside a raw-SQL reference that
performs the same row mutations per occurrence (claim, outbox insert and publish, queue
insert, receive and delete, delivery insert and completion, reminder completion) with
set-based statements in batches. Issue 4's targets on 2 cores: >= 5,000/s in-process and
>= 1,500/s over HTTP.

    PYTHONPATH=. python bench/end_to_end.py [--reminders 2000]
"""

from __future__ import annotations

import argparse
import json
import os
import secrets
import tempfile
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path

import httpx
import psycopg
from sqlalchemy import Engine, create_engine, text
from sqlalchemy.engine import make_url

from coordinator.service import Coordinator
from reminder_core.db.embedded import embedded_database_url
from reminder_core.db.migrate import upgrade
from reminder_core.db.session import make_engine, normalize_url
from reminder_core.profiles import LocalProfileSource
from reminder_core.queue import PostgresQueue
from reminder_core.scheduling import ScheduleConfig
from reminder_core.settings import Settings
from sender.providers.base import OutgoingEmail, Provider, SendReceipt
from sender.providers.resend import ResendProvider
from sender.render import Renderer
from sender.service import Sender
from tests.support.fake_provider import FakeProvider

RAW_BATCH = 500


class AcceptAll:
    """In-process provider: accepts every email (first receipt per key)."""

    name = "memory"

    def send(self, email: OutgoingEmail, *, idempotency_key: str) -> SendReceipt:
        del email
        return SendReceipt(provider=self.name, provider_message_id=idempotency_key)


def seed(engine: Engine, n: int) -> None:
    with engine.begin() as conn:
        conn.execute(text("TRUNCATE delivery_log, outbox, queue_messages, reminders CASCADE"))
        conn.execute(
            text(
                "INSERT INTO reminders (user_id, title, start_local, timezone, next_run_utc)"
                " SELECT 'bench', 'bench ' || g, '2030-01-01T09:00', 'UTC', :due"
                " FROM generate_series(1, :n) g"
            ),
            {"n": n, "due": datetime.now(UTC) - timedelta(seconds=1)},
        )
        conn.execute(text("ANALYZE reminders"))


def run_pipeline(engine: Engine, provider: Provider, profiles: Path, n: int) -> float:
    seed(engine, n)
    queue = PostgresQueue(engine, name="bench", max_receive_count=5)
    coordinator = Coordinator(engine, queue, lookahead_s=0, batch_size=500, worker_id="bench")
    settings = Settings(jwt_secret="x" * 40)
    sender = Sender(
        engine, queue, LocalProfileSource(profiles), Renderer(), provider,
        mail_from="bench@example.com", visibility_timeout_s=60, lease_s=60,
        schedule_config=ScheduleConfig.from_settings(settings),
    )  # fmt: skip
    start = time.perf_counter()
    sent = 0
    while sent < n:
        coordinator.run_once(datetime.now(UTC))
        while True:
            result = sender.run_once(datetime.now(UTC))
            sent += result.counts.get("sent", 0)
            if not result.processed:
                break
    sender.close()
    return n / (time.perf_counter() - start)


RAW_STEPS = [
    # claim + outbox (the coordinator's statement)
    """WITH due AS (SELECT id FROM reminders WHERE status = 'pending' AND next_run_utc <= now()
                    ORDER BY next_run_utc LIMIT %(b)s FOR UPDATE SKIP LOCKED),
            claimed AS (UPDATE reminders r SET status = 'claimed', claimed_by = 'raw',
                        claimed_at = now() FROM due WHERE r.id = due.id
                        RETURNING r.id, r.user_id, r.next_run_utc)
       INSERT INTO outbox (payload) SELECT jsonb_build_object('reminder_id', id,
              'run_time_utc', next_run_utc, 'user_id', user_id) FROM claimed""",
    """WITH p AS (UPDATE outbox SET published_at = now() WHERE published_at IS NULL
                  RETURNING payload)
       INSERT INTO queue_messages (queue_name, body, visible_at) SELECT 'raw', payload, now()
       FROM p""",
    """UPDATE queue_messages SET receive_count = receive_count + 1,
              visible_at = now() + interval '60 s', receipt_handle = gen_random_uuid()
       WHERE id IN (SELECT id FROM queue_messages WHERE queue_name = 'raw'
                    AND receipt_handle IS NULL LIMIT %(b)s FOR UPDATE SKIP LOCKED)""",
    """INSERT INTO delivery_log (reminder_id, user_id, run_time_utc, status, locked_at,
              lease_token)
       SELECT (body->>'reminder_id')::uuid, body->>'user_id',
              (body->>'run_time_utc')::timestamptz, 'sending', now(), gen_random_uuid()
       FROM queue_messages WHERE queue_name = 'raw' AND receipt_handle IS NOT NULL
       ON CONFLICT DO NOTHING""",
    """UPDATE delivery_log SET status = 'sent', sent_at = now(), attempt_count = 1,
              locked_at = NULL, lease_token = NULL WHERE status = 'sending'""",
    """UPDATE reminders SET status = 'completed', next_run_utc = NULL, claimed_by = NULL,
              claimed_at = NULL WHERE status = 'claimed'""",
    """DELETE FROM queue_messages WHERE queue_name = 'raw' AND receipt_handle IS NOT NULL""",
]


def run_raw(engine: Engine, url: str, n: int) -> float:
    seed(engine, n)
    dsn = make_url(url).set(drivername="postgresql").render_as_string(hide_password=False)
    with psycopg.connect(dsn) as conn:
        start = time.perf_counter()
        done = 0
        while done < n:
            with conn.transaction():
                for step in RAW_STEPS:
                    conn.execute(step, {"b": RAW_BATCH})  # type: ignore[arg-type]
            done = conn.execute(
                "SELECT count(*) FROM reminders WHERE status = 'completed'"
            ).fetchone()[0]  # type: ignore[index]
        return n / (time.perf_counter() - start)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--reminders", type=int, default=2000)
    args = parser.parse_args()
    admin = os.environ.get("DATABASE_URL")
    admin = (
        normalize_url(admin)
        if admin
        else embedded_database_url(Path(tempfile.mkdtemp(prefix="bench-")))
    )
    name = f"reminders_bench_{secrets.token_hex(3)}"
    admin_engine = create_engine(admin, isolation_level="AUTOCOMMIT")
    with admin_engine.connect() as conn:
        conn.execute(text(f'CREATE DATABASE "{name}"'))
    url = make_url(admin).set(database=name).render_as_string(hide_password=False)
    fake = FakeProvider().start()
    try:
        upgrade(url)
        engine = make_engine(url, pool_size=4)
        profiles = Path(tempfile.mkdtemp()) / "profiles.json"
        profiles.write_text(json.dumps({"bench": {"email": "b@example.com", "timezone": "UTC"}}))
        n = args.reminders
        raw = run_raw(engine, url, n)
        memory = run_pipeline(engine, AcceptAll(), profiles, n)
        http = ResendProvider(httpx.Client(timeout=10), base_url=fake.url, api_key="bench")
        over_http = run_pipeline(engine, http, profiles, n)
        print(f"{n} one-time occurrences, one coordinator + one sender, this process")
        print(f"raw-SQL reference (same row mutations, set-based): {raw:8,.0f}/s")
        print(f"end to end, in-process provider:                   {memory:8,.0f}/s"
              f"   ratio {memory / raw:.3f}   (target >= 5,000/s)")  # fmt: skip
        print(f"end to end, fake provider over HTTP:               {over_http:8,.0f}/s"
              f"   ratio {over_http / raw:.3f}   (target >= 1,500/s)")  # fmt: skip
        engine.dispose()
    finally:
        fake.stop()
        with admin_engine.connect() as conn:
            conn.execute(text(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)'))
        admin_engine.dispose()


if __name__ == "__main__":
    main()
