"""Bounces and complaints applied exactly once; the suppression list; paused reminders that
the sender refuses and that resume (docs/design.md, "Suppression list"; issue 6).

Expected states are the issue's: a hard bounce or complaint makes the delivery `bounced` /
`complained`, suppresses the address and pauses that user's reminders to it; a soft
bounce is recorded only; a replayed event changes nothing; an unknown message id is
stored and acknowledged; the sender records a suppressed recipient's occurrence
`suppressed` without a provider call; removal or an address change resumes.
Times: the reminders fire daily at 12:00 UTC (timezone 'UTC').
"""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import Engine, text

from coordinator.maintenance.maintainer import Maintainer
from coordinator.service import Coordinator
from reminder_core.domain.suppression import ApplyOutcome
from reminder_core.profiles import LocalProfileSource
from reminder_core.queue import PostgresQueue
from reminder_core.scheduling import ScheduleConfig
from reminder_core.settings import Settings
from reminder_core.suppression import remove_suppression
from tests.support.maintenance import make_maintainer
from tests.support.sending import Clock, CountingProvider, make_sender
from webhooks.apply import apply_event
from webhooks.events import EventKind, WebhookEvent

NOW = datetime(2030, 1, 1, 12, 0, tzinfo=UTC)
DAY = timedelta(days=1)
BODY = b'{"notificationType": "Bounce"}'


def insert(
    db: Engine,
    user_id: str,
    *,
    rrule: str | None = "FREQ=DAILY",
    status: str = "pending",
    next_run: datetime = NOW,
    title: str = "Water the plants",
) -> str:
    with db.begin() as conn:
        return str(
            conn.execute(
                text(
                    "INSERT INTO reminders (user_id, title, start_local, timezone, rrule,"
                    " next_run_utc, status) VALUES (:u, :title, '2030-01-01T12:00', 'UTC',"
                    " :rrule, :next, :status) RETURNING id"
                ),
                {"u": user_id, "title": title, "rrule": rrule, "next": next_run, "status": status},
            ).scalar_one()
        )


def tick(
    db: Engine,
    queue: PostgresQueue,
    settings: Settings,
    provider: CountingProvider,
    now: datetime,
) -> dict[str, int]:
    """One coordinator tick and one sender batch at `now`; the sender's counts."""
    Coordinator(db, queue, lookahead_s=0, batch_size=100, worker_id="c").run_once(now)
    return make_sender(db, queue, settings, provider, Clock(now)).run_once(now).counts


def maintenance(settings: Settings, db: Engine, queue: PostgresQueue) -> Maintainer:
    return make_maintainer(db, queue, settings)


def reminder(db: Engine, rid: str) -> Any:
    with db.connect() as conn:
        return conn.execute(
            text(
                "SELECT status, next_run_utc, paused_reason, suppressed_address, last_error"
                " FROM reminders WHERE id = :id"
            ),
            {"id": rid},
        ).one()


def delivery(db: Engine, rid: str, run_time: datetime) -> Any:
    with db.connect() as conn:
        return conn.execute(
            text(
                "SELECT status, error, recipient, provider, provider_message_id"
                " FROM delivery_log WHERE reminder_id = :id AND run_time_utc = :t"
            ),
            {"id": rid, "t": run_time},
        ).one()


def message_id(db: Engine, rid: str) -> str:
    with db.connect() as conn:
        return str(
            conn.execute(
                text("SELECT provider_message_id FROM delivery_log WHERE reminder_id = :id"),
                {"id": rid},
            ).scalar_one()
        )


def suppressions(db: Engine) -> list[tuple[str, str, str | None, str | None]]:
    with db.connect() as conn:
        rows = conn.execute(
            text("SELECT email, reason, provider, source_event_id FROM suppressions ORDER BY 1")
        ).all()
    return [(r.email, r.reason, r.provider, r.source_event_id) for r in rows]


def snapshot(db: Engine) -> dict[str, list[tuple[object, ...]]]:
    """Every row of every table this feature touches (for 'nothing changed')."""
    tables = ("reminders", "delivery_log", "outbox", "queue_messages", "suppressions",
              "webhook_events")  # fmt: skip
    with db.connect() as conn:
        return {
            t: sorted(tuple(map(str, r)) for r in conn.execute(text(f"SELECT * FROM {t}")))
            for t in tables
        }


def event(
    kind: EventKind,
    msg_id: str | None,
    *,
    event_id: str = "evt-1",
    recipient: str = "alice@example.com",
    reason: str = "Permanent/General: 550 5.1.1 user unknown",
) -> WebhookEvent:
    return WebhookEvent(
        provider="file",
        event_id=event_id,
        kind=kind,
        provider_message_id=msg_id,
        recipient=recipient,
        reason=reason,
        occurred_at=NOW + timedelta(minutes=1),
    )


def apply(db: Engine, ev: WebhookEvent, now: datetime = NOW + timedelta(minutes=2)):
    with db.begin() as conn:
        return apply_event(conn, ev, raw_body=BODY, now=now)


def set_email(settings: Settings, user_id: str, email: str) -> None:
    path = Path(settings.effective_profiles_file)
    data = json.loads(path.read_text())
    data[user_id] = {**data.get(user_id, {"timezone": "UTC"}), "email": email}
    path.write_text(json.dumps(data))


@pytest.fixture
def sent(db, queue, settings, provider) -> dict[str, str]:
    """alice: `a` sent at NOW (then pending for tomorrow), `b` due tomorrow, `c` paused by
    her, `done` completed; bob: `bob` due tomorrow."""
    ids = {
        "a": insert(db, "alice"),
        "b": insert(db, "alice", next_run=NOW + DAY),
        "c": insert(db, "alice", status="paused", next_run=NOW + DAY),
        "done": insert(db, "alice", rrule=None, status="completed", next_run=NOW),
        "bob": insert(db, "bob", next_run=NOW + DAY),
    }
    with db.begin() as conn:
        conn.execute(text("UPDATE reminders SET next_run_utc = NULL WHERE id = :id"),
                     {"id": ids["done"]})  # fmt: skip
    assert tick(db, queue, settings, provider, NOW) == {"sent": 1}
    assert reminder(db, ids["a"]).status == "pending"
    return ids


@pytest.mark.parametrize(
    ("kind", "delivery_status", "reason"),
    [
        (EventKind.HARD_BOUNCE, "bounced", "bounce"),
        (EventKind.COMPLAINT, "complained", "complaint"),
    ],
)
def test_hard_bounce_or_complaint_suppresses_and_pauses_that_users_reminders(
    db, queue, settings, provider, sent, kind, delivery_status, reason
) -> None:
    result = apply(db, event(kind, message_id(db, sent["a"])))

    assert result.outcome is ApplyOutcome.SUPPRESSED
    assert result.delivery_status == delivery_status
    assert result.suppressed_address == "alice@example.com"
    assert result.newly_suppressed
    assert sorted(map(str, result.paused_reminder_ids)) == sorted([sent["a"], sent["b"]])
    d = delivery(db, sent["a"], NOW)
    assert d.status == delivery_status
    assert "550 5.1.1 user unknown" in d.error
    assert suppressions(db) == [("alice@example.com", reason, "file", "evt-1")]
    for key in ("a", "b"):
        r = reminder(db, sent[key])
        assert (r.status, r.suppressed_address) == ("paused", "alice@example.com")
        assert "suppression list" in r.paused_reason
    # Paused by alice herself: not taken over by the suppression (she resumes it).
    assert reminder(db, sent["c"])[2:4] == (None, None)
    assert reminder(db, sent["done"]).status == "completed"
    assert reminder(db, sent["bob"]).status == "pending"

    # Tomorrow: bob's reminder is sent, alice's are not (paused: not even claimed).
    provider.calls.clear()
    assert tick(db, queue, settings, provider, NOW + DAY) == {"sent": 1}
    assert [k.split("-2030")[0] for k in provider.calls] == [sent["bob"]]


def test_in_flight_occurrence_of_a_paused_reminder_is_recorded_suppressed(
    db, queue, settings, provider, sent
) -> None:
    # b's occurrence is claimed (its message queued) before the bounce arrives.
    Coordinator(db, queue, lookahead_s=0, batch_size=100, worker_id="c").run_once(NOW + DAY)
    apply(db, event(EventKind.HARD_BOUNCE, message_id(db, sent["a"])))
    provider.calls.clear()

    counts = make_sender(db, queue, settings, provider, Clock(NOW + DAY)).run_once(NOW + DAY)
    assert counts.counts == {"sent": 1, "suppressed": 2}  # bob's is sent
    assert [k.split("-2030")[0] for k in provider.calls] == [sent["bob"]]
    for key in ("a", "b"):
        assert delivery(db, sent[key], NOW + DAY).status == "suppressed"
        assert reminder(db, sent[key]).status == "paused"


def test_sender_refuses_a_suppressed_address_of_another_user(
    db, queue, settings, provider, sent
) -> None:
    apply(db, event(EventKind.HARD_BOUNCE, message_id(db, sent["a"])))
    # dave's profile has the same address in other case: the list is case-folded.
    set_email(settings, "dave", "  Alice@EXAMPLE.com")
    recurring = insert(db, "dave", next_run=NOW + DAY)
    one_time = insert(db, "dave", rrule=None, next_run=NOW + DAY)
    provider.calls.clear()

    counts = tick(db, queue, settings, provider, NOW + DAY)
    assert counts == {"sent": 1, "suppressed": 2}  # bob's is sent
    assert [k.split("-2030")[0] for k in provider.calls] == [sent["bob"]]
    for rid in (recurring, one_time):
        d = delivery(db, rid, NOW + DAY)
        assert (d.status, d.provider) == ("suppressed", None)
        assert "alice@example.com is on the suppression list" in d.error
    r = reminder(db, recurring)
    assert (r.status, r.suppressed_address, r.next_run_utc) == (
        "paused", "alice@example.com", NOW + DAY)  # fmt: skip
    # A one-time reminder has nothing left to send once its occurrence is recorded.
    r = reminder(db, one_time)
    assert (r.status, r.next_run_utc, r.suppressed_address) == ("failed", None, None)
    assert "suppression list" in r.last_error


def test_soft_bounce_is_recorded_only(db, sent) -> None:
    before = snapshot(db)
    result = apply(db, event(EventKind.SOFT_BOUNCE, message_id(db, sent["a"]),
                             reason="Transient/MailboxFull"))  # fmt: skip
    assert result.outcome is ApplyOutcome.RECORDED
    assert (result.delivery_status, result.suppressed_address) == (None, None)
    after = snapshot(db)
    assert {t: rows for t, rows in after.items() if t != "webhook_events"} == {
        t: rows for t, rows in before.items() if t != "webhook_events"
    }
    with db.connect() as conn:
        row = conn.execute(
            text("SELECT kind, outcome, delivery_id, raw_body, reason FROM webhook_events")
        ).one()
    assert (row.kind, row.outcome, row.raw_body) == ("soft_bounce", "recorded", BODY.decode())
    assert row.delivery_id is not None
    assert row.reason == "Transient/MailboxFull"


def test_a_replayed_event_changes_nothing(db, settings, sent) -> None:
    ev = event(EventKind.HARD_BOUNCE, message_id(db, sent["a"]))
    assert apply(db, ev).outcome is ApplyOutcome.SUPPRESSED
    # The address is taken off the list and the reminders resumed by the operator; the
    # provider then retries the same event (same id): it must not suppress again.
    profiles = LocalProfileSource(settings.effective_profiles_file)
    config = ScheduleConfig.from_settings(settings)
    remove_suppression(db, "alice@example.com", profiles, now=NOW + timedelta(minutes=5),
                       config=config)  # fmt: skip
    before = snapshot(db)
    replay = apply(db, ev, now=NOW + timedelta(minutes=10))
    assert replay.outcome is ApplyOutcome.DUPLICATE
    assert replay.duplicate
    assert snapshot(db) == before
    # Even with another kind under the same id (ids are unique per provider).
    assert apply(db, event(EventKind.COMPLAINT, message_id(db, sent["a"]))).duplicate
    assert snapshot(db) == before


@pytest.mark.usefixtures("sent")
def test_unknown_message_id_is_stored_and_acknowledged(db) -> None:
    before = snapshot(db)
    result = apply(db, event(EventKind.HARD_BOUNCE, "<not-ours@example.com>"))
    assert result.outcome is ApplyOutcome.UNMATCHED
    assert result.event_row_id is not None
    assert result.delivery_id is None
    after = snapshot(db)
    assert len(after["webhook_events"]) == 1
    assert {t: r for t, r in after.items() if t != "webhook_events"} == {
        t: r for t, r in before.items() if t != "webhook_events"
    }
    # No message id at all (some providers' events omit it): the same.
    assert apply(db, event(EventKind.COMPLAINT, None, event_id="evt-2")).outcome is (
        ApplyOutcome.UNMATCHED
    )


def test_an_event_that_beats_the_senders_commit_is_applied_by_maintenance(
    db, queue, settings, provider
) -> None:
    rid = insert(db, "alice")
    # The file sink's message id is <key@reminders>, key = <reminder id>-<run time>.
    early = apply(db, event(EventKind.HARD_BOUNCE, f"<{rid}-20300101T120000Z@reminders>"),
                  now=NOW - timedelta(seconds=1))  # fmt: skip
    assert early.outcome is ApplyOutcome.UNMATCHED
    assert tick(db, queue, settings, provider, NOW) == {"sent": 1}

    counts = maintenance(settings, db, queue).run_once(NOW + timedelta(seconds=10)).counts
    assert counts.get("rematched") == 1
    assert delivery(db, rid, NOW).status == "bounced"
    assert suppressions(db) == [("alice@example.com", "bounce", "file", "evt-1")]
    assert reminder(db, rid).status == "paused"
    with db.connect() as conn:
        assert conn.execute(text("SELECT outcome FROM webhook_events")).scalar_one() == (
            "suppressed"
        )


def test_removal_resumes_the_reminders_paused_by_that_entry(db, queue, settings, provider, sent):
    apply(db, event(EventKind.HARD_BOUNCE, message_id(db, sent["a"])))
    later = NOW + 3 * DAY + timedelta(hours=3)  # 2030-01-04 15:00Z
    result = remove_suppression(
        db, "ALICE@example.com", LocalProfileSource(settings.effective_profiles_file),
        now=later, config=ScheduleConfig.from_settings(settings),
    )  # fmt: skip
    assert (result.removed, result.resumed, result.left_paused) == (True, 2, 0)
    assert suppressions(db) == []
    # Daily at 12:00Z: the first occurrence at or after 2030-01-04 15:00Z is 01-05 12:00Z
    # (the ones during the pause are not sent, as for a resume by the user).
    for key in ("a", "b"):
        r = reminder(db, sent[key])
        assert (r.status, r.next_run_utc, r.paused_reason, r.suppressed_address) == (
            "pending", datetime(2030, 1, 5, 12, tzinfo=UTC), None, None)  # fmt: skip
    assert reminder(db, sent["c"]).status == "paused"  # alice's own pause stays
    assert tick(db, queue, settings, provider, datetime(2030, 1, 5, 12, tzinfo=UTC)) == {"sent": 3}


def test_a_changed_profile_address_resumes_at_the_next_maintenance_tick(
    db, queue, settings, provider, sent
) -> None:
    apply(db, event(EventKind.COMPLAINT, message_id(db, sent["a"])))
    m = maintenance(settings, db, queue)
    # Same address: nothing to resume.
    assert "suppression_resumed" not in m.run_once(NOW + timedelta(minutes=3)).counts
    assert reminder(db, sent["a"]).status == "paused"

    set_email(settings, "alice", "alice.new@example.com")
    later = NOW + DAY + timedelta(hours=1)  # 2030-01-02 13:00Z
    assert m.run_once(later).counts.get("suppression_resumed") == 2
    for key in ("a", "b"):
        r = reminder(db, sent[key])
        assert (r.status, r.next_run_utc, r.suppressed_address) == (
            "pending", datetime(2030, 1, 3, 12, tzinfo=UTC), None)  # fmt: skip
    # The old address stays suppressed; the new one receives.
    assert suppressions(db)[0][0] == "alice@example.com"
    provider.calls.clear()
    assert tick(db, queue, settings, provider, datetime(2030, 1, 3, 12, tzinfo=UTC)) == {"sent": 3}


def test_an_address_changed_to_another_suppressed_one_stays_paused(
    db, queue, settings, sent
) -> None:
    apply(db, event(EventKind.HARD_BOUNCE, message_id(db, sent["a"])))
    with db.begin() as conn:
        conn.execute(
            text("INSERT INTO suppressions (email, reason) VALUES ('old@example.com', 'complaint')")
        )
    set_email(settings, "alice", "Old@Example.com")
    m = maintenance(settings, db, queue)
    m.run_once(NOW + timedelta(minutes=3))
    r = reminder(db, sent["a"])
    assert (r.status, r.suppressed_address) == ("paused", "old@example.com")
    assert "complaint" in r.paused_reason


def test_cli_lists_and_removes_an_entry(db, settings: Settings, database_url: str) -> None:
    from typer.testing import CliRunner

    from reminders.cli import app

    env = {
        "DATABASE_URL": database_url,
        "QUEUE_URL": "postgres://reminders",
        "PROFILES_FILE": str(settings.effective_profiles_file),
        "STATE_DIR": str(settings.state_dir),
    }
    # A one-time reminder paused by a bounce keeps its time when it resumes.
    rid = insert(db, "alice", rrule=None, next_run=NOW + DAY)
    ev = event(EventKind.HARD_BOUNCE, "<m1@example.com>")
    with db.begin() as conn:
        conn.execute(
            text(
                "INSERT INTO suppressions (email, reason, provider, source_event_id, detail)"
                " VALUES ('alice@example.com', 'bounce', 'file', :e, :d)"
            ),
            {"e": ev.event_id, "d": ev.reason},
        )
        conn.execute(
            text(
                "UPDATE reminders SET status = 'paused', suppressed_address = 'alice@example.com',"
                " paused_reason = 'bounced' WHERE id = :id"
            ),
            {"id": rid},
        )
    runner = CliRunner()

    listed = runner.invoke(app, ["suppressions", "list"], env=env)
    assert listed.exit_code == 0, listed.output
    assert "alice@example.com" in listed.output
    assert "bounce" in listed.output

    removed = runner.invoke(app, ["suppressions", "remove", "Alice@Example.COM"], env=env)
    assert removed.exit_code == 0, removed.output
    assert "reminders resumed: 1" in removed.output
    # The entry named as the list holds it (case-folded), not as typed (trial helper-59).
    assert "removed: alice@example.com;" in removed.output
    assert suppressions(db) == []
    r = reminder(db, rid)
    assert (r.status, r.next_run_utc, r.suppressed_address) == ("pending", NOW + DAY, None)

    again = runner.invoke(app, ["suppressions", "remove", "alice@example.com"], env=env)
    assert again.exit_code == 1
    assert "not on the suppression list" in again.output


def test_a_replayed_dead_letter_to_a_suppressed_address_is_not_sent(
    db, queue, settings, provider
) -> None:
    from reminder_core.dlq import replay

    # A one-time reminder of bob that failed through the dead-letter queue...
    rid = insert(db, "bob", rrule=None, status="failed", next_run=NOW)
    with db.begin() as conn:
        conn.execute(text("UPDATE reminders SET next_run_utc = NULL WHERE id = :id"), {"id": rid})
        conn.execute(
            text(
                "INSERT INTO delivery_log (reminder_id, user_id, run_time_utc, status, error)"
                " VALUES (:r, 'bob', :t, 'failed', 'dead-lettered after 5 receives')"
            ),
            {"r": rid, "t": NOW},
        )
        conn.execute(
            text(
                "INSERT INTO queue_messages (queue_name, body, visible_at, receive_count,"
                " dead_lettered, dead_lettered_at) VALUES ('reminders', CAST(:b AS jsonb),"
                " :t, 5, true, :t)"
            ),
            {
                "b": json.dumps(
                    {
                        "reminder_id": rid,
                        "user_id": "bob",
                        "version": 1,
                        "run_time_utc": NOW.isoformat(),
                    }
                ),
                "t": NOW,
            },
        )
        # ...while his address got suppressed (e.g. a complaint about another email).
        conn.execute(
            text("INSERT INTO suppressions (email, reason) VALUES ('bob@example.com', 'complaint')")
        )
    later = NOW + timedelta(hours=1)
    assert replay(db, queue, None, now=later).redriven == 1

    counts = make_sender(db, queue, settings, provider, Clock(later)).run_once(later).counts
    assert counts == {"suppressed": 1}
    assert provider.calls == []
    d = delivery(db, rid, NOW)
    assert d.status == "suppressed"
    assert "bob@example.com is on the suppression list (complaint)" in d.error
