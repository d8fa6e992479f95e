"""First sends without a lease (docs/design.md, "First sends without a lease").

On the PostgreSQL queue, with a provider that delivers each idempotency key once, the
first receive of a one-time email occurrence is sent under its message's receipt handle
alone: no `sending` row before the call, one delivery row written with the outcome (and
the reminder finished in the same statement). Everything else goes under a lease as
before: a second receive (a crash's repeat), an occurrence that has a row already (a
pin, evidence), a reminder changed since its claim, a provider that does not
deduplicate. These tests look at the rows while the provider call is under way, so each
would fail if the path taken were the other one.
"""

from __future__ import annotations

import threading
import uuid
from concurrent.futures import ThreadPoolExecutor
from datetime import timedelta
from pathlib import Path

from sqlalchemy import Engine, text

from coordinator.maintenance.dead_letters import DeadLetterRecorder
from coordinator.service import Coordinator
from reminder_core.errors import TransientDeliveryError
from reminder_core.profiles import LocalProfileSource
from reminder_core.queue import PostgresQueue
from reminder_core.scheduling import ScheduleConfig
from reminder_core.settings import Settings
from reminder_core.store import cell_moves
from reminder_core.store import reminders as reminder_store
from sender.providers.base import OutgoingEmail, SendReceipt
from tests.integration.helpers import insert_due_reminders, insert_sending_rows
from tests.support.sending import NOW, Clock, CountingProvider, make_sender


def claim(db: Engine, queue: PostgresQueue) -> None:
    Coordinator(db, queue, lookahead_s=0, batch_size=1000, worker_id="c").run_once(NOW)


def delivery_rows(db: Engine) -> list[tuple[str, bool, int, str | None]]:
    """(status, leased, attempt_count, provider) of every delivery row."""
    with db.connect() as conn:
        return [
            (r.status, r.lease_token is not None, r.attempt_count, r.provider)
            for r in conn.execute(
                text("SELECT status, lease_token, attempt_count, provider FROM delivery_log")
            )
        ]


def one_due(db: Engine, queue: PostgresQueue, settings: Settings) -> Watching:
    """One one-time reminder due at NOW and claimed (its message in `queue`); the
    provider to send it with."""
    insert_due_reminders(db, 1, next_run_utc=NOW)
    claim(db, queue)
    return Watching(settings.effective_mail_dir, db)


class Watching(CountingProvider):
    """The counting file sink that reads the delivery rows at each call (what a crash
    at that moment would leave), and can hold a call until `release` is set."""

    def __init__(self, directory: Path, db: Engine) -> None:
        super().__init__(directory)
        self.db = db
        self.seen: list[list[tuple[str, bool, int, str | None]]] = []
        self.hold_first = False
        self.release = threading.Event()
        self.accepted_first = threading.Event()

    def send(self, email: OutgoingEmail, *, idempotency_key: str) -> SendReceipt:
        self.seen.append(delivery_rows(self.db))
        receipt = super().send(email, idempotency_key=idempotency_key)
        if self.hold_first and len(self.calls) == 1:
            self.accepted_first.set()  # accepted: the email is out, its answer not back
            self.release.wait(10)
        return receipt


def test_a_first_send_writes_its_delivery_row_once_with_the_outcome(
    db: Engine, queue: PostgresQueue, settings: Settings
) -> None:
    provider = one_due(db, queue, settings)
    sender = make_sender(db, queue, settings, provider)
    assert sender.leaseless_first_send

    assert sender.run_once(NOW).counts == {"sent": 1}

    assert provider.seen == [[]]  # no row while the provider had it
    assert delivery_rows(db) == [("sent", False, 1, "file")]
    with db.connect() as conn:
        reminder = conn.execute(text("SELECT status, next_run_utc FROM reminders")).one()
        sent = conn.execute(text("SELECT sent_at, recipient FROM delivery_log")).one()
    assert tuple(reminder) == ("completed", None)  # finished in the outcome's statement
    assert tuple(sent) == (NOW, "alice@example.com")
    assert (
        queue.receive(now=NOW + timedelta(hours=1), max_messages=10, visibility_timeout_s=30) == []
    )


def test_the_same_send_under_a_lease_has_its_sending_row_during_the_call(
    db: Engine, queue: PostgresQueue, settings: Settings
) -> None:
    # The contrast that makes the test above able to fail: SENDER_LEASELESS_FIRST_SEND off.
    provider = one_due(db, queue, settings)
    sender = make_sender(db, queue, settings, provider, leaseless_first_send=False)
    assert not sender.leaseless_first_send

    assert sender.run_once(NOW).counts == {"sent": 1}

    assert provider.seen == [[("sending", True, 0, None)]]
    assert delivery_rows(db) == [("sent", False, 1, "file")]


def test_a_provider_that_does_not_deduplicate_keeps_every_send_under_a_lease(
    db: Engine, queue: PostgresQueue, settings: Settings
) -> None:
    class NoKeys(Watching):
        deduplicates_keys = False  # as SES and SMTP: a repeat would be a second email

    insert_due_reminders(db, 1, next_run_utc=NOW)
    claim(db, queue)
    provider = NoKeys(settings.effective_mail_dir, db)
    sender = make_sender(db, queue, settings, provider)

    assert not sender.leaseless_first_send
    assert sender.run_once(NOW).counts == {"sent": 1}
    assert provider.seen == [[("sending", True, 0, None)]]


def test_a_sender_dying_after_the_provider_accepted_is_repeated_under_a_lease_with_the_key(
    db: Engine, queue: PostgresQueue, settings: Settings
) -> None:
    # The first sender's call is accepted and its answer never comes back (it is held,
    # as a sender killed at that moment would leave it): the message's visibility runs
    # out, the next receive (count 2) goes under a lease and calls the provider again
    # with the same key, which delivers nothing new (the file sink, like Resend). The
    # first sender's late outcome then finds the row and records nothing.
    provider = one_due(db, queue, settings)
    provider.hold_first = True
    first = make_sender(db, queue, settings, provider, visibility_timeout_s=30)
    pool = ThreadPoolExecutor(1)
    first_done = pool.submit(first.run_once, NOW)
    assert provider.accepted_first.wait(10)

    later = NOW + timedelta(minutes=5)  # past the visibility timeout: the message is back
    second = make_sender(db, queue, settings, provider, Clock(later))
    assert second.run_once(later).counts == {"sent": 1}
    provider.release.set()
    first_tick = first_done.result(10)
    pool.shutdown()
    first.close()

    assert provider.seen[1] == [("sending", True, 0, None)]  # the repeat held a lease
    assert len(provider.calls) == 2  # one key, twice
    assert len(set(provider.calls)) == 1
    assert len(list(settings.effective_mail_dir.glob("*.eml"))) == 1  # one email
    assert delivery_rows(db) == [("sent", False, 1, "file")]
    assert first_tick.counts == {"busy": 1}  # its outcome met the row: not recorded
    with db.connect() as conn:
        assert conn.execute(text("SELECT status FROM reminders")).scalar_one() == "completed"


def test_an_occurrence_with_a_row_already_goes_under_a_lease(
    db: Engine, queue: PostgresQueue, settings: Settings
) -> None:
    # A released row (an earlier copy's transient failure, which may name the provider
    # it reached) must be taken over, not bypassed: the send goes under a lease.
    insert_due_reminders(db, 1, next_run_utc=NOW, title="Pinned")
    insert_sending_rows(db, NOW, {"Pinned 1": None}, attempt_count=1)
    claim(db, queue)
    provider = Watching(settings.effective_mail_dir, db)
    sender = make_sender(db, queue, settings, provider)

    assert sender.run_once(NOW).counts == {"sent": 1}
    assert provider.seen == [[("sending", True, 1, None)]]
    assert delivery_rows(db) == [("sent", False, 2, "file")]


def test_a_reminder_changed_since_its_claim_goes_under_a_lease(
    db: Engine, queue: PostgresQueue, settings: Settings
) -> None:
    # A change bumps the version (a pause and resume may have made a second message of
    # the occurrence): the message's version is not the reminder's, so no leaseless send.
    insert_due_reminders(db, 1, next_run_utc=NOW)
    claim(db, queue)
    with db.begin() as conn:
        conn.execute(text("UPDATE reminders SET version = version + 1"))
    provider = Watching(settings.effective_mail_dir, db)
    sender = make_sender(db, queue, settings, provider)

    assert sender.run_once(NOW).counts == {"sent": 1}
    assert provider.seen == [[("sending", True, 0, None)]]


def test_a_transient_failure_hands_the_first_send_back_and_the_retry_is_leased(
    db: Engine, queue: PostgresQueue, settings: Settings
) -> None:
    # A retry needs a row: the first failure leases the occurrence (one call per receive
    # here, so no retry in process), the completer releases that row with the attempt,
    # and the next receive retries it under a lease.
    provider = one_due(db, queue, settings)
    provider.fail_next.append(TransientDeliveryError("503 from the provider"))
    sender = make_sender(db, queue, settings, provider)

    assert sender.run_once(NOW).counts == {"retry": 1}
    assert delivery_rows(db) == [("sending", False, 1, None)]

    later = NOW + timedelta(minutes=5)
    retry = make_sender(db, queue, settings, provider, Clock(later))
    assert retry.run_once(later).counts == {"sent": 1}
    assert provider.seen[1] == [("sending", True, 1, None)]
    assert delivery_rows(db) == [("sent", False, 2, "file")]


def test_a_permanent_failure_of_a_first_send_is_recorded_with_its_reminder(
    db: Engine, queue: PostgresQueue, settings: Settings
) -> None:
    # A user without a profile fails permanently before any call: the row is inserted
    # `failed` and the one-time reminder fails in the same statement.
    insert_due_reminders(db, 1, next_run_utc=NOW, user_id="nobody")
    claim(db, queue)
    provider = Watching(settings.effective_mail_dir, db)
    sender = make_sender(db, queue, settings, provider)

    assert sender.run_once(NOW).counts == {"failed": 1}
    assert provider.calls == []
    assert delivery_rows(db) == [("failed", False, 0, None)]
    with db.connect() as conn:
        status, error = conn.execute(text("SELECT status, last_error FROM reminders")).one()
    assert status == "failed"
    assert "no profile" in error


def test_the_begin_read_says_whether_the_occurrence_has_a_row(db: Engine) -> None:
    insert_due_reminders(db, 1, next_run_utc=NOW, title="With row")
    insert_due_reminders(db, 1, next_run_utc=NOW, title="Without")
    insert_sending_rows(db, NOW, {"With row 1": None})
    with db.connect() as conn:
        ids = list(conn.execute(text("SELECT id FROM reminders")).scalars())
        found = {r.title: r.delivery_recorded for r in reminder_store.get_many_for_send(conn, ids)}
    assert found == {"With row 1": True, "Without 1": False}


def test_the_claim_rescuer_leaves_a_claim_whose_message_is_live_in_the_queue(
    db: Engine, queue: PostgresQueue
) -> None:
    # A re-driven claim would be claimed again: a second copy of an occurrence whose
    # first copy is still on its way (the first send without a lease counts on one).
    insert_due_reminders(db, 2, next_run_utc=NOW)
    claim(db, queue)
    later = NOW + timedelta(hours=2)
    (gone,) = queue.receive(now=NOW, max_messages=1, visibility_timeout_s=30)
    queue.delete([gone.receipt_handle])  # this one's message is lost
    with db.begin() as conn:
        rescued = reminder_store.rescue_claimed(
            conn, cutoff=later, now=later, limit=10, live_queue=queue.name
        )
    assert [r.id for r in rescued] == [_reminder_of(gone.body)]
    with db.begin() as conn:  # SQS (no live queue in this database): every old claim
        assert len(reminder_store.rescue_claimed(conn, cutoff=later, now=later, limit=10)) == 1


def _reminder_of(body: dict[str, object]) -> uuid.UUID:
    return uuid.UUID(str(body["reminder_id"]))


def test_outcomes_are_by_the_key_order_the_begin_gave_them(
    db: Engine, queue: PostgresQueue, settings: Settings
) -> None:
    # A batch mixing both kinds (one occurrence with a row, the others without) sends
    # each once and records every outcome.
    insert_due_reminders(db, 1, next_run_utc=NOW, title="Pinned")
    insert_due_reminders(db, 4, next_run_utc=NOW, title="Fresh")
    insert_sending_rows(db, NOW, {"Pinned 1": None}, attempt_count=1)
    claim(db, queue)
    provider = Watching(settings.effective_mail_dir, db)
    sender = make_sender(db, queue, settings, provider)
    sender.receiver.batch_size = 10

    assert sender.run_once(NOW).counts == {"sent": 5}
    assert len(provider.calls) == len(set(provider.calls)) == 5
    assert sorted(delivery_rows(db)) == [("sent", False, 1, "file")] * 4 + [
        ("sent", False, 2, "file")
    ]
    with db.connect() as conn:
        statuses = conn.execute(text("SELECT DISTINCT status FROM reminders")).scalars().all()
    assert statuses == ["completed"]


def test_a_cell_move_waits_for_a_first_send_whose_reminder_was_cancelled_meanwhile(
    db: Engine, queue: PostgresQueue, settings: Settings
) -> None:
    # A trial found it: the reminder cancelled during a leaseless call is no longer
    # claimed and the send has no row, so the drain saw nothing in flight, copied, and the
    # `sent` row landed in the old cell after the copy. The drain now counts the
    # messages a receiver holds.
    provider = one_due(db, queue, settings)
    provider.hold_first = True
    sender = make_sender(db, queue, settings, provider)
    pool = ThreadPoolExecutor(1)
    done = pool.submit(sender.run_once, NOW)
    assert provider.accepted_first.wait(10)
    with db.begin() as conn:
        conn.execute(
            text(
                "UPDATE reminders SET status = 'cancelled', next_run_utc = NULL,"
                " claimed_by = NULL, claimed_at = NULL, version = version + 1"
            )
        )
        during = cell_moves.in_flight(conn, user_id="alice", lease_cutoff=NOW, now=NOW)
    provider.release.set()
    assert done.result(10).counts == {"sent": 1}
    pool.shutdown()
    sender.close()
    with db.begin() as conn:
        after = cell_moves.in_flight(conn, user_id="alice", lease_cutoff=NOW, now=NOW)

    assert (during.claimed, during.sending, during.receiving) == (0, 0, 1)
    assert not during.drained
    assert after.drained
    assert delivery_rows(db) == [("sent", False, 1, "file")]


def test_a_dead_letter_waits_while_a_live_copy_of_its_occurrence_is_sent(
    db: Engine, queue: PostgresQueue, settings: Settings
) -> None:
    # A trial found it: an earlier copy of the occurrence died in the dead-letter queue
    # with no row, the claim rescuer made a new one, and the recorder recorded `failed`
    # (and failed the reminder) while the new copy was sent without a lease. A live copy
    # now makes the recorder wait, as a live lease does.
    insert_due_reminders(db, 1, next_run_utc=NOW)
    claim(db, queue)
    with db.begin() as conn:  # the earlier copy, dead after five receives
        conn.execute(
            text(
                "INSERT INTO queue_messages (queue_name, body, visible_at, receive_count,"
                " dead_lettered, dead_lettered_at, created_at)"
                " SELECT queue_name, body, visible_at, 5, true, :now, created_at"
                " FROM queue_messages"
            ),
            {"now": NOW},
        )
    recorder = DeadLetterRecorder(
        db, queue, LocalProfileSource(settings.effective_profiles_file),
        schedule_config=ScheduleConfig.from_settings(settings), lease_s=60, batch_size=10,
        interval_s=1,
    )  # fmt: skip

    assert recorder.record(NOW) == 0  # the live copy is on its way: not recorded yet
    assert delivery_rows(db) == []
    provider = Watching(settings.effective_mail_dir, db)
    assert make_sender(db, queue, settings, provider).run_once(NOW).counts == {"sent": 1}
    assert provider.seen == [[]]
    assert recorder.record(NOW) == 1  # now recorded: the sent row stays as it is
    assert delivery_rows(db) == [("sent", False, 1, "file")]
    with db.connect() as conn:
        assert conn.execute(text("SELECT status FROM reminders")).scalar_one() == "completed"
