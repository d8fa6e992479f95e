"""Structured logs (issue 7, "Logs"): one JSON object per line on stderr, with
`reminder_id`, `run_time_utc`, `attempt` and `provider` as keys of every delivery event;
stdlib records of third-party libraries come out as JSON too; `console` is for humans.

Expected values come from each test's own setup: the reminder it inserted, the due time
it chose (NOW), the queue receive it is on, the provider it passed in.
"""

from __future__ import annotations

import json
import logging
import os
import subprocess
import sys
from collections.abc import Iterator
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
import structlog
from sqlalchemy import Engine, text

from reminder_core.errors import TransientDeliveryError
from reminder_core.logging import configure_logging
from reminder_core.queue import PostgresQueue
from reminder_core.settings import Settings
from sender.providers.base import OutgoingEmail, SendReceipt
from sender.providers.failover import FailoverProvider
from tests.integration.helpers import insert_due_reminders
from tests.integration.test_sender import claim
from tests.support.sending import NOW, Clock, CountingProvider, make_sender

# NOW (2030-01-01 12:00:00 UTC) as ISO 8601 in UTC with `Z`.
NOW_ISO = "2030-01-01T12:00:00Z"


@pytest.fixture
def restore_logging() -> Iterator[None]:
    """Put the root logger and structlog back as they were after the test."""
    root = logging.getLogger()
    handlers, level = root.handlers[:], root.level
    yield
    for handler in root.handlers[:]:
        root.removeHandler(handler)
    for handler in handlers:
        root.addHandler(handler)
    root.setLevel(level)
    structlog.reset_defaults()
    logging.setLoggerClass(logging.Logger)  # structlog's LoggerFactory set its own


def json_lines(err: str) -> list[dict[str, Any]]:
    """Every stderr line parsed as one JSON object (fails on a line that is not one)."""
    lines = [line for line in err.splitlines() if line.strip()]
    objects = [json.loads(line) for line in lines]
    assert all(isinstance(o, dict) for o in objects), lines
    return objects


@pytest.fixture
def due(db: Engine, queue: PostgresQueue) -> str:
    """One reminder of alice due at NOW, claimed into the queue; returns its id."""
    insert_due_reminders(db, 1, next_run_utc=NOW)
    with db.connect() as conn:
        rid = str(conn.execute(text("SELECT id FROM reminders")).scalar_one())
    claim(db, queue)
    return rid


def test_a_sent_delivery_is_one_json_line_with_its_fields(
    db: Engine,
    queue: PostgresQueue,
    settings: Settings,
    provider: CountingProvider,
    capfd: pytest.CaptureFixture[str],
    restore_logging: None,
    due: str,
) -> None:
    del restore_logging
    rid = due
    configure_logging("DEBUG", "json")  # on stderr, as every workload's main() does
    sender = make_sender(db, queue, settings, provider)
    assert sender.run_once(NOW).counts == {"sent": 1}

    out, err = capfd.readouterr()
    assert out == ""
    records = json_lines(err)
    (sent,) = [r for r in records if r["event"] == "delivery sent"]
    assert sent["reminder_id"] == rid
    assert sent["run_time_utc"] == NOW_ISO
    assert sent["attempt"] == 1  # the message's first receive
    assert sent["provider"] == "file"  # CountingProvider's name
    assert sent["level"] == "debug"
    assert sent["logger"] == "sender.service"
    assert sent["recipient"] == "alice@example.com"  # conftest's profile of alice
    assert sent["timestamp"].endswith("Z")
    # The batch summary, at INFO: what an operator sees at the default level.
    (summary,) = [r for r in records if r["event"] == "deliveries settled"]
    assert summary["level"] == "info"
    assert summary["outcomes"] == {"sent": 1}
    assert summary["sent_by_provider"] == {"file": 1}


def test_http_client_requests_are_not_logged_per_call_at_info(
    capfd: pytest.CaptureFixture[str], restore_logging: None
) -> None:
    # Trial finding: httpx logged every provider call at INFO (one line per send).
    del restore_logging
    configure_logging("INFO", "json")
    logging.getLogger("httpx").info("HTTP Request: POST http://provider/emails")
    logging.getLogger("httpx").warning("connection pool is full")
    records = json_lines(capfd.readouterr().err)
    assert [r["event"] for r in records] == ["connection pool is full"]
    configure_logging("DEBUG", "json")  # asked for everything: everything comes
    logging.getLogger("httpx").info("HTTP Request: POST http://provider/emails")
    assert [r["event"] for r in json_lines(capfd.readouterr().err)] == [
        "HTTP Request: POST http://provider/emails"
    ]


def test_a_retry_and_the_later_send_carry_the_attempt(
    db: Engine,
    queue: PostgresQueue,
    settings: Settings,
    provider: CountingProvider,
    capfd: pytest.CaptureFixture[str],
    restore_logging: None,
    due: str,
) -> None:
    del restore_logging
    rid = due
    configure_logging("DEBUG", "json")  # on stderr, as every workload's main() does
    provider.fail_next.append(TransientDeliveryError("503 Service Unavailable", retry_after_s=7))
    assert make_sender(db, queue, settings, provider).run_once(NOW).counts == {"retry": 1}
    later = NOW + timedelta(seconds=7)
    sender = make_sender(db, queue, settings, provider, Clock(later))
    assert sender.run_once(later).counts == {"sent": 1}

    records = json_lines(capfd.readouterr().err)
    (retry,) = [r for r in records if r["event"] == "delivery retry"]
    assert (retry["reminder_id"], retry["run_time_utc"]) == (rid, NOW_ISO)
    assert (retry["attempt"], retry["provider"], retry["level"]) == (1, "file", "warning")
    assert retry["retry_in_s"] == 7  # the Retry-After the test's provider gave
    assert retry["error"] == "503 Service Unavailable"
    (sent,) = [r for r in records if r["event"] == "delivery sent"]
    assert (sent["reminder_id"], sent["run_time_utc"]) == (rid, NOW_ISO)
    assert (sent["attempt"], sent["provider"]) == (2, "file")  # the second receive


class Refusing:
    """A primary that refuses every message before taking it (e.g. a 503)."""

    name = "primary"

    def send(self, email: OutgoingEmail, *, idempotency_key: str) -> SendReceipt:
        del email, idempotency_key
        raise TransientDeliveryError("503 from primary", ambiguous=False)


def test_failover_decisions_carry_the_occurrence(
    db: Engine,
    queue: PostgresQueue,
    settings: Settings,
    provider: CountingProvider,
    capfd: pytest.CaptureFixture[str],
    restore_logging: None,
    due: str,
) -> None:
    del restore_logging
    rid = due
    configure_logging("DEBUG", "json")  # on stderr, as every workload's main() does
    failover = FailoverProvider([Refusing(), provider], fail_max=5, reset_timeout_s=30)
    sender = make_sender(db, queue, settings, failover)  # type: ignore[arg-type]
    assert sender.run_once(NOW).counts == {"sent": 1}

    records = json_lines(capfd.readouterr().err)
    (refused,) = [r for r in records if r["logger"] == "sender.providers.failover"]
    assert refused["provider"] == "primary"
    assert (refused["reminder_id"], refused["run_time_utc"], refused["attempt"]) == (
        rid,
        NOW_ISO,
        1,
    )
    assert "503 from primary" in refused["event"]
    (sent,) = [r for r in records if r["event"] == "delivery sent"]
    assert (sent["reminder_id"], sent["provider"]) == (rid, "file")  # the backup sent it
    # Nothing bound leaks out of the send into later records.
    logging.getLogger("after.the.send").warning("unrelated")
    (after,) = json_lines(capfd.readouterr().err)
    assert "reminder_id" not in after


def test_stdlib_records_of_any_library_are_json_with_exception_as_text(
    capfd: pytest.CaptureFixture[str], restore_logging: None
) -> None:
    del restore_logging
    configure_logging("INFO", "json")
    lib = logging.getLogger("somelib.client")  # a third-party module's stdlib logger
    lib.info("connected to %s:%d", "db.example.com", 5432)
    lib.debug("below the level: not written")
    try:
        raise ConnectionResetError("peer went away")
    except ConnectionResetError:
        lib.exception("request failed")
    structlog.get_logger("ours").warning("structlog too", tries=3)

    first, failed, ours = json_lines(capfd.readouterr().err)
    assert list(first)[:4] == ["timestamp", "level", "logger", "event"]
    assert (first["level"], first["logger"], first["event"]) == (
        "info",
        "somelib.client",
        "connected to db.example.com:5432",
    )
    stamp = datetime.fromisoformat(first["timestamp"])  # ISO 8601, in UTC
    assert stamp.utcoffset() == timedelta(0)
    assert first["timestamp"].endswith("Z")
    assert failed["level"] == "error"
    assert isinstance(failed["exception"], str)
    assert failed["exception"].startswith("Traceback (most recent call last):")
    assert "ConnectionResetError: peer went away" in failed["exception"]
    assert (ours["logger"], ours["event"], ours["tries"]) == ("ours", "structlog too", 3)


def test_console_format_is_for_humans(
    capfd: pytest.CaptureFixture[str], restore_logging: None
) -> None:
    del restore_logging
    configure_logging("INFO", "console")
    logging.getLogger("somelib").info("hello", extra={"reminder_id": "r-1", "attempt": 2})
    (line,) = capfd.readouterr().err.splitlines()
    with pytest.raises(json.JSONDecodeError):
        json.loads(line)
    assert "hello" in line
    assert "reminder_id=r-1" in line
    assert "attempt=2" in line
    assert "\x1b[" not in line  # not a terminal: no colour codes


def test_a_workload_writes_json_to_stderr(database_url: str, tmp_path: Path) -> None:
    """`reminders migrate` (a real process): Alembic's own stdlib records come out as JSON
    on stderr; stdout keeps the command's answer."""
    env = {
        **os.environ,
        "DATABASE_URL": database_url,
        "STATE_DIR": str(tmp_path),
        "LOG_FORMAT": "json",
        "LOG_LEVEL": "INFO",
    }
    run = subprocess.run(
        [sys.executable, "-m", "reminders", "migrate"],
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert run.returncode == 0, run.stderr
    assert run.stdout.strip() == "database is at the newest migration"
    records = json_lines(run.stderr)
    assert any(r["logger"].startswith("alembic") for r in records), records
