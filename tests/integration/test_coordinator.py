"""Coordinator: claim due reminders and write their queue messages (PostgreSQL queue) or
outbox rows (a queue outside the database) together (docs/design.md, "Claim and outbox")."""

from __future__ import annotations

import threading
from datetime import timedelta

import pytest
from sqlalchemy import Engine, text

from coordinator.service import Coordinator
from outbox_sweeper.service import OutboxSweeper
from reminder_core.messages import OccurrenceMessage
from reminder_core.queue import PostgresQueue
from tests.conftest import utc
from tests.integration.helpers import BrokenExternalQueue, ExternalQueue, insert_due_reminders

NOW = utc(2030, 1, 1, 12, 0, 0)


#: The two ways a claim reaches the queue: written by the claim's own statement (the
#: PostgreSQL queue in the same database) or through the outbox (any other queue).
PATHS = ["in_claim", "outbox"]


def make(
    db: Engine,
    *,
    batch: int = 500,
    lookahead_s: float = 2.0,
    worker: str = "c1",
    path: str = "in_claim",
) -> tuple[Coordinator, PostgresQueue]:
    queue = PostgresQueue(db, name="reminders", max_receive_count=5)
    seen = queue if path == "in_claim" else ExternalQueue(queue)
    coordinator = Coordinator(
        db,
        seen,  # type: ignore[arg-type]
        lookahead_s=lookahead_s,
        batch_size=batch,
        worker_id=worker,
    )
    assert (coordinator.claim_queue == "reminders") is (path == "in_claim")
    return coordinator, queue


@pytest.mark.parametrize("path", PATHS)
def test_claims_due_pending_only_and_publishes_with_delay(db: Engine, path: str) -> None:
    insert_due_reminders(db, 2, next_run_utc=NOW - timedelta(seconds=5), title="late")
    insert_due_reminders(db, 1, next_run_utc=NOW + timedelta(seconds=2), title="ahead")
    insert_due_reminders(db, 1, next_run_utc=NOW + timedelta(seconds=3), title="future")
    insert_due_reminders(db, 1, next_run_utc=NOW, status="paused", title="paused")
    coordinator, queue = make(db, path=path)

    result = coordinator.run_once(NOW)

    assert result.counts == {"claimed": 3, "published": 3}
    with db.connect() as conn:
        claimed = conn.execute(
            text("SELECT title, claimed_by FROM reminders WHERE status = 'claimed' ORDER BY title")
        ).all()
        outbox = conn.execute(text("SELECT payload, published_at FROM outbox")).all()
    assert [r.title.split()[0] for r in claimed] == ["ahead", "late", "late"]
    assert {r.claimed_by for r in claimed} == {"c1"}
    if path == "outbox":
        assert len(outbox) == 3
        assert all(r.published_at == NOW for r in outbox)
    else:  # the message is the outbox row: nothing to publish, mark or expire
        assert outbox == []
    # The 'ahead' occurrence is delayed to its due time: 2 late ones visible now.
    assert len(queue.receive(now=NOW, max_messages=10, visibility_timeout_s=30)) == 2
    ahead = queue.receive(now=NOW + timedelta(seconds=2), max_messages=10, visibility_timeout_s=30)
    assert len(ahead) == 1
    assert set(ahead[0].body) == {"reminder_id", "run_time_utc", "version", "user_id"}


@pytest.mark.parametrize("path", PATHS)
def test_payload_names_the_occurrence(db: Engine, path: str) -> None:
    insert_due_reminders(db, 1, next_run_utc=utc(2030, 1, 1, 11, 59, 30))
    coordinator, queue = make(db, path=path)
    coordinator.run_once(NOW)
    (msg,) = queue.receive(now=NOW, max_messages=1, visibility_timeout_s=30)
    with db.connect() as conn:
        rid = conn.execute(text("SELECT id FROM reminders")).scalar_one()
    assert msg.body == {
        "reminder_id": str(rid),
        "run_time_utc": "2030-01-01T11:59:30.000000+00:00",
        "version": 1,
        "user_id": "alice",
    }
    # The one codec (reminder_core/messages.py) reads what reminder_claim_due writes, and writes it
    # back in exactly the same shape.
    occurrence = OccurrenceMessage.decode(msg.body)
    assert occurrence == OccurrenceMessage(rid, utc(2030, 1, 1, 11, 59, 30), "alice", 1)
    assert occurrence.encode() == msg.body


@pytest.mark.parametrize("path", PATHS)
def test_two_coordinators_claim_5000_reminders_exactly_once(db: Engine, path: str) -> None:
    insert_due_reminders(db, 5000, next_run_utc=NOW - timedelta(minutes=1))
    start = threading.Barrier(2)
    totals: dict[str, int] = {}
    errors: list[BaseException] = []

    def run(worker: str) -> None:
        coordinator, _ = make(db, batch=100, worker=worker, path=path)
        claimed = 0
        try:
            start.wait()
            while True:
                n = coordinator.run_once(NOW).counts["claimed"]
                if n == 0:
                    break
                claimed += n
        except BaseException as exc:  # surfaced below
            errors.append(exc)
        totals[worker] = claimed

    threads = [threading.Thread(target=run, args=(w,)) for w in ("c1", "c2")]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=120)
    assert not errors
    assert totals["c1"] + totals["c2"] == 5000
    # Both really took part (SKIP LOCKED lets them work side by side).
    assert totals["c1"] > 0
    assert totals["c2"] > 0
    with db.connect() as conn:
        per_reminder = (
            conn.execute(
                text(
                    "SELECT count(m.id) AS n FROM reminders r LEFT JOIN queue_messages m"
                    " ON (m.body->>'reminder_id')::uuid = r.id GROUP BY r.id"
                )
            )
            .scalars()
            .all()
        )
        statuses = conn.execute(text("SELECT DISTINCT status FROM reminders")).scalars().all()
        messages = conn.execute(text("SELECT count(*) FROM queue_messages")).scalar_one()
    assert len(per_reminder) == 5000
    assert set(per_reminder) == {1}
    assert statuses == ["claimed"]
    assert messages == 5000


@pytest.mark.parametrize("path", PATHS)
def test_claim_and_outbox_roll_back_together(db: Engine, path: str) -> None:
    # The claim and its outbox rows (or queue messages) are one statement in one
    # transaction: rolling it back (a crash before commit) leaves neither.
    insert_due_reminders(db, 3, next_run_utc=NOW)
    from reminder_core.store import reminders

    with db.connect() as conn:
        trans = conn.begin()
        if path == "outbox":
            claimed = len(
                reminders.claim_due(conn, horizon=NOW, now=NOW, limit=10, worker="doomed")
            )
        else:
            claimed = reminders.claim_due_to_queue(
                conn, horizon=NOW, now=NOW, limit=10, worker="doomed", queue="reminders"
            )
        assert claimed == 3
        assert conn.execute(text("SELECT count(*) FROM queue_messages")).scalar_one() == (
            3 if path == "in_claim" else 0
        )
        trans.rollback()
    with db.connect() as conn:
        assert conn.execute(text("SELECT count(*) FROM outbox")).scalar_one() == 0
        assert conn.execute(text("SELECT count(*) FROM queue_messages")).scalar_one() == 0
        assert (
            conn.execute(
                text("SELECT count(*) FROM reminders WHERE status = 'pending'")
            ).scalar_one()
            == 3
        )


def test_failed_publish_is_left_to_the_sweeper(db: Engine) -> None:
    insert_due_reminders(db, 4, next_run_utc=NOW)
    broken = BrokenExternalQueue(PostgresQueue(db, name="reminders", max_receive_count=5))
    coordinator = Coordinator(db, broken, lookahead_s=0, batch_size=10, worker_id="c1")
    assert coordinator.run_once(NOW).counts == {"claimed": 4, "published": 0}

    queue = PostgresQueue(db, name="reminders", max_receive_count=5)
    sweeper = OutboxSweeper(db, queue, grace_s=10)
    # Younger than the grace period: left to the fast path.
    assert sweeper.run_once(NOW + timedelta(seconds=5)).processed == 0
    assert sweeper.run_once(NOW + timedelta(seconds=10)).counts == {"republished": 4}
    assert sweeper.run_once(NOW + timedelta(seconds=20)).processed == 0
    later = NOW + timedelta(seconds=20)
    assert len(queue.receive(now=later, max_messages=10, visibility_timeout_s=30)) == 4
    with db.connect() as conn:
        assert (
            conn.execute(
                text("SELECT count(*) FROM outbox WHERE published_at IS NULL")
            ).scalar_one()
            == 0
        )


def test_two_sweepers_publish_each_row_once(db: Engine) -> None:
    insert_due_reminders(db, 600, next_run_utc=NOW)
    broken = BrokenExternalQueue(PostgresQueue(db, name="reminders", max_receive_count=5))
    Coordinator(db, broken, lookahead_s=0, batch_size=1000, worker_id="c1").run_once(NOW)
    queue = PostgresQueue(db, name="reminders", max_receive_count=5)
    later = NOW + timedelta(minutes=1)
    barrier = threading.Barrier(2)

    def sweep() -> None:
        sweeper = OutboxSweeper(db, queue, grace_s=10, batch_size=50)
        barrier.wait()
        while sweeper.run_once(later).processed:
            pass

    threads = [threading.Thread(target=sweep) for _ in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=60)
    with db.connect() as conn:
        assert conn.execute(text("SELECT count(*) FROM queue_messages")).scalar_one() == 600
        assert (
            conn.execute(
                text("SELECT count(DISTINCT body->>'reminder_id') FROM queue_messages")
            ).scalar_one()
            == 600
        )


def test_a_postgres_queue_in_another_database_takes_the_outbox_path(db: Engine) -> None:
    # The claim can write messages in its own transaction only into a queue table of the
    # database it claims in; a PostgreSQL queue elsewhere is, to the coordinator, like SQS.
    from sqlalchemy import create_engine

    elsewhere = create_engine(db.url.set(database=f"{db.url.database}_elsewhere"))
    try:
        queue = PostgresQueue(elsewhere, name="reminders", max_receive_count=5)
        assert not queue.in_database_of(db)
        coordinator = Coordinator(db, queue, lookahead_s=0, batch_size=10, worker_id="c")
        assert coordinator.claim_queue is None
        same = PostgresQueue(db, name="reminders", max_receive_count=5)
        assert Coordinator(db, same, lookahead_s=0, batch_size=10).claim_queue == "reminders"
    finally:
        elsewhere.dispose()
