"""Quiet hours through the real coordinator, queue and sender on PostgreSQL (issue 17).

Instants derived by hand from the zone rules: Europe/London is GMT (UTC+0) in January,
America/New_York EST (UTC-5). The profile's window is 22:00-07:30; 2026-01-14 23:00Z is
23:00 in London (quiet, held until 2026-01-15 07:30 GMT = 07:30Z) and 18:00 in New York
(not quiet).
"""

from __future__ import annotations

import json
import os
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from fastapi.testclient import TestClient
from prometheus_client import REGISTRY
from sqlalchemy import Engine, text

from coordinator.service import Coordinator
from reminder_core.backlog import read_backlog
from reminder_core.queue import PostgresQueue
from reminder_core.settings import Settings
from reminder_core.store import delivery_log, reminders
from tests.integration.api_support import URL, TokenFor, bearer
from tests.integration.helpers import insert_due_reminders
from tests.support.sending import Clock, CountingProvider, make_sender

DUE = datetime(2026, 1, 14, 23, 0, tzinfo=UTC)
WINDOW_END = datetime(2026, 1, 15, 7, 30, tzinfo=UTC)
NIGHT = [{"start": "22:00", "end": "07:30"}]


def set_profile(settings: Settings, zone: str, quiet_hours: list[dict[str, Any]] | None) -> None:
    entry: dict[str, Any] = {"email": "alice@example.com", "timezone": zone}
    if quiet_hours is not None:
        entry["quiet_hours"] = quiet_hours
    path = settings.effective_profiles_file
    data = json.loads(path.read_text())
    data["alice"] = entry
    path.write_text(json.dumps(data))
    # The file source re-reads on a changed mtime; make sure it changes within the test.
    stat = path.stat()
    os.utime(path, ns=(stat.st_atime_ns, stat.st_mtime_ns + 1_000_000_000))


def send(db: Engine, queue: PostgresQueue, settings: Settings, provider: CountingProvider,
         now: datetime) -> dict[str, int]:  # fmt: skip
    sender = make_sender(db, queue, settings, provider, Clock(now))
    try:
        return sender.run_once(now).counts
    finally:
        sender.close()


def claim(db: Engine, queue: PostgresQueue, now: datetime) -> None:
    Coordinator(db, queue, lookahead_s=0, batch_size=100, worker_id="c").run_once(now)


def rows(db: Engine) -> list[Any]:
    with db.connect() as conn:
        return list(
            conn.execute(
                text("SELECT run_time_utc, status, sent_at, held_until FROM delivery_log")
            ).all()
        )


def reminder_row(db: Engine) -> Any:
    with db.connect() as conn:
        return conn.execute(text("SELECT status, next_run_utc, held_until FROM reminders")).one()


def lag(held: str, what: str) -> float:
    return REGISTRY.get_sample_value(f"delivery_lag_seconds_{what}", {"held": held}) or 0.0


def test_held_until_the_window_ends_then_sent_once_with_both_instants(
    db: Engine, queue: PostgresQueue, settings: Settings, client: TestClient, token_for: TokenFor
) -> None:
    set_profile(settings, "Europe/London", NIGHT)
    provider = CountingProvider(settings.effective_mail_dir)
    insert_due_reminders(db, 1, next_run_utc=DUE, timezone="Europe/London")
    held_before, unheld_before = lag("true", "count"), lag("false", "count")
    held_sum = lag("true", "sum")

    claim(db, queue, DUE)
    assert send(db, queue, settings, provider, DUE + timedelta(seconds=5)) == {"held": 1}
    assert provider.calls == []
    assert rows(db) == []  # nothing recorded yet: the occurrence is only waiting
    status, next_run, held_until = reminder_row(db)
    assert (status, next_run, held_until) == ("claimed", DUE, WINDOW_END)

    # While held: not late for the backlog, not stuck for the claim rescuer.
    at = DUE + timedelta(hours=1)
    with db.connect() as conn:
        assert read_backlog(conn, at).next_run_lag_s == 0
    with db.begin() as conn:
        assert (
            reminders.rescue_claimed(conn, cutoff=at - timedelta(seconds=900), now=at, limit=10)
            == []
        )

    # A minute before the end the message is still hidden; just after, it is sent.
    assert send(db, queue, settings, provider, WINDOW_END - timedelta(minutes=1)) == {}
    sent_at = WINDOW_END + timedelta(seconds=2)
    assert send(db, queue, settings, provider, sent_at) == {"sent": 1}
    assert len(provider.calls) == 1
    assert rows(db) == [(DUE, "sent", sent_at, WINDOW_END)]  # due, sent and held instants
    assert reminder_row(db).status == "completed"

    # delivery_lag still runs from the due time, labelled held; the lag checks leave it out.
    assert lag("true", "count") - held_before == 1
    assert lag("true", "sum") - held_sum == pytest.approx((sent_at - DUE).total_seconds())
    assert lag("false", "count") == unheld_before
    with db.connect() as conn:
        assert delivery_log.lag_p99_since(conn, since=DUE).sent == 0

    # The user sees both instants and the hold in the reminder's delivery history.
    with db.connect() as conn:
        rid = conn.execute(text("SELECT id FROM reminders")).scalar_one()
    resp = client.get(f"{URL}/{rid}/deliveries", headers=bearer(token_for("alice")))
    assert resp.status_code == 200, resp.text
    (item,) = resp.json()["items"]
    assert (item["run_time_utc"], item["sent_at"], item["held_until"], item["status"]) == (
        "2026-01-14T23:00:00Z", "2026-01-15T07:30:02Z", "2026-01-15T07:30:00Z", "sent"
    )  # fmt: skip

    # And it is sent once: nothing comes back later.
    assert send(db, queue, settings, provider, sent_at + timedelta(hours=1)) == {}
    assert len(provider.calls) == 1


@pytest.mark.parametrize(
    ("at_claim", "at_send", "expected"),
    [
        # Claimed while the profile said London (quiet); the user moved to New York
        # (18:00 there) before the send: the zone in force at send time decides.
        ("Europe/London", "America/New_York", {"sent": 1}),
        ("America/New_York", "Europe/London", {"held": 1}),
    ],
)
def test_the_zone_in_force_at_send_time_decides(
    db: Engine,
    queue: PostgresQueue,
    settings: Settings,
    at_claim: str,
    at_send: str,
    expected: dict[str, int],
) -> None:
    provider = CountingProvider(settings.effective_mail_dir)
    set_profile(settings, at_claim, NIGHT)
    insert_due_reminders(db, 1, next_run_utc=DUE, timezone=None)  # follows the profile
    claim(db, queue, DUE)
    set_profile(settings, at_send, NIGHT)
    assert send(db, queue, settings, provider, DUE + timedelta(seconds=5)) == expected


def test_a_hold_is_not_a_misfire(db: Engine, queue: PostgresQueue, settings: Settings) -> None:
    # Daily at 23:00 London, misfire policy `skip` with 60 s of allowed lateness: held
    # 8 h 30, it is still sent at 07:30 and moved on to the next day's 23:00 (23:00Z).
    set_profile(settings, "Europe/London", NIGHT)
    provider = CountingProvider(settings.effective_mail_dir)
    with db.begin() as conn:
        conn.execute(
            text(
                "INSERT INTO reminders (user_id, title, start_local, timezone, rrule,"
                " next_run_utc, misfire_policy, max_lateness_s) VALUES ('alice', 'Night',"
                " '2026-01-14T23:00', 'Europe/London', 'FREQ=DAILY', :due, 'skip', 60)"
            ),
            {"due": DUE},
        )
    claim(db, queue, DUE)
    assert send(db, queue, settings, provider, DUE + timedelta(seconds=1)) == {"held": 1}
    assert send(db, queue, settings, provider, WINDOW_END + timedelta(seconds=10)) == {"sent": 1}
    assert [(r.run_time_utc, r.status) for r in rows(db)] == [(DUE, "sent")]
    status, next_run, _ = reminder_row(db)
    assert (status, next_run) == ("pending", DUE + timedelta(days=1))


def test_no_quiet_hours_no_hold(db: Engine, queue: PostgresQueue, settings: Settings) -> None:
    set_profile(settings, "Europe/London", None)
    provider = CountingProvider(settings.effective_mail_dir)
    insert_due_reminders(db, 1, next_run_utc=DUE, timezone="Europe/London")
    claim(db, queue, DUE)
    assert send(db, queue, settings, provider, DUE + timedelta(seconds=1)) == {"sent": 1}
    assert rows(db)[0].held_until is None


def test_broken_quiet_hours_hand_the_message_back(
    db: Engine, queue: PostgresQueue, settings: Settings
) -> None:
    # Broken profile data is retried like an unknown zone, never sent through nor lost.
    set_profile(settings, "Europe/London", [{"start": "22:00", "end": "25:00"}])
    provider = CountingProvider(settings.effective_mail_dir)
    insert_due_reminders(db, 1, next_run_utc=DUE, timezone="Europe/London")
    claim(db, queue, DUE)
    assert send(db, queue, settings, provider, DUE + timedelta(seconds=1)) == {"retry": 1}
    assert provider.calls == []
    assert rows(db) == []
