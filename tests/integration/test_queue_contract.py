"""Queue contract: SQS semantics that every backend must keep.

The expected behaviour is Amazon SQS's documented one (Amazon SQS Developer Guide:
visibility timeout, message timers / DelaySeconds, dead-letter queues and redrive policy
maxReceiveCount; API reference: ReceiveMessage, DeleteMessage, ChangeMessageVisibility
and their *Batch forms, GetQueueAttributes). Every test runs on both backends:

- `postgres`: the PostgreSQL table, on a simulated clock (`sleep` moves `now` at once);
- `sqs`: SQS through a local moto server (HTTP, the real protocol), on the wall clock
  (`sleep` sleeps). SQS counts visibility timeouts and delays in whole seconds on its own
  clock, so timings are 1-2 s and every check keeps at least 0.5 s from a boundary.
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import datetime, timedelta

import boto3
import pytest
from sqlalchemy import Engine

from reminder_core.clock import utcnow
from reminder_core.queue import Message, PostgresQueue, Queue
from reminder_core.queue.sqs import SqsQueue, ensure_queues
from tests.conftest import utc
from tests.support.moto import CREDENTIALS, REGION

MAX_RECEIVES = 3


class SimulatedClock:
    """Time for the PostgreSQL backend, which takes `now` as an argument."""

    def __init__(self, start: datetime) -> None:
        self._now = start

    def now(self) -> datetime:
        return self._now

    def sleep(self, seconds: float) -> None:
        self._now += timedelta(seconds=seconds)


class WallClock:
    """Time for SQS, which keeps its own clock."""

    def now(self) -> datetime:
        return utcnow()

    def sleep(self, seconds: float) -> None:
        time.sleep(seconds)


@dataclass
class Backend:
    """A queue under test, its clock, and what AWS documents as not guaranteed.

    stale_handle_deletes_nothing: AWS DeleteMessage: with a receipt handle that is not the
        most recent one "the request succeeds, but the message might not be deleted": not
        a guarantee, so it is checked only where the backend promises it (PostgreSQL).
    """

    queue: Queue
    clock: SimulatedClock | WallClock
    stale_handle_deletes_nothing: bool


@pytest.fixture(params=["postgres", "sqs"])
def backend(request: pytest.FixtureRequest) -> Iterator[Backend]:
    if request.param == "postgres":
        db: Engine = request.getfixturevalue("db")
        queue = PostgresQueue(db, name="contract", max_receive_count=MAX_RECEIVES)
        yield Backend(queue, SimulatedClock(utc(2030, 1, 1, 12)), True)
        return
    endpoint: str = request.getfixturevalue("moto_endpoint")
    client = boto3.client("sqs", endpoint_url=endpoint, region_name=REGION, **CREDENTIALS)
    url, dlq_url = ensure_queues(
        client,
        f"contract-{uuid.uuid4().hex[:12]}",
        visibility_timeout_s=30,
        max_receive_count=MAX_RECEIVES,
    )
    # Short polling: moto returns every visible message at once, and a test that expects
    # nothing does not wait out a long poll (long polling: test_sqs_queue.py).
    yield Backend(SqsQueue(client, url, wait_time_s=0), WallClock(), False)
    client.delete_queue(QueueUrl=url)
    client.delete_queue(QueueUrl=dlq_url)


def receive(b: Backend, *, max_messages: int = 10, visibility_timeout_s: float) -> list[Message]:
    return b.queue.receive(
        now=b.clock.now(), max_messages=max_messages, visibility_timeout_s=visibility_timeout_s
    )


def bodies(messages: list[Message]) -> list[dict[str, object]]:
    return [m.body for m in messages]


def depth(b: Backend) -> tuple[int, int, int]:
    d = b.queue.depth(now=b.clock.now())
    return (d.visible, d.not_visible, d.dead_lettered)


def dead_letter(b: Backend, n: int) -> None:
    """Send n messages and receive each MAX_RECEIVES times (visibility 0: visible again at
    once); the next receive moves them to the dead-letter queue."""
    b.queue.send_batch([{"n": i} for i in range(n)], now=b.clock.now(), delays_s=[0] * n)
    for _ in range(MAX_RECEIVES):
        assert len(receive(b, visibility_timeout_s=0)) == n
    assert receive(b, visibility_timeout_s=0) == []
    assert depth(b) == (0, 0, n)


def test_sent_message_is_received_once_until_visibility_timeout(backend: Backend) -> None:
    b = backend
    b.queue.send_batch([{"n": 1}], now=b.clock.now(), delays_s=[0])
    first = receive(b, visibility_timeout_s=2)
    assert bodies(first) == [{"n": 1}]
    assert first[0].receive_count == 1
    b.clock.sleep(1)
    assert receive(b, visibility_timeout_s=2) == []  # hidden while the timeout runs
    b.clock.sleep(1.5)
    again = receive(b, visibility_timeout_s=2)
    assert bodies(again) == [{"n": 1}]
    assert again[0].receive_count == 2
    assert again[0].message_id == first[0].message_id
    assert again[0].receipt_handle != first[0].receipt_handle


def test_delete_with_current_handle_removes_message(backend: Backend) -> None:
    b = backend
    b.queue.send_batch([{"n": 1}], now=b.clock.now(), delays_s=[0])
    (msg,) = receive(b, max_messages=1, visibility_timeout_s=1)
    b.queue.delete([msg.receipt_handle])
    b.clock.sleep(1.5)  # past the visibility timeout: a message not deleted would be back
    assert receive(b, visibility_timeout_s=1) == []
    assert depth(b) == (0, 0, 0)


def test_stale_receipt_handle_is_accepted_and_the_current_one_deletes(backend: Backend) -> None:
    b = backend
    b.queue.send_batch([{"n": 1}], now=b.clock.now(), delays_s=[0])
    (old,) = receive(b, max_messages=1, visibility_timeout_s=1)
    b.clock.sleep(1.5)
    (new,) = receive(b, max_messages=1, visibility_timeout_s=30)
    b.queue.delete([old.receipt_handle])  # succeeds (no error), whatever it deletes
    if b.stale_handle_deletes_nothing:
        assert depth(b) == (0, 1, 0)
    b.queue.delete([new.receipt_handle])
    assert depth(b) == (0, 0, 0)


def test_delay_hides_message_until_due(backend: Backend) -> None:
    b = backend
    sent_at = b.clock.now()
    b.queue.send_batch([{"n": 1}, {"n": 2}], now=sent_at, delays_s=[0, 3])
    assert bodies(receive(b, visibility_timeout_s=60)) == [{"n": 1}]
    assert depth(b) == (0, 2, 0)  # one in flight, one delayed

    def sleep_until(seconds_after_send: float) -> None:
        # Measured from the send (the SQS backend's clock is real time, and a loaded
        # machine makes the calls above take a while): 1.5 s before and after the delay.
        b.clock.sleep(max(0.0, seconds_after_send - (b.clock.now() - sent_at).total_seconds()))

    sleep_until(1.5)
    assert receive(b, visibility_timeout_s=60) == []
    sleep_until(4.5)
    assert bodies(receive(b, visibility_timeout_s=60)) == [{"n": 2}]


def test_change_visibility_extends_and_releases(backend: Backend) -> None:
    b = backend
    b.queue.send_batch([{"n": 1}], now=b.clock.now(), delays_s=[0])
    (msg,) = receive(b, max_messages=1, visibility_timeout_s=1)
    b.queue.change_visibility(msg.receipt_handle, now=b.clock.now(), timeout_s=3)  # heartbeat
    b.clock.sleep(1.5)
    assert receive(b, visibility_timeout_s=1) == []  # without the extension it was back
    b.queue.change_visibility(msg.receipt_handle, now=b.clock.now(), timeout_s=0)  # give back
    back = receive(b, visibility_timeout_s=1)
    assert bodies(back) == [{"n": 1}]
    assert back[0].receive_count == 2


def test_change_visibility_batch_extends_each_message(backend: Backend) -> None:
    b = backend
    b.queue.send_batch([{"n": 1}, {"n": 2}], now=b.clock.now(), delays_s=[0, 0])
    got = {m.body["n"]: m for m in receive(b, visibility_timeout_s=1)}
    assert sorted(got) == [1, 2]
    # 1: hidden 2 s more from now; 2: visible again at once.
    b.queue.change_visibility_batch(
        [(got[1].receipt_handle, 2), (got[2].receipt_handle, 0)], now=b.clock.now()
    )
    back = receive(b, visibility_timeout_s=10)
    assert bodies(back) == [{"n": 2}]
    b.queue.delete([back[0].receipt_handle])
    b.clock.sleep(1.5)  # past the first timeout, within the extension
    assert receive(b, visibility_timeout_s=10) == []
    b.clock.sleep(1)
    assert bodies(receive(b, visibility_timeout_s=10)) == [{"n": 1}]


def test_redrive_to_dlq_after_max_receive_count(backend: Backend) -> None:
    b = backend
    b.queue.send_batch([{"n": 1}], now=b.clock.now(), delays_s=[0])
    for i in range(MAX_RECEIVES):
        got = receive(b, max_messages=1, visibility_timeout_s=0)
        assert [m.receive_count for m in got] == [i + 1]
    # The next receive moves it to the dead-letter queue instead of returning it.
    assert receive(b, max_messages=1, visibility_timeout_s=0) == []
    assert depth(b) == (0, 0, 1)


def test_batches_of_more_than_ten(backend: Backend) -> None:
    b = backend
    n = 23  # three SendMessageBatch calls (SQS: at most 10 entries each)
    b.queue.send_batch([{"n": i} for i in range(n)], now=b.clock.now(), delays_s=[0] * n)
    assert depth(b) == (n, 0, 0)
    assert len(receive(b, max_messages=3, visibility_timeout_s=30)) <= 3
    received: list[Message] = []
    for _ in range(20):  # SQS returns at most 10 a receive, maybe fewer
        got = receive(b, max_messages=10, visibility_timeout_s=30)
        assert len(got) <= 10
        received += got
        if not got:
            break
    # Each message once (the first 3 received above are hidden for 30 s).
    assert len(received) == n - 3
    assert len({m.body["n"] for m in received}) == n - 3
    assert depth(b) == (0, n, 0)
    # Batched visibility change and delete of more than 10 handles.
    b.queue.change_visibility_batch([(m.receipt_handle, 0) for m in received], now=b.clock.now())
    assert depth(b) == (n - 3, 3, 0)
    again: list[Message] = []
    for _ in range(20):
        got = receive(b, max_messages=10, visibility_timeout_s=30)
        again += got
        if not got:
            break
    assert sorted(m.body["n"] for m in again) == sorted(m.body["n"] for m in received)
    b.queue.delete([m.receipt_handle for m in again])
    assert depth(b) == (0, 3, 0)


def test_depth_counts_visible_in_flight_and_dead(backend: Backend) -> None:
    b = backend
    b.queue.send_batch([{"n": 1}, {"n": 2}, {"n": 3}], now=b.clock.now(), delays_s=[0, 0, 50])
    assert len(receive(b, max_messages=1, visibility_timeout_s=30)) == 1
    assert depth(b) == (1, 2, 0)


def test_dead_letters_are_listed_and_recorded(backend: Backend) -> None:
    b = backend
    dead_letter(b, 3)
    letters = b.queue.dead_letters(limit=10)
    assert sorted(d.body["n"] for d in letters) == [0, 1, 2]
    assert {d.receive_count for d in letters} == {MAX_RECEIVES}
    assert {d.recorded_at for d in letters} == {None}
    assert len({d.message_id for d in letters}) == 3
    assert len(b.queue.dead_letters(limit=2)) == 2

    unrecorded = b.queue.dead_letters(limit=10, unrecorded_only=True)
    assert sorted(d.message_id for d in unrecorded) == sorted(d.message_id for d in letters)
    first = unrecorded[0]
    now = b.clock.now()
    b.queue.mark_dead_letters_recorded([first.message_id], now=now)

    listed = {d.message_id: d for d in b.queue.dead_letters(limit=10)}
    assert set(listed) == {d.message_id for d in letters}  # ids survive the recording
    assert listed[first.message_id].recorded_at == now
    assert listed[first.message_id].body == first.body
    assert listed[first.message_id].receive_count == MAX_RECEIVES
    rest = b.queue.dead_letters(limit=10, unrecorded_only=True)
    assert sorted(d.message_id for d in rest) == sorted(set(listed) - {first.message_id})
    b.queue.mark_dead_letters_recorded([], now=now)  # releases what the listing held
    assert depth(b) == (0, 0, 3)


def test_redrive_sends_a_dead_letter_back_marked_as_replay(backend: Backend) -> None:
    b = backend
    dead_letter(b, 2)
    letters = b.queue.dead_letters(limit=10)
    chosen = letters[0]
    moved = b.queue.redrive([chosen.message_id, "999999999"], now=b.clock.now())
    assert moved == [chosen.message_id]
    (msg,) = receive(b, visibility_timeout_s=30)  # visible at once
    assert msg.body == chosen.body | {"replay": True}
    assert msg.receive_count == 1  # counted afresh
    remaining = b.queue.dead_letters(limit=10)
    assert [d.message_id for d in remaining] == [letters[1].message_id]
    assert depth(b) == (0, 1, 1)


def test_dead_letters_are_deleted_by_id_or_all(backend: Backend) -> None:
    b = backend
    dead_letter(b, 3)
    letters = b.queue.dead_letters(limit=10)
    deleted = b.queue.delete_dead_letters([letters[0].message_id, "999999999"])
    assert deleted == [letters[0].message_id]
    assert depth(b) == (0, 0, 2)
    assert b.queue.delete_dead_letters([]) == []
    assert sorted(b.queue.delete_dead_letters(None)) == sorted(d.message_id for d in letters[1:])
    assert b.queue.dead_letters(limit=10) == []
    assert depth(b) == (0, 0, 0)
