"""Delivery under provider faults, dead letters and reapers (issue 4), with the sender
talking HTTP to a real local fake provider (tests/support/fake_provider.py) that
deduplicates on the Idempotency-Key as Resend documents.

Expected behaviour is docs/design.md, "Delivery guarantees": transient errors (timeouts,
connection errors, 429, 5xx) retry with backoff honouring Retry-After; permanent ones
(400) fail at once; after the maximum receive count a message is dead-lettered, its
occurrence recorded `failed` and a recurring reminder advanced; nothing stays `claimed` or
`sending` forever.
"""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta

import pytest
from sqlalchemy import Engine, text

from coordinator.maintenance.maintainer import MaintenanceStepFailed
from coordinator.service import Coordinator
from reminder_core.clock import utcnow
from reminder_core.dlq import replay
from reminder_core.domain.retry import RetryPolicy
from reminder_core.errors import InfrastructureError
from reminder_core.metrics import NEXT_RUN_LAG
from reminder_core.queue import PostgresQueue
from reminder_core.settings import Settings
from sender.service import Sender
from tests.integration.helpers import insert_due_reminders
from tests.support.fake_provider import FakeProvider
from tests.support.maintenance import make_maintainer
from tests.support.providers import resend_provider
from tests.support.sending import make_sender

FAST = RetryPolicy(attempts=4, base_s=0.05, max_wait_s=5, budget_s=60)


@pytest.fixture
def fake() -> Iterator[FakeProvider]:
    provider = FakeProvider().start()
    yield provider
    provider.stop()


@pytest.fixture
def queue(db: Engine) -> PostgresQueue:
    return PostgresQueue(db, name="reminders", max_receive_count=3)


class Clock:
    def __init__(self, now: datetime) -> None:
        self.now = now

    def __call__(self) -> datetime:
        return self.now


def faults_sender(
    db: Engine,
    queue: PostgresQueue,
    settings: Settings,
    fake: FakeProvider,
    *,
    retry: RetryPolicy = FAST,
    clock: Clock | None = None,
    read_timeout_s: float = 5.0,
    visibility_timeout_s: float = 30,
) -> Sender:
    """tests.support.sending.make_sender calling the fake Resend at `fake` (real time
    unless `clock` is given)."""
    provider = resend_provider(fake.url, read_timeout_s=read_timeout_s, connect_timeout_s=2.0)
    return make_sender(
        db, queue, settings, provider, clock or utcnow, retry=retry,
        visibility_timeout_s=visibility_timeout_s,
    )  # fmt: skip


def claim(db: Engine, queue: PostgresQueue, now: datetime) -> None:
    Coordinator(db, queue, lookahead_s=0, batch_size=1000, worker_id="c").run_once(now)


def delivery(db: Engine) -> tuple[str, int, str | None]:
    with db.connect() as conn:
        row = conn.execute(text("SELECT status, attempt_count, error FROM delivery_log")).one()
    return row.status, row.attempt_count, row.error


def test_429_with_retry_after_2_waits_at_least_2_seconds(db, queue, settings, fake) -> None:
    now = datetime.now(UTC)
    insert_due_reminders(db, 1, next_run_utc=now)
    claim(db, queue, now)
    fake.inject({"kind": "429", "retry_after": 2})
    assert faults_sender(db, queue, settings, fake).run_once(now).counts == {"sent": 1}
    at = [r["at"] for r in fake.state.requests]
    assert len(at) == 2
    assert at[1] - at[0] >= 2.0
    assert delivery(db)[:2] == ("sent", 2)


def test_500_three_times_then_200_is_delivered_once_with_4_attempts(
    db, queue, settings, fake
) -> None:
    now = datetime.now(UTC)
    insert_due_reminders(db, 1, next_run_utc=now)
    claim(db, queue, now)
    fake.inject({"kind": "500"}, {"kind": "500"}, {"kind": "500"})
    assert faults_sender(db, queue, settings, fake).run_once(now).counts == {"sent": 1}
    assert len(fake.state.accepted) == 1
    assert [r["status"] for r in fake.state.requests] == [500, 500, 500, 200]
    assert delivery(db)[:2] == ("sent", 4)


def test_400_fails_at_once_with_one_provider_call(db, queue, settings, fake) -> None:
    now = datetime.now(UTC)
    insert_due_reminders(db, 1, next_run_utc=now)
    claim(db, queue, now)
    fake.inject({"kind": "400"})
    assert faults_sender(db, queue, settings, fake).run_once(now).counts == {"failed": 1}
    assert len(fake.state.requests) == 1
    status, attempts, error = delivery(db)
    assert (status, attempts) == ("failed", 1)
    assert "400" in (error or "")
    with db.connect() as conn:
        assert conn.execute(text("SELECT status FROM reminders")).scalar_one() == "failed"


def test_timeout_after_sending_retries_with_the_same_key_and_sends_once(
    db, queue, settings, fake
) -> None:
    # The provider takes the message but answers after the client gave up (ambiguous):
    # the retry carries the same Idempotency-Key, so the provider accepts it once.
    now = datetime.now(UTC)
    insert_due_reminders(db, 1, next_run_utc=now)
    claim(db, queue, now)
    fake.inject({"kind": "latency", "seconds": 1.5})
    sender = faults_sender(db, queue, settings, fake, read_timeout_s=0.5)
    assert sender.run_once(now).counts == {"sent": 1}
    time.sleep(1.5)  # let the slow first request finish on the server
    keys = [r["key"] for r in fake.state.requests]
    assert len(keys) == 2
    assert len(set(keys)) == 1
    assert len(fake.state.accepted) == 1
    assert fake.state.duplicates == 1


def test_dropped_connection_is_retried(db, queue, settings, fake) -> None:
    now = datetime.now(UTC)
    insert_due_reminders(db, 1, next_run_utc=now)
    claim(db, queue, now)
    fake.inject({"kind": "drop"})
    assert faults_sender(db, queue, settings, fake).run_once(now).counts == {"sent": 1}
    assert len(fake.state.accepted) == 1


def test_always_failing_provider_dead_letters_fails_and_advances_a_recurring_reminder(
    db, queue, settings, fake
) -> None:
    now = datetime(2030, 1, 1, 9, tzinfo=UTC)
    with db.begin() as conn:
        conn.execute(
            text(
                "INSERT INTO reminders (user_id, title, start_local, timezone, rrule,"
                " next_run_utc) VALUES ('alice', 'daily', '2030-01-01T09:00', 'UTC',"
                " 'FREQ=DAILY', :n)"
            ),
            {"n": now},
        )
    claim(db, queue, now)
    fake.inject(always={"kind": "500"})
    clock = Clock(now)
    sender = faults_sender(db, queue, settings, fake, retry=RetryPolicy(attempts=1), clock=clock)
    for _ in range(6):  # each receive fails; the message comes back after its backoff
        sender.run_once(clock.now)
        clock.now += timedelta(minutes=10)
    assert queue.depth(now=clock.now).dead_lettered == 1
    assert len(fake.state.requests) == 3  # max receive count
    maintenance = make_maintainer(db, queue, settings)
    assert maintenance.run_once(clock.now).counts == {"dead_letters": 1}
    assert maintenance.run_once(clock.now).counts == {}  # recorded once
    with db.connect() as conn:
        d = conn.execute(text("SELECT status, attempt_count, error FROM delivery_log")).one()
        r = conn.execute(text("SELECT status, next_run_utc, last_error FROM reminders")).one()
    assert (d.status, d.attempt_count) == ("failed", 3)
    assert "dead-lettered" in d.error
    assert (r.status, r.next_run_utc) == ("pending", datetime(2030, 1, 2, 9, tzinfo=UTC))
    # The reminder names the last attempt's error too, not only the receive count (trial
    # helper-53: a read-only MAIL_DIR said "dead-lettered after 5 receives", nothing more).
    last_attempt = d.error.removesuffix("; dead-lettered after 3 receives")
    assert last_attempt != d.error, d.error
    assert "HTTP 500" in last_attempt, d.error
    assert r.last_error == f"dead-lettered after 3 receives; last error: {last_attempt}"


def test_replay_sends_a_dead_letter_once_and_never_resends_a_delivered_one(
    db, queue, settings, fake
) -> None:
    now = datetime(2030, 1, 1, 9, tzinfo=UTC)
    insert_due_reminders(db, 1, next_run_utc=now)  # one-time
    claim(db, queue, now)
    fake.inject(always={"kind": "500"})
    clock = Clock(now)
    sender = faults_sender(db, queue, settings, fake, retry=RetryPolicy(attempts=1), clock=clock)
    for _ in range(5):
        sender.run_once(clock.now)
        clock.now += timedelta(minutes=10)
    (letter,) = queue.dead_letters(limit=10)
    maintenance = make_maintainer(db, queue, settings)
    maintenance.run_once(clock.now)
    with db.connect() as conn:
        assert conn.execute(text("SELECT status FROM reminders")).scalar_one() == "failed"
    fake.inject()  # the provider recovers
    fake.state.always = None
    report = replay(db, queue, None, now=clock.now)
    assert (report.redriven, report.already_done, report.missing) == (1, 0, 0)
    assert sender.run_once(clock.now).counts == {"sent": 1}
    assert len(fake.state.accepted) == 1
    with db.connect() as conn:
        assert conn.execute(text("SELECT status FROM delivery_log")).scalar_one() == "sent"
        assert conn.execute(text("SELECT status FROM reminders")).scalar_one() == "completed"
    # The same occurrence dead-lettered again later (a stray duplicate): replay drops it.
    with db.begin() as conn:
        conn.execute(
            text(
                "INSERT INTO queue_messages (queue_name, body, visible_at, dead_lettered,"
                " dead_lettered_at) VALUES ('reminders', :body, :now, true, :now)"
            ),
            {"now": clock.now, "body": json.dumps(letter.body)},
        )
    report = replay(db, queue, None, now=clock.now)
    assert (report.redriven, report.already_done) == (0, 1)
    assert queue.depth(now=clock.now).dead_lettered == 0
    assert len(fake.state.requests) == 4  # 3 receives (the maximum), then the replayed send


def test_heartbeat_keeps_a_slow_send_invisible_to_other_senders(db, queue, settings, fake) -> None:
    now = datetime.now(UTC)
    insert_due_reminders(db, 1, next_run_utc=now)
    claim(db, queue, now)
    fake.inject({"kind": "latency", "seconds": 3})
    slow = faults_sender(db, queue, settings, fake, visibility_timeout_s=1.2)
    other = faults_sender(db, queue, settings, fake, visibility_timeout_s=1.2)
    done: dict[str, int] = {}
    worker = threading.Thread(target=lambda: done.update(slow.run_once(datetime.now(UTC)).counts))
    worker.start()
    time.sleep(0.3)
    seen = 0
    deadline = time.monotonic() + 2.5
    while time.monotonic() < deadline:  # well past the 1.2 s visibility timeout
        seen += other.run_once(datetime.now(UTC)).processed
        time.sleep(0.2)
    worker.join(10)
    slow.close()
    other.close()
    assert seen == 0
    assert done == {"sent": 1}
    assert len(fake.state.requests) == 1


def test_reapers_redrive_stuck_claims_and_fail_orphaned_sending_rows(db, queue, settings) -> None:
    now = datetime(2030, 1, 1, 12, tzinfo=UTC)
    insert_due_reminders(db, 2, next_run_utc=now - timedelta(hours=1))
    with db.begin() as conn:
        ids = conn.execute(text("SELECT id FROM reminders ORDER BY title")).scalars().all()
        # One stuck in claimed for an hour (its message was lost).
        conn.execute(
            text("UPDATE reminders SET status = 'claimed', claimed_by = 'dead', claimed_at = :t"
                 " WHERE id = :id"),
            {"t": now - timedelta(hours=1), "id": ids[0]},
        )  # fmt: skip
        # One cancelled, with an unheld `sending` row left by a worker that died.
        conn.execute(
            text("UPDATE reminders SET status = 'cancelled', next_run_utc = NULL WHERE id = :id"),
            {"id": ids[1]},
        )
        conn.execute(
            text("INSERT INTO delivery_log (reminder_id, user_id, run_time_utc, status,"
                 " locked_at, updated_at) VALUES (:id, 'alice', :t, 'sending', :t, :t)"),
            {"id": ids[1], "t": now - timedelta(hours=1)},
        )  # fmt: skip
    maintenance = make_maintainer(db, queue, settings)
    assert maintenance.run_once(now).counts == {"reclaimed": 1, "abandoned": 1}
    with db.connect() as conn:
        first = conn.execute(
            text("SELECT status, next_run_utc FROM reminders WHERE id = :id"), {"id": ids[0]}
        ).one()
        row = conn.execute(text("SELECT status, error FROM delivery_log")).one()
    assert (first.status, first.next_run_utc) == ("pending", now - timedelta(hours=1))
    assert row.status == "failed"
    assert "abandoned" in row.error


def test_the_reaper_leaves_the_row_of_a_paused_reminder_that_still_points_at_it(
    db, queue, settings, fake
) -> None:
    # Break-it trial: a sender died holding an occurrence, its user paused the reminder,
    # and the reaper recorded the row `failed` ("abandoned") although the reminder still
    # pointed at that occurrence; on resume the send was a "duplicate" and the reminder
    # ended `failed` without an email. The row must wait for the resume.
    now = datetime(2030, 1, 1, 12, tzinfo=UTC)
    due = now - timedelta(hours=1)
    insert_due_reminders(db, 1, next_run_utc=due)
    with db.begin() as conn:
        conn.execute(text("UPDATE reminders SET status = 'paused'"))
        conn.execute(
            text("INSERT INTO delivery_log (reminder_id, user_id, run_time_utc, status,"
                 " locked_at, updated_at) SELECT id, 'alice', :t, 'sending', :t, :t"
                 " FROM reminders"),
            {"t": due},
        )  # fmt: skip
    maintenance = make_maintainer(db, queue, settings)
    assert "abandoned" not in maintenance.run_once(now).counts
    with db.begin() as conn:  # resumed: pending again at the same occurrence
        conn.execute(text("UPDATE reminders SET status = 'pending'"))
    claim(db, queue, now)
    assert faults_sender(db, queue, settings, fake).run_once(now).counts == {"sent": 1}
    with db.connect() as conn:
        row = conn.execute(
            text("SELECT d.status, r.status AS r_status FROM delivery_log d"
                 " JOIN reminders r ON r.id = d.reminder_id")
        ).one()  # fmt: skip
    assert (row.status, row.r_status) == ("sent", "completed")
    assert len(fake.state.accepted) == 1


def test_a_dead_letter_is_not_recorded_while_its_occurrence_is_sent_under_a_live_lease(
    db, queue, settings
) -> None:
    # A duplicate message dead-lettered while another worker still sends the occurrence
    # must not turn that live `sending` row into `failed` (the send would then succeed
    # with its completion refused). It is recorded once the lease has ended.
    now = datetime(2030, 1, 1, 9, tzinfo=UTC)
    insert_due_reminders(db, 1, next_run_utc=now)
    claim(db, queue, now)
    (msg,) = queue.receive(now=now, max_messages=1, visibility_timeout_s=30)
    with db.begin() as conn:
        conn.execute(
            text(
                "INSERT INTO delivery_log (reminder_id, user_id, run_time_utc, status,"
                " locked_at, lease_token) VALUES (:r, 'alice', :t, 'sending', :t,"
                " gen_random_uuid())"
            ),
            {"r": msg.body["reminder_id"], "t": now},
        )
        conn.execute(
            text("UPDATE queue_messages SET dead_lettered = true, dead_lettered_at = :t"),
            {"t": now},
        )
    maintenance = make_maintainer(db, queue, settings, lease_s=60)
    letters = maintenance.service("dead_letters")
    assert letters.run_once(now + timedelta(seconds=10)).counts == {"dead_letters": 0}
    assert delivery(db)[0] == "sending"
    # The holder finishes; after the lease the dead letter is recorded as a no-op.
    with db.begin() as conn:
        conn.execute(text("UPDATE delivery_log SET status = 'sent', sent_at = :t"), {"t": now})
    assert letters.run_once(now + timedelta(seconds=61)).counts == {"dead_letters": 1}
    assert delivery(db)[0] == "sent"


class DownProfiles:
    """A profile source whose service is down (as HttpProfileSource raises after its
    retries): InfrastructureError on every lookup."""

    def get(self, user_id: str) -> None:
        raise InfrastructureError(f"profile service unavailable for {user_id!r}")


def dead_letter_one(db, queue, now: datetime) -> str:
    """One due reminder claimed and its message dead-lettered (3 receives, then a 4th)."""
    insert_due_reminders(db, 1, next_run_utc=now)
    with db.connect() as conn:
        rid = conn.execute(text("SELECT id FROM reminders")).scalar_one()
    claim(db, queue, now)
    for i in range(4):
        queue.receive(now=now + timedelta(minutes=i), max_messages=10, visibility_timeout_s=30)
    assert queue.depth(now=now).dead_lettered == 1
    return str(rid)


def stuck_claim(db, now: datetime) -> None:
    """A reminder claimed an hour before `now` by a worker that is gone."""
    with db.begin() as conn:
        conn.execute(
            text(
                "INSERT INTO reminders (user_id, title, start_local, timezone, next_run_utc,"
                " status, claimed_by, claimed_at) VALUES ('bob', 'stuck', '2030-01-01T09:00',"
                " 'UTC', :at, 'claimed', 'gone', :at)"
            ),
            {"at": now - timedelta(hours=1)},
        )


def test_a_profile_outage_holds_back_only_the_dead_letters_the_other_steps_run(
    db, queue, settings
) -> None:
    # Trial finding: one dead letter whose profile lookup failed aborted every maintenance
    # tick before the reapers, the backlog gauges and retention ran.
    now = datetime(2030, 1, 1, 12, tzinfo=UTC)
    rid = dead_letter_one(db, queue, now)
    later = now + timedelta(minutes=10)  # its own claim is younger than CLAIM_TIMEOUT_S
    stuck_claim(db, later)
    down = make_maintainer(db, queue, settings, profiles=DownProfiles())
    assert down.run_once(later).counts == {"reclaimed": 1}  # the letter waits, the rest ran
    assert len(queue.dead_letters(limit=10, unrecorded_only=True)) == 1
    up = make_maintainer(db, queue, settings)
    assert up.run_once(later).counts == {"dead_letters": 1}
    with db.connect() as conn:
        status = conn.execute(
            text("SELECT status FROM delivery_log WHERE reminder_id = :r"), {"r": rid}
        ).scalar_one()
    assert status == "failed"


class BrokenDeadLetters(PostgresQueue):
    """The PostgreSQL queue whose dead-letter listing fails (a DLQ outage)."""

    def dead_letters(self, *, limit: int, unrecorded_only: bool = False) -> list:  # type: ignore[override]
        del limit, unrecorded_only
        raise InfrastructureError("dead-letter queue unreachable")


def test_a_failing_step_fails_the_tick_after_every_other_step_ran(db, settings) -> None:
    now = datetime(2030, 1, 1, 12, tzinfo=UTC)
    queue = BrokenDeadLetters(db, name="reminders", max_receive_count=3)
    stuck_claim(db, now)
    insert_due_reminders(db, 1, next_run_utc=now - timedelta(seconds=90))  # 90 s late
    maintenance = make_maintainer(db, queue, settings)
    with pytest.raises(MaintenanceStepFailed) as failed:
        maintenance.run_once(now)
    assert [name for name, _ in failed.value.failures] == ["dead_letters"]
    assert failed.value.counts == {"reclaimed": 1}
    # The backlog gauges were refreshed after the failed step: the oldest due pending
    # reminder is the stuck one, re-driven to `pending` at now - 1 h (docs/design.md,
    # "Metrics": next_run_lag).
    assert NEXT_RUN_LAG._value.get() == 3600.0
