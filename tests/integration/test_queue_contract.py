"""Queue contract: SQS semantics that every backend must keep.

The expected behaviour is Amazon SQS's documented one (visibility timeout, receive
count, redrive policy with maxReceiveCount, DelaySeconds, receipt handles). The suite is
parametrised over backends through the `queue` fixture; the SQS backend joins it later.
"""

from __future__ import annotations

from datetime import datetime, timedelta

import pytest
from sqlalchemy import Engine

from reminder_core.queue import PostgresQueue, Queue
from tests.conftest import utc

T0 = utc(2030, 1, 1, 12, 0, 0)
MAX_RECEIVES = 3


@pytest.fixture(params=["postgres"])
def queue(request: pytest.FixtureRequest, db: Engine) -> Queue:
    assert request.param == "postgres"
    return PostgresQueue(db, name="contract", max_receive_count=MAX_RECEIVES)


def at(seconds: float) -> datetime:
    return T0 + timedelta(seconds=seconds)


def test_sent_message_is_received_once_until_visibility_timeout(queue: Queue) -> None:
    queue.send_batch([{"n": 1}], now=T0, delays_s=[0])
    first = queue.receive(now=at(0), max_messages=10, visibility_timeout_s=30)
    assert [m.body for m in first] == [{"n": 1}]
    assert first[0].receive_count == 1
    # Hidden while the visibility timeout runs.
    assert queue.receive(now=at(29), max_messages=10, visibility_timeout_s=30) == []
    again = queue.receive(now=at(30), max_messages=10, visibility_timeout_s=30)
    assert [m.body for m in again] == [{"n": 1}]
    assert again[0].receive_count == 2
    assert again[0].receipt_handle != first[0].receipt_handle


def test_delete_with_current_handle_removes_message(queue: Queue) -> None:
    queue.send_batch([{"n": 1}], now=T0, delays_s=[0])
    (msg,) = queue.receive(now=at(0), max_messages=1, visibility_timeout_s=5)
    queue.delete([msg.receipt_handle])
    assert queue.receive(now=at(100), max_messages=10, visibility_timeout_s=5) == []
    assert queue.depth(now=at(100)).visible == 0


def test_stale_receipt_handle_deletes_nothing(queue: Queue) -> None:
    queue.send_batch([{"n": 1}], now=T0, delays_s=[0])
    (old,) = queue.receive(now=at(0), max_messages=1, visibility_timeout_s=5)
    (new,) = queue.receive(now=at(5), max_messages=1, visibility_timeout_s=5)
    queue.delete([old.receipt_handle])
    assert queue.depth(now=at(5)).not_visible == 1
    queue.delete([new.receipt_handle])
    assert queue.depth(now=at(5)) == type(queue.depth(now=at(5)))(0, 0, 0)


def test_delay_hides_message_until_due(queue: Queue) -> None:
    queue.send_batch([{"n": 1}, {"n": 2}], now=T0, delays_s=[0, 10])
    assert [m.body for m in queue.receive(now=at(0), max_messages=10, visibility_timeout_s=60)] == [
        {"n": 1}
    ]
    assert queue.receive(now=at(9.9), max_messages=10, visibility_timeout_s=60) == []
    assert [
        m.body for m in queue.receive(now=at(10), max_messages=10, visibility_timeout_s=60)
    ] == [{"n": 2}]


def test_change_visibility_extends_and_releases(queue: Queue) -> None:
    queue.send_batch([{"n": 1}], now=T0, delays_s=[0])
    (msg,) = queue.receive(now=at(0), max_messages=1, visibility_timeout_s=10)
    queue.change_visibility(msg.receipt_handle, now=at(9), timeout_s=60)  # heartbeat
    assert queue.receive(now=at(68), max_messages=1, visibility_timeout_s=10) == []
    queue.change_visibility(msg.receipt_handle, now=at(20), timeout_s=0)  # give it back
    assert len(queue.receive(now=at(20), max_messages=1, visibility_timeout_s=10)) == 1


def test_redrive_to_dlq_after_max_receive_count(queue: Queue) -> None:
    queue.send_batch([{"n": 1}], now=T0, delays_s=[0])
    for i in range(MAX_RECEIVES):
        got = queue.receive(now=at(i * 100), max_messages=1, visibility_timeout_s=10)
        assert [m.receive_count for m in got] == [i + 1]
    # The next receive moves it to the dead-letter queue instead of returning it.
    assert queue.receive(now=at(1000), max_messages=1, visibility_timeout_s=10) == []
    depth = queue.depth(now=at(1000))
    assert (depth.visible, depth.not_visible, depth.dead_lettered) == (0, 0, 1)


def test_receive_respects_max_messages_and_order(queue: Queue) -> None:
    queue.send_batch([{"n": i} for i in range(15)], now=T0, delays_s=[0] * 15)
    first = queue.receive(now=at(0), max_messages=10, visibility_timeout_s=30)
    second = queue.receive(now=at(0), max_messages=10, visibility_timeout_s=30)
    assert [m.body["n"] for m in first] == list(range(10))
    assert [m.body["n"] for m in second] == list(range(10, 15))


def test_depth_counts_visible_in_flight_and_dead(queue: Queue) -> None:
    queue.send_batch([{"n": 1}, {"n": 2}, {"n": 3}], now=T0, delays_s=[0, 0, 50])
    queue.receive(now=at(0), max_messages=1, visibility_timeout_s=30)
    d = queue.depth(now=at(0))
    assert (d.visible, d.not_visible, d.dead_lettered) == (1, 2, 0)


def test_change_visibility_batch_extends_each_message(queue: Queue) -> None:
    queue.send_batch([{"n": 1}, {"n": 2}], now=T0, delays_s=[0, 0])
    a, b = queue.receive(now=at(0), max_messages=10, visibility_timeout_s=10)
    # a: hidden 60 s more from t=9; b: visible again at once.
    queue.change_visibility_batch([(a.receipt_handle, 60), (b.receipt_handle, 0)], now=at(9))
    back = queue.receive(now=at(10), max_messages=10, visibility_timeout_s=10)
    assert [m.body for m in back] == [b.body]
    queue.delete([back[0].receipt_handle])
    assert queue.receive(now=at(68), max_messages=10, visibility_timeout_s=10) == []
    assert [
        m.body for m in queue.receive(now=at(69), max_messages=10, visibility_timeout_s=10)
    ] == [a.body]
