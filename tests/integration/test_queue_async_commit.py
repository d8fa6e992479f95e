"""The PostgreSQL queue's delete commits asynchronously, and nothing else does.

Rules from the PostgreSQL documentation: `synchronous_commit` "can be changed within
individual transactions" and "is read at commit" (Runtime Config, "Write Ahead Log");
`set_config(name, value, is_local => true)` holds "for the current transaction only"
(Functions, "Configuration Settings Functions"). docs/design.md, "Statements of a batch",
explains why the delete may commit so and the receive and the completer's flush may not.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from datetime import timedelta

import pytest
from sqlalchemy import Engine, text

from coordinator.service import Coordinator
from reminder_core.db.session import make_engine
from reminder_core.queue import PostgresQueue
from reminder_core.settings import Settings
from reminder_core.store import queue_messages
from tests.integration.helpers import insert_due_reminders
from tests.support.sending import NOW, CountingProvider, make_sender


@pytest.fixture
def commit_modes(db: Engine) -> Iterator[Engine]:
    """A trigger on queue_messages that writes, for every row a statement updates or
    deletes, the operation and the `synchronous_commit` in force in its transaction."""
    with db.begin() as conn:
        conn.execute(
            text(
                """
                CREATE TABLE test_commit_modes (op text NOT NULL, mode text NOT NULL);
                CREATE FUNCTION test_commit_mode() RETURNS trigger LANGUAGE plpgsql AS $$
                BEGIN
                  INSERT INTO test_commit_modes
                  VALUES (TG_OP, current_setting('synchronous_commit'));
                  RETURN NULL;
                END $$;
                CREATE TRIGGER test_commit_mode AFTER UPDATE OR DELETE ON queue_messages
                  FOR EACH ROW EXECUTE FUNCTION test_commit_mode();
                """
            )
        )
    try:
        yield db
    finally:
        with db.begin() as conn:
            conn.execute(text("DROP TRIGGER IF EXISTS test_commit_mode ON queue_messages"))
            conn.execute(text("DROP FUNCTION IF EXISTS test_commit_mode()"))
            conn.execute(text("DROP TABLE IF EXISTS test_commit_modes"))


def modes(engine: Engine) -> list[tuple[str, str]]:
    with engine.connect() as conn:
        rows = conn.execute(text("SELECT op, mode FROM test_commit_modes ORDER BY op, mode"))
        return [(r.op, r.mode) for r in rows]


@pytest.fixture
def one_connection(database_url: str) -> Iterator[Engine]:
    """An engine of one pooled connection: used one statement at a time, every checkout
    gets the same connection, so a setting left on it would be seen by the next."""
    engine = make_engine(database_url, pool_size=1)
    try:
        yield engine
    finally:
        engine.dispose()


def test_the_delete_commits_asynchronously_and_the_receive_does_not(
    commit_modes: Engine, one_connection: Engine
) -> None:
    engine = one_connection
    queue = PostgresQueue(engine, name="async", max_receive_count=5)
    queue.send_batch([{"n": 1}, {"n": 2}, {"n": 3}], now=NOW, delays_s=[0, 0, 0])
    received = queue.receive(now=NOW, max_messages=10, visibility_timeout_s=30)
    assert len(received) == 3
    assert modes(commit_modes) == [("UPDATE", "on")] * 3

    queue.delete([m.receipt_handle for m in received[:2]])

    assert modes(commit_modes) == [("DELETE", "off")] * 2 + [("UPDATE", "on")] * 3
    with engine.connect() as conn:  # the same connection, back from the pool
        assert conn.execute(text("SHOW synchronous_commit")).scalar_one() == "on"
    later = NOW + timedelta(seconds=31)
    (back,) = queue.receive(now=later, max_messages=10, visibility_timeout_s=30)
    assert back.message_id == received[2].message_id
    assert back.receive_count == 2
    assert queue.depth(now=later).visible == 0


def test_a_delete_inside_a_caller_transaction_makes_that_transaction_asynchronous(
    commit_modes: Engine, one_connection: Engine
) -> None:
    """The store's delete_many run in a caller's transaction: the setting holds to its
    end (documented on delete_many), and not past it."""
    queue = PostgresQueue(one_connection, name="async", max_receive_count=5)
    queue.send_batch([{"n": 1}], now=NOW, delays_s=[0])
    (m,) = queue.receive(now=NOW, max_messages=1, visibility_timeout_s=30)
    with one_connection.begin() as conn:
        assert conn.execute(text("SHOW synchronous_commit")).scalar_one() == "on"
        queue_messages.delete_many(conn, queue="async", receipt_handles=[m.receipt_handle])
        assert conn.execute(text("SHOW synchronous_commit")).scalar_one() == "off"
    assert modes(commit_modes) == [("DELETE", "off"), ("UPDATE", "on")]
    with one_connection.connect() as conn:
        assert conn.execute(text("SHOW synchronous_commit")).scalar_one() == "on"


def test_a_delete_lost_to_a_crash_brings_the_message_back_found_terminal(
    db: Engine, queue: PostgresQueue, settings: Settings
) -> None:
    """What a PostgreSQL crash can lose of an asynchronous commit: the delete. The
    receive before it was committed synchronously (receive count 1, hidden for the
    visibility timeout), so the message reappears as that receive left it; its
    occurrence's row is terminal: DUPLICATE, no second provider call, deleted again
    (docs/design.md, "Exactly once per occurrence")."""
    insert_due_reminders(db, 1, next_run_utc=NOW)
    Coordinator(db, queue, lookahead_s=0, batch_size=10, worker_id="c").run_once(NOW)
    with db.connect() as conn:
        (message,) = conn.execute(text("SELECT id, body, created_at FROM queue_messages")).all()
    provider = CountingProvider(settings.effective_mail_dir)
    sender = make_sender(db, queue, settings, provider)
    try:
        assert sender.run_once(NOW).counts == {"sent": 1}
        with db.begin() as conn:  # the row as the durable receive left it
            conn.execute(
                text(
                    "INSERT INTO queue_messages (id, queue_name, body, visible_at, created_at,"
                    " receive_count, receipt_handle) VALUES (:id, 'reminders', :body,"
                    " :visible, :created, 1, gen_random_uuid())"
                ),
                {
                    "id": message.id,
                    "body": json.dumps(message.body),
                    "visible": NOW + timedelta(seconds=30),
                    "created": message.created_at,
                },
            )
        later = NOW + timedelta(seconds=31)
        assert sender.run_once(later).counts == {"duplicate": 1}
    finally:
        sender.close()
    assert len(provider.calls) == 1
    with db.connect() as conn:
        rows = conn.execute(text("SELECT status FROM delivery_log")).scalars().all()
        left = conn.execute(text("SELECT count(*) FROM queue_messages")).scalar_one()
    assert rows == ["sent"]
    assert left == 0
