"""Receives sized to the sender's pace (docs/design.md, "Batch size"): SENDER_BATCH_SIZE
until a full batch has been timed, then about SENDER_BATCH_TARGET_S seconds of work at
the measured pace, between SENDER_BATCH_SIZE and SENDER_BATCH_MAX. Against the real
PostgreSQL queue and the file sink (with a pause per call for a slow provider).
"""

from __future__ import annotations

from sqlalchemy import Engine, text

from coordinator.service import Coordinator
from reminder_core.clock import utcnow
from reminder_core.queue import PostgresQueue
from reminder_core.settings import Settings
from sender.service import Sender
from tests.integration.helpers import insert_due_reminders
from tests.support.sending import NOW, CountingProvider, make_sender


def due(db: Engine, queue: PostgresQueue, n: int) -> None:
    """`n` one-time reminders due at NOW, claimed: `n` messages in `queue`."""
    insert_due_reminders(db, n, next_run_utc=NOW)
    Coordinator(db, queue, lookahead_s=0, batch_size=1000, worker_id="c").run_once(NOW)


def sized_sender(
    db: Engine,
    queue: PostgresQueue,
    settings: Settings,
    provider: CountingProvider,
    *,
    batch_size: int,
    batch_max: int,
    target_s: float,
) -> Sender:
    """A sender on the real clock whose receives are sized by (batch_size, batch_max,
    target_s), as SENDER_BATCH_SIZE, SENDER_BATCH_MAX and SENDER_BATCH_TARGET_S."""
    sender = make_sender(db, queue, settings, provider, clock=utcnow)
    sizer = sender.receiver.sizer
    sizer.batch_size, sizer.batch_max, sizer.batch_target_s = batch_size, batch_max, target_s
    return sender


def sent_once(db: Engine) -> tuple[int, int]:
    """(delivery rows `sent`, distinct occurrences among them)."""
    with db.connect() as conn:
        row = conn.execute(
            text(
                "SELECT count(*), count(DISTINCT (reminder_id, run_time_utc))"
                " FROM delivery_log WHERE status = 'sent'"
            )
        ).one()
    return row[0], row[1]


def test_a_fast_sender_grows_its_receives_up_to_the_cap(db, queue, settings: Settings) -> None:
    due(db, queue, 700)
    provider = CountingProvider(settings.effective_mail_dir)
    sender = sized_sender(db, queue, settings, provider, batch_size=10, batch_max=300, target_s=1.0)
    try:
        first = sender.run_once(NOW)
        assert (first.processed, sender.receiver.requested, first.more) == (10, 10, True)
        # 10 file-sink sends take far less than the target's second: the next receive
        # asks for more than SENDER_BATCH_SIZE, never more than SENDER_BATCH_MAX.
        second = sender.run_once(NOW)
        assert 10 < sender.receiver.requested <= 300
        assert second.processed == sender.receiver.requested
        sizes = [second.processed]
        while (tick := sender.run_once(NOW)).processed:
            sizes.append(tick.processed)
            assert tick.processed <= 300
    finally:
        sender.close()
    assert 10 + sum(sizes) == 700
    assert sent_once(db) == (700, 700)  # each occurrence sent once, whatever the batch


def test_a_slow_provider_keeps_batches_near_the_target(db, queue, settings: Settings) -> None:
    due(db, queue, 60)
    # 50 ms a call, one call at a time: at most 20 sends a second, so a batch sized to
    # 1 s of work holds at most 20 (and at least SENDER_BATCH_SIZE, 10).
    provider = CountingProvider(settings.effective_mail_dir, pause_s=0.05)
    sender = sized_sender(db, queue, settings, provider, batch_size=10, batch_max=500, target_s=1.0)
    try:
        sizes = []
        while (tick := sender.run_once(NOW)).processed:
            sizes.append(tick.processed)
            assert 10 <= sender.receiver.requested <= 20
    finally:
        sender.close()
    assert (sizes[0], sum(sizes)) == (10, 60)
    assert sent_once(db) == (60, 60)


def test_a_provider_that_slows_down_shrinks_the_next_receive_at_once(
    db, queue, settings: Settings
) -> None:
    due(db, queue, 400)
    provider = CountingProvider(settings.effective_mail_dir)
    sender = sized_sender(db, queue, settings, provider, batch_size=10, batch_max=100, target_s=1.0)
    try:
        sender.run_once(NOW)
        sender.run_once(NOW)
        grown = sender.receiver.sizer.next_size()
        assert grown > 10
        provider.pause_s = 0.02  # now at most 50 a second
        slow = sender.run_once(NOW)
        assert (sender.receiver.requested, slow.processed) == (grown, grown)
        # The slower pace takes effect at once (not averaged with the fast one): the
        # next receive holds at most 1 s at 50 a second.
        sender.run_once(NOW)
        assert 10 <= sender.receiver.requested <= 50
    finally:
        sender.close()


def test_a_target_of_zero_keeps_every_receive_at_the_batch_size(
    db, queue, settings: Settings
) -> None:
    due(db, queue, 45)
    provider = CountingProvider(settings.effective_mail_dir)
    sender = sized_sender(db, queue, settings, provider, batch_size=10, batch_max=500, target_s=0.0)
    try:
        ticks = []
        while (tick := sender.run_once(NOW)).processed:
            ticks.append((tick.processed, sender.receiver.requested, tick.more))
    finally:
        sender.close()
    # The last batch is short: the queue ran dry, so there is no more.
    assert ticks == [(10, 10, True)] * 4 + [(5, 10, False)]
