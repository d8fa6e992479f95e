"""The PostgreSQL queue wakes a waiting receiver (issue 15: delivery lag was the sender's
poll interval): when the next message becomes visible, or at once when a message is sent
(LISTEN/NOTIFY), and not for another queue's messages. Real PostgreSQL, real threads;
bounds are generous (the waits are seconds, the wakes milliseconds)."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterator
from datetime import timedelta

import pytest
from sqlalchemy import Engine
from sqlalchemy.engine import make_url

from coordinator.service import Coordinator
from reminder_core.clock import utcnow
from reminder_core.db.listen import SLICE_S
from reminder_core.queue import PostgresQueue
from reminder_core.settings import Settings
from reminder_core.worker.loop import run_loop
from tests.integration.helpers import insert_due_reminders
from tests.support.sending import CountingProvider, make_sender

COALESCE_S = 0.05
#: A wait is counted in slices, not read off a clock (Listener.wait): a notification that
#: does not end it still ends its slice, so the wait may end up to a slice earlier.
EARLY = 2 * SLICE_S


@pytest.fixture
def waiting_queue(db: Engine) -> Iterator[PostgresQueue]:
    queue = PostgresQueue(db, name="reminders", max_receive_count=5)
    yield queue
    queue.close()


def timed_wait(
    queue: PostgresQueue, timeout_s: float, stop: threading.Event | None = None
) -> float:
    started = time.monotonic()
    queue.wait_for_messages(
        stop or threading.Event(), timeout_s=timeout_s, now=utcnow(), coalesce_s=COALESCE_S
    )
    return time.monotonic() - started


def later(seconds: float, action: Callable[[], None]) -> threading.Timer:
    timer = threading.Timer(seconds, action)
    timer.start()
    return timer


def test_a_message_sent_during_the_wait_wakes_the_receiver(waiting_queue: PostgresQueue) -> None:
    send = later(0.3, lambda: waiting_queue.send_batch([{"n": 1}], now=utcnow(), delays_s=[0]))
    waited = timed_wait(waiting_queue, timeout_s=20)
    send.join()
    assert 0.3 <= waited < 5, waited


def test_the_receiver_wakes_when_the_next_message_becomes_visible(
    waiting_queue: PostgresQueue,
) -> None:
    waiting_queue.send_batch([{"n": 1}], now=utcnow(), delays_s=[1.0])
    waited = timed_wait(waiting_queue, timeout_s=20)
    assert 1.0 <= waited < 5, waited
    # ... and then the message is there to receive.
    assert waiting_queue.receive(now=utcnow(), max_messages=10, visibility_timeout_s=30)


def test_a_message_sent_for_later_does_not_end_the_wait_early(
    waiting_queue: PostgresQueue,
) -> None:
    send = later(0.2, lambda: waiting_queue.send_batch([{"n": 1}], now=utcnow(), delays_s=[60]))
    waited = timed_wait(waiting_queue, timeout_s=1.5)
    send.join()
    assert waited >= 1.5 - EARLY, waited


def test_another_queues_message_does_not_wake_the_receiver(
    db: Engine, waiting_queue: PostgresQueue
) -> None:
    other = PostgresQueue(db, name="elsewhere", max_receive_count=5)
    send = later(0.2, lambda: other.send_batch([{"n": 1}], now=utcnow(), delays_s=[0]))
    waited = timed_wait(waiting_queue, timeout_s=1.5)
    send.join()
    assert waited >= 1.5 - EARLY, waited


def test_a_visible_message_left_behind_is_waited_for_only_the_coalescing_time(
    waiting_queue: PostgresQueue,
) -> None:
    waiting_queue.send_batch([{"n": 1}], now=utcnow(), delays_s=[0])
    assert timed_wait(waiting_queue, timeout_s=20) < 2


def test_stop_ends_the_wait(waiting_queue: PostgresQueue) -> None:
    stop = threading.Event()
    setter = later(0.3, stop.set)
    waited = timed_wait(waiting_queue, timeout_s=20, stop=stop)
    setter.join()
    assert 0.3 <= waited < 5, waited


def test_with_the_database_gone_the_wait_is_a_plain_sleep(database_url: str) -> None:
    from reminder_core.db.session import make_engine

    dead = make_engine(make_url(database_url).set(port=1, database="nowhere").render_as_string())
    queue = PostgresQueue(dead, name="reminders", max_receive_count=5)
    try:
        waited = timed_wait(queue, timeout_s=0.5)
        assert 0.5 <= waited < 5, waited
    finally:
        queue.close()
        dead.dispose()


def test_an_idle_sender_loop_delivers_well_before_its_poll_interval(
    db: Engine, settings: Settings, provider: CountingProvider
) -> None:
    """The wiring: `run_loop` calls `Sender.wait_for_work`, so an occurrence claimed ahead
    (LOOKAHEAD_S) and visible 1.5 s later is sent about then, not at the next poll of a
    sender polling every 30 s."""
    queue = PostgresQueue(db, name="reminders", max_receive_count=5)
    sender = make_sender(db, queue, settings, provider, clock=utcnow)
    stop = threading.Event()
    loop = threading.Thread(
        target=run_loop, args=(sender, stop), kwargs={"poll_interval_s": 30, "jitter_start": False}
    )
    loop.start()
    try:
        time.sleep(0.5)  # the loop's first tick finds nothing and waits
        due = utcnow() + timedelta(seconds=1.5)
        insert_due_reminders(db, 1, next_run_utc=due, user_id="alice", timezone=None)
        coordinator = Coordinator(db, queue, lookahead_s=5, batch_size=10, worker_id="t")
        assert coordinator.run_once(utcnow()).counts["published"] == 1
        deadline = time.monotonic() + 20
        while not provider.calls and time.monotonic() < deadline:
            time.sleep(0.02)
        sent_after = (utcnow() - due).total_seconds()
        assert provider.calls, "not sent within 20 s"
        assert -0.1 <= sent_after < 5, sent_after  # due time + coalescing, not 30 s
    finally:
        stop.set()
        loop.join(timeout=30)
        sender.close()
        queue.close()
