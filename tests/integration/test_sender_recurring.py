"""Sender with recurring reminders: advancing in the zone in force, COUNT, misfires.

Expected instants are derived from the zone rules, stated next to each: America/New_York
is UTC-5 (EST) in winter and UTC-4 (EDT) from the second Sunday of March (2030-03-10);
Europe/Paris is UTC+1 (CET) in winter.
"""

from __future__ import annotations

import json
from datetime import UTC, datetime
from pathlib import Path

from sqlalchemy import Engine, text

from coordinator.service import Coordinator
from reminder_core.errors import TransientDeliveryError
from reminder_core.queue import PostgresQueue
from reminder_core.settings import Settings
from tests.support.sending import Clock, CountingProvider, make_sender


def z(*args: int) -> datetime:
    return datetime(*args, tzinfo=UTC)  # type: ignore[misc]


def insert(
    db: Engine,
    *,
    start_local: str,
    rrule: str,
    next_run: datetime,
    timezone: str | None = None,
    misfire: str = "latest",
    max_lateness_s: int = 3600,
) -> str:
    with db.begin() as conn:
        return str(
            conn.execute(
                text(
                    "INSERT INTO reminders (user_id, title, start_local, timezone, rrule,"
                    " next_run_utc, misfire_policy, max_lateness_s) VALUES ('alice',"
                    " 'Standup', :start, :tz, :rrule, :next, :misfire, :lateness) RETURNING id"
                ),
                {
                    "start": start_local,
                    "tz": timezone,
                    "rrule": rrule,
                    "next": next_run,
                    "misfire": misfire,
                    "lateness": max_lateness_s,
                },
            ).scalar_one()
        )


def tick(db: Engine, queue: PostgresQueue, settings: Settings, provider: CountingProvider,
         now: datetime) -> dict[str, int]:  # fmt: skip
    Coordinator(db, queue, lookahead_s=0, batch_size=100, worker_id="c").run_once(now)
    sender = make_sender(db, queue, settings, provider, Clock(now))
    return sender.run_once(now).counts


def reminder(db: Engine, rid: str) -> tuple[str, datetime | None]:
    with db.connect() as conn:
        row = conn.execute(
            text("SELECT status, next_run_utc FROM reminders WHERE id = :id"), {"id": rid}
        ).one()
    return row.status, row.next_run_utc


def deliveries(db: Engine, rid: str) -> list[tuple[datetime, str]]:
    with db.connect() as conn:
        rows = conn.execute(
            text(
                "SELECT run_time_utc, status FROM delivery_log WHERE reminder_id = :id"
                " ORDER BY run_time_utc"
            ),
            {"id": rid},
        ).all()
    return [(r.run_time_utc, r.status) for r in rows]


def test_daily_advances_to_the_next_local_0900_across_dst(db, queue, settings, provider) -> None:
    # 2030-03-09 09:00 EST = 14:00Z; the next day DST has begun: 09:00 EDT = 13:00Z.
    rid = insert(db, start_local="2030-03-01T09:00", rrule="FREQ=DAILY", next_run=z(2030, 3, 9, 14))
    assert tick(db, queue, settings, provider, z(2030, 3, 9, 14)) == {"sent": 1}
    assert reminder(db, rid) == ("pending", z(2030, 3, 10, 13))
    assert tick(db, queue, settings, provider, z(2030, 3, 10, 13)) == {"sent": 1}
    assert reminder(db, rid) == ("pending", z(2030, 3, 11, 13))
    assert [d for d, _ in deliveries(db, rid)] == [z(2030, 3, 9, 14), z(2030, 3, 10, 13)]
    assert len(provider.calls) == 2


def test_a_changed_profile_zone_takes_effect_on_the_next_occurrence(
    db, queue, settings, provider
) -> None:
    # Sent 2030-01-01 09:00 EST (14:00Z); then alice moves to Paris: the next occurrence
    # is 2030-01-02 09:00 CET = 08:00Z.
    rid = insert(db, start_local="2030-01-01T09:00", rrule="FREQ=DAILY", next_run=z(2030, 1, 1, 14))
    profiles = Path(settings.effective_profiles_file)
    data = json.loads(profiles.read_text())
    data["alice"]["timezone"] = "Europe/Paris"
    profiles.write_text(json.dumps(data))
    assert tick(db, queue, settings, provider, z(2030, 1, 1, 14)) == {"sent": 1}
    assert reminder(db, rid) == ("pending", z(2030, 1, 2, 8))


def test_count_exhausted_completes(db, queue, settings, provider) -> None:
    rid = insert(
        db,
        start_local="2030-01-01T09:00",
        rrule="FREQ=DAILY;COUNT=2",
        timezone="UTC",
        next_run=z(2030, 1, 1, 9),
    )
    tick(db, queue, settings, provider, z(2030, 1, 1, 9))
    assert reminder(db, rid) == ("pending", z(2030, 1, 2, 9))
    tick(db, queue, settings, provider, z(2030, 1, 2, 9))
    assert reminder(db, rid) == ("completed", None)


def count_progress(db: Engine, rid: str) -> object:
    with db.connect() as conn:
        return conn.execute(
            text("SELECT count_progress FROM reminders WHERE id = :id"), {"id": rid}
        ).scalar_one()


def test_the_sender_keeps_the_count_progress_and_the_count_still_ends_on_time(
    db, queue, settings, provider
) -> None:
    # Issue 14, item 4: the sender stores how much of COUNT is used up, so the next
    # advance need not count from the start. COUNT=3 daily from 2030-01-01 09:00 UTC is
    # Jan 1, 2, 3 (RFC 5545 §3.3.10), then nothing.
    rid = insert(db, start_local="2030-01-01T09:00", rrule="FREQ=DAILY;COUNT=3",
                 timezone="UTC", next_run=z(2030, 1, 1, 9))  # fmt: skip
    assert count_progress(db, rid) is None
    tick(db, queue, settings, provider, z(2030, 1, 1, 9))
    assert reminder(db, rid) == ("pending", z(2030, 1, 2, 9))
    tick(db, queue, settings, provider, z(2030, 1, 2, 9))
    assert reminder(db, rid) == ("pending", z(2030, 1, 3, 9))
    # From the second advance on, an instance lies a zone's offset spread before the time
    # asked about: the count can resume there, and is kept.
    kept = count_progress(db, rid)
    assert isinstance(kept, dict)
    assert kept["zone"] == "UTC"
    tick(db, queue, settings, provider, z(2030, 1, 3, 9))
    assert reminder(db, rid) == ("completed", None)
    assert [status for _, status in deliveries(db, rid)] == ["sent", "sent", "sent"]


def test_the_sender_counts_from_the_stored_progress(db, queue, settings, provider) -> None:
    # The stored progress is what the next advance counts from (recurrence.CountProgress:
    # `counted` instances before `local`). Told that 2 instances came before 2030-01-01
    # 12:00, the sender takes Jan 2 09:00 as the third and last of COUNT=3: after sending
    # it the reminder is complete (counted from the start it would go on to Jan 3).
    rid = insert(db, start_local="2030-01-01T09:00", rrule="FREQ=DAILY;COUNT=3",
                 timezone="UTC", next_run=z(2030, 1, 2, 9))  # fmt: skip
    with db.begin() as conn:
        conn.execute(
            text("UPDATE reminders SET count_progress = CAST(:p AS jsonb) WHERE id = :id"),
            {"p": json.dumps({"local": "2030-01-01T12:00:00", "counted": 2, "zone": "UTC"}),
             "id": rid},
        )  # fmt: skip
    tick(db, queue, settings, provider, z(2030, 1, 2, 9))
    assert reminder(db, rid) == ("completed", None)


def test_latest_after_downtime_sends_one_email_and_records_the_rest_missed(
    db, queue, settings, provider
) -> None:
    # Due since 2030-01-01 09:00 UTC; the system comes back 2030-01-05 09:30.
    rid = insert(
        db, start_local="2030-01-01T09:00", rrule="FREQ=DAILY", timezone="UTC",
        next_run=z(2030, 1, 1, 9),
    )  # fmt: skip
    assert tick(db, queue, settings, provider, z(2030, 1, 5, 9, 30)) == {"sent": 1}
    assert deliveries(db, rid) == [
        (z(2030, 1, 1, 9), "missed"),
        (z(2030, 1, 2, 9), "missed"),
        (z(2030, 1, 3, 9), "missed"),
        (z(2030, 1, 4, 9), "missed"),
        (z(2030, 1, 5, 9), "sent"),
    ]
    assert provider.calls == [f"{rid}-20300105T090000Z"]
    assert reminder(db, rid) == ("pending", z(2030, 1, 6, 9))


def test_skip_records_everything_too_late_and_sends_nothing(db, queue, settings, provider) -> None:
    rid = insert(
        db, start_local="2030-01-01T09:00", rrule="FREQ=DAILY", timezone="UTC",
        next_run=z(2030, 1, 1, 9), misfire="skip", max_lateness_s=3600,
    )  # fmt: skip
    # 2030-01-03 12:00: the 1st, 2nd and 3rd are all more than an hour late.
    assert tick(db, queue, settings, provider, z(2030, 1, 3, 12)) == {"missed": 1}
    assert [s for _, s in deliveries(db, rid)] == ["missed"] * 3
    assert provider.calls == []
    assert reminder(db, rid) == ("pending", z(2030, 1, 4, 9))


def test_all_sends_every_missed_occurrence_oldest_first(db, queue, settings, provider) -> None:
    rid = insert(
        db, start_local="2030-01-01T09:00", rrule="FREQ=DAILY", timezone="UTC",
        next_run=z(2030, 1, 1, 9), misfire="all",
    )  # fmt: skip
    now = z(2030, 1, 3, 12)
    for _ in range(4):
        tick(db, queue, settings, provider, now)
    assert [(d.day, s) for d, s in deliveries(db, rid)] == [(1, "sent"), (2, "sent"), (3, "sent")]
    assert reminder(db, rid) == ("pending", z(2030, 1, 4, 9))


def test_a_retry_keeps_the_occurrence_the_first_attempt_chose(
    db, queue, settings, provider
) -> None:
    rid = insert(
        db, start_local="2030-01-01T09:00", rrule="FREQ=DAILY", timezone="UTC",
        next_run=z(2030, 1, 1, 9),
    )  # fmt: skip
    provider.fail_next.append(TransientDeliveryError("503", retry_after_s=1))
    assert tick(db, queue, settings, provider, z(2030, 1, 3, 9, 30)) == {"retry": 1}
    # A day later the retry still sends the 3rd (in flight), not the 4th.
    assert tick(db, queue, settings, provider, z(2030, 1, 4, 9, 30)) == {"sent": 1}
    assert [(d.day, s) for d, s in deliveries(db, rid)] == [
        (1, "missed"),
        (2, "missed"),
        (3, "sent"),
    ]
    assert set(provider.calls) == {f"{rid}-20300103T090000Z"}


def test_reschedule_while_claimed_supersedes_the_claimed_occurrence(
    db, queue, settings, provider
) -> None:
    rid = insert(
        db, start_local="2030-01-01T09:00", rrule="FREQ=DAILY", timezone="UTC",
        next_run=z(2030, 1, 1, 9),
    )  # fmt: skip
    Coordinator(db, queue, lookahead_s=0, batch_size=10, worker_id="c").run_once(z(2030, 1, 1, 9))
    with db.begin() as conn:  # what PATCH does: new schedule, new next_run, back to pending
        conn.execute(
            text(
                "UPDATE reminders SET rrule = 'FREQ=DAILY;BYHOUR=18', next_run_utc = :n,"
                " status = 'pending', claimed_by = NULL, claimed_at = NULL,"
                " version = version + 1 WHERE id = :id"
            ),
            {"n": z(2030, 1, 1, 18), "id": rid},
        )
    counts = tick(db, queue, settings, provider, z(2030, 1, 1, 9, 0, 1))
    assert counts == {"cancelled": 1}
    assert provider.calls == []
    assert reminder(db, rid) == ("pending", z(2030, 1, 1, 18))
    assert deliveries(db, rid) == [(z(2030, 1, 1, 9), "cancelled")]
