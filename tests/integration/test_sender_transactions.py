"""The transactions of a sender's batch (docs/design.md, "Statements of a batch").

A batch of first sends without a lease makes no explicit transaction: the receive, the
begin's one read, the completer's flush and the delete each commit as one statement
(no BEGIN, no COMMIT round trips). The begin opens a transaction only when it has
something to write, and then its writes commit together. SQLAlchemy's `begin` event
fires for every transaction a Connection begins (explicit or autobegin), so counting it
counts the BEGINs the sender sends.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from contextlib import contextmanager

import pytest
from prometheus_client import REGISTRY
from sqlalchemy import Connection, Engine, event, text

from coordinator.service import Coordinator
from reminder_core.errors import InfrastructureError
from reminder_core.queue import PostgresQueue
from reminder_core.settings import Settings
from sender.receive import decode_batch
from tests.integration.helpers import insert_due_reminders
from tests.support.sending import NOW, CountingProvider, make_sender


@contextmanager
def transactions(engine: Engine) -> Iterator[list[str]]:
    """The transactions begun on `engine`'s connections meanwhile that send a BEGIN:
    one entry each. SQLAlchemy also calls a statement's scope on a connection in
    AUTOCOMMIT (the completer's) a transaction; psycopg sends no BEGIN there."""
    begun: list[str] = []

    def on_begin(conn: Connection) -> None:
        if not conn.connection.driver_connection.autocommit:  # type: ignore[union-attr]
            begun.append("begin")

    event.listen(engine, "begin", on_begin)
    try:
        yield begun
    finally:
        event.remove(engine, "begin", on_begin)


def claimed(db: Engine, queue: PostgresQueue, n: int) -> None:
    insert_due_reminders(db, n, next_run_utc=NOW)
    Coordinator(db, queue, lookahead_s=0, batch_size=1000, worker_id="c").run_once(NOW)


@pytest.mark.parametrize("recheck_interval_s", [60.0, 0.0])
def test_a_batch_of_first_sends_begins_no_transaction(
    db: Engine, queue: PostgresQueue, settings: Settings, recheck_interval_s: float
) -> None:
    """Also when each send re-reads its reminder first (sender.recheck, interval 0): the
    re-read is a statement of its own (a loaded CI run re-read, and sent a BEGIN)."""
    claimed(db, queue, 3)
    provider = CountingProvider(settings.effective_mail_dir)
    sender = make_sender(db, queue, settings, provider)
    sender.recheck_interval_s = recheck_interval_s
    assert sender.leaseless_first_send
    try:
        with transactions(db) as begun:
            assert sender.run_once(NOW).counts == {"sent": 3}
    finally:
        sender.close()
    assert begun == []
    assert len(provider.calls) == 3
    with db.connect() as conn:
        statuses = conn.execute(text("SELECT status FROM delivery_log")).scalars().all()
        left = conn.execute(text("SELECT count(*) FROM queue_messages")).scalar_one()
    assert statuses == ["sent"] * 3
    assert left == 0


@contextmanager
def statements(engine: Engine) -> Iterator[list[str]]:
    """The first line of each statement sent on `engine`'s connections meanwhile
    (SQLAlchemy's `before_cursor_execute`: every statement, whatever its transaction)."""
    sent: list[str] = []

    def on_execute(*args: object) -> None:
        sent.append(str(args[2]).split("\n", 1)[0])  # the statement's first line

    event.listen(engine, "before_cursor_execute", on_execute)
    try:
        yield sent
    finally:
        event.remove(engine, "before_cursor_execute", on_execute)


def test_a_batch_of_first_sends_reads_once_before_it_sends(
    db: Engine, queue: PostgresQueue, settings: Settings
) -> None:
    """docs/design.md, "Statements of a batch": the receive, the begin's one read (the
    reminders with their recipients' suppression), the completer's flushes, the delete.
    Each statement is told by the first line of its comment in store/sql/."""
    claimed(db, queue, 3)
    provider = CountingProvider(settings.effective_mail_dir)
    sender = make_sender(db, queue, settings, provider)
    # No send starts 0.1 s after the read here, however loaded the machine (a CI run took
    # longer, and the send re-read its reminders: one statement more, sender.recheck).
    sender.recheck_interval_s = 60
    try:
        with statements(db) as sent:
            assert sender.run_once(NOW).counts == {"sent": 3}
    finally:
        sender.close()
    receive, read, *flushes, delete = sent
    assert "ReceiveMessage" in receive, sent  # queue_message_receive
    assert "With the webhook endpoint" in read, sent  # reminder_get_many_for_send
    assert flushes, sent
    assert all("completer's flush" in f for f in flushes), sent
    assert "receipt handles' row ids" in delete, sent  # queue_message_delete_many


def test_the_begin_writes_in_one_transaction_when_it_has_something_to_write(
    db: Engine, queue: PostgresQueue, settings: Settings
) -> None:
    # alice@example.com (the settings' profile of every test reminder) is on the
    # suppression list: each occurrence is recorded `suppressed` by the begin itself
    # (docs/design.md, "Suppression list"), with no provider call.
    claimed(db, queue, 2)
    with db.begin() as conn:
        conn.execute(
            text("INSERT INTO suppressions (email, reason) VALUES ('alice@example.com', 'bounce')")
        )
    provider = CountingProvider(settings.effective_mail_dir)
    sender = make_sender(db, queue, settings, provider)
    try:
        messages = sender.receiver.receive(NOW)
        assert messages is not None
        received, decided = decode_batch(messages)
        assert decided == []
        with transactions(db) as begun:
            begun_sends, decided = sender.begin.run(received, NOW)
    finally:
        sender.close()
    assert begun == ["begin"]
    assert begun_sends == []
    assert [d.outcome.value for d in decided] == ["suppressed", "suppressed"]
    assert provider.calls == []
    with db.connect() as conn:  # committed: seen from another connection
        rows = conn.execute(text("SELECT status FROM delivery_log")).scalars().all()
    assert rows == ["suppressed", "suppressed"]


class FailingDelete(PostgresQueue):
    """The PostgreSQL queue whose delete fails, as when the database goes away between
    the flush and the delete."""

    def delete(self, receipt_handles: Sequence[str]) -> None:
        raise InfrastructureError(f"the queue's delete of {len(receipt_handles)} failed (test)")


def test_sends_are_counted_when_the_queue_delete_then_fails(db: Engine, settings: Settings) -> None:
    # Trial helper-52: reminders_sends_total counted after the delete, so a delete that
    # raised during a crash run left 2 of 4,000 recorded sends uncounted.
    queue = FailingDelete(db, name="reminders", max_receive_count=5)
    claimed(db, queue, 2)
    provider = CountingProvider(settings.effective_mail_dir)
    sender = make_sender(db, queue, settings, provider)
    labels = {"provider": "file", "outcome": "sent"}
    before = REGISTRY.get_sample_value("reminders_sends_total", labels) or 0.0
    try:
        with pytest.raises(InfrastructureError):
            sender.run_once(NOW)
    finally:
        sender.close()
    assert len(provider.calls) == 2
    assert REGISTRY.get_sample_value("reminders_sends_total", labels) == before + 2
