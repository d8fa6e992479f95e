"""PostgreSQL table queue backend (`queue_messages`), the default for a laptop."""

from __future__ import annotations

import json
import logging
import threading
from collections.abc import Mapping, Sequence
from datetime import datetime, timedelta
from typing import Any

import orjson
from sqlalchemy import Engine
from sqlalchemy.exc import InterfaceError, OperationalError

from reminder_core.db.listen import Listener
from reminder_core.errors import InfrastructureError
from reminder_core.queue.base import DeadLetter, Message, QueueDepth
from reminder_core.store import queue_messages

log = logging.getLogger(__name__)


class PostgresQueue:
    """SQS semantics on one table: each statement is its own short transaction.

    Args:
        engine: database engine.
        name: queue name (several queues may share the table).
        max_receive_count: receives after which a message is moved to the DLQ.
    """

    #: A message received for the first time (receive count 1) that is not a replay is
    #: the only live copy of its occurrence: the coordinator's claim writes it in the
    #: claim's own transaction, and the claim rescuer re-drives no reminder whose message
    #: is still live in this queue (`reminder_rescue_claimed`). So its receipt handle,
    #: under the visibility timeout the heartbeat extends, keeps every other sender off
    #: the occurrence while it is sent (docs/design.md, "First sends without a lease").
    first_receive_exclusive = True

    def __init__(self, engine: Engine, *, name: str, max_receive_count: int) -> None:
        self._engine = engine
        self.name = name
        self.max_receive_count = max_receive_count
        self._listener: Listener | None = None

    def in_database_of(self, engine: Engine) -> bool:
        """Whether this queue's table is in the database `engine` writes to (same URL),
        so that a statement on `engine` can write its messages in its own transaction
        (the coordinator's claim does: `services.reminders.claim_due_to_queue`)."""
        return bool(engine.url == self._engine.url)

    def wait_for_messages(
        self, stop: threading.Event, *, timeout_s: float, now: datetime, coalesce_s: float
    ) -> None:
        """Return when a message may be there to receive: `coalesce_s` seconds after the
        queue's next message becomes visible, at most `timeout_s` seconds from now, or when
        `stop` is set. A send to this queue (NOTIFY at its commit) during the wait brings
        the return forward if its message becomes visible sooner.

        Args:
            now: aware UTC, on the clock the messages' visibility was set with.
            coalesce_s: messages becoming visible within this many seconds of the next
                one are received together (a trickle of due messages becomes batches
                instead of one receive per message).

        Side effects: one query per wake-up (`next_visible`); a dedicated LISTEN
        connection, opened on first use (`close()` closes it). A database that cannot be
        reached makes this a plain sleep of `timeout_s`: the next receive reports it.
        """
        if self._listener is None:
            self._listener = Listener(self._engine, queue_messages.NOTIFY_CHANNEL)

        def wait_s(spent: float) -> float:
            with self._engine.connect() as conn:
                next_visible = queue_messages.next_visible(conn, queue=self.name)
            if next_visible is None:
                return timeout_s
            until = (next_visible - (now + timedelta(seconds=spent))).total_seconds()
            return max(0.0, until) + coalesce_s

        try:
            self._listener.wait_until(stop, timeout_s=timeout_s, wait_s=wait_s, payload=self.name)
        except (OperationalError, InterfaceError) as exc:
            log.debug("waiting for messages by polling (the database failed: %s)", exc)
            stop.wait(timeout_s)

    def close(self) -> None:
        """Close the LISTEN connection, if `wait_for_messages` opened one."""
        if self._listener is not None:
            self._listener.close()

    def check(self) -> None:
        """Nothing to check: the table comes with the migrations, and any name is a queue
        (its dead letters are rows of the same table)."""

    def send_batch(
        self, bodies: Sequence[Mapping[str, Any]], *, now: datetime, delays_s: Sequence[float]
    ) -> None:
        if len(bodies) != len(delays_s):
            raise ValueError("bodies and delays_s must have the same length")
        if not bodies:
            return
        try:
            with self._engine.begin() as conn:
                queue_messages.send_many(
                    conn, queue=self.name, bodies=bodies, delays_s=delays_s, now=now
                )
                queue_messages.notify(conn, queue=self.name)
        except OperationalError as exc:
            raise InfrastructureError(f"queue send failed: {exc}") from exc

    def receive(
        self, *, now: datetime, max_messages: int, visibility_timeout_s: float
    ) -> list[Message]:
        with self._engine.connect() as conn:  # one statement, its own transaction
            received = queue_messages.receive(
                conn,
                queue=self.name,
                now=now,
                limit=max_messages,
                max_receive_count=self.max_receive_count,
                visibility_timeout_s=visibility_timeout_s,
                autocommit=True,
            )
        return [
            Message(
                message_id=str(m.id),
                body=_body(m.body_json),
                receipt_handle=m.receipt_handle,
                receive_count=m.receive_count,
            )
            for m in received
        ]

    def delete(self, receipt_handles: Sequence[str]) -> None:
        if not receipt_handles:
            return
        with self._engine.connect() as conn:  # one statement, committed asynchronously
            queue_messages.delete_many(
                conn, queue=self.name, receipt_handles=receipt_handles, autocommit=True
            )

    def change_visibility(self, receipt_handle: str, *, now: datetime, timeout_s: float) -> None:
        with self._engine.begin() as conn:
            queue_messages.change_visibility(
                conn,
                queue=self.name,
                receipt_handle=receipt_handle,
                now=now,
                timeout_s=timeout_s,
            )

    def change_visibility_batch(
        self, changes: Sequence[tuple[str, float]], *, now: datetime
    ) -> None:
        if not changes:
            return
        with self._engine.begin() as conn:
            queue_messages.change_visibility_many(
                conn,
                queue=self.name,
                changes=changes,
                now=now,
            )

    def depth(self, *, now: datetime) -> QueueDepth:
        with self._engine.connect() as conn:
            counts = queue_messages.depth(conn, queue=self.name, now=now)
        return QueueDepth(
            visible=counts.visible,
            not_visible=counts.not_visible,
            dead_lettered=counts.dead_lettered,
        )

    def dead_letters(self, *, limit: int, unrecorded_only: bool = False) -> list[DeadLetter]:
        read = queue_messages.lock_dead_unrecorded if unrecorded_only else queue_messages.list_dead
        with self._engine.begin() as conn:
            dead = read(conn, queue=self.name, limit=limit)
        return [
            DeadLetter(
                message_id=str(d.id),
                body=d.body,
                receive_count=d.receive_count,
                dead_lettered_at=d.dead_lettered_at,
                recorded_at=d.dead_letter_recorded_at,
            )
            for d in dead
        ]

    def mark_dead_letters_recorded(self, message_ids: Sequence[str], *, now: datetime) -> None:
        if not message_ids:
            return
        with self._engine.begin() as conn:
            queue_messages.mark_dead_recorded(
                conn, queue=self.name, ids=[int(i) for i in message_ids], now=now
            )

    def redrive(self, message_ids: Sequence[str], *, now: datetime) -> list[str]:
        if not message_ids:
            return []
        with self._engine.begin() as conn:
            moved = queue_messages.redrive(
                conn, queue=self.name, ids=[int(i) for i in message_ids], now=now
            )
            if moved:
                queue_messages.notify(conn, queue=self.name)
        return [str(i) for i in moved]

    def delete_dead_letters(self, message_ids: Sequence[str] | None) -> list[str]:
        if message_ids is not None and not message_ids:
            return []
        with self._engine.begin() as conn:
            if message_ids is None:
                deleted = queue_messages.purge_dead(conn, queue=self.name)
            else:
                ids = [int(i) for i in message_ids]
                deleted = queue_messages.delete_dead(conn, queue=self.name, ids=ids)
        return [str(i) for i in deleted]


def _body(raw: str) -> dict[str, Any]:
    """A message body: the JSON object `queue_message_receive` returns as text (orjson parses it
    in a fraction of psycopg's json.loads; numbers beyond 64 bits, which orjson refuses,
    go through json.loads)."""
    try:
        body = orjson.loads(raw)
    except orjson.JSONDecodeError:
        body = json.loads(raw)
    if not isinstance(body, dict):
        raise ValueError(f"queue message body is not a JSON object: {raw[:200]!r}")
    return body
