"""PostgreSQL table queue backend (`queue_messages`), the default for a laptop."""

from __future__ import annotations

import json
import uuid
from collections.abc import Mapping, Sequence
from datetime import datetime
from typing import Any

import orjson
from sqlalchemy import Engine
from sqlalchemy.exc import OperationalError

from reminder_core.errors import InfrastructureError
from reminder_core.queue.base import DeadLetter, Message, QueueDepth
from reminder_core.store._statements import id_array, json_rows, query


class PostgresQueue:
    """SQS semantics on one table: each statement is its own short transaction.

    Args:
        engine: database engine.
        name: queue name (several queues may share the table).
        max_receive_count: receives after which a message is moved to the DLQ.
    """

    def __init__(self, engine: Engine, *, name: str, max_receive_count: int) -> None:
        self._engine = engine
        self.name = name
        self.max_receive_count = max_receive_count

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
        params = {
            "queue": self.name,
            "bodies": json_rows(dict(b) for b in bodies),
            "delays_s": [float(d) for d in delays_s],
            "now": now,
        }
        try:
            with self._engine.begin() as conn:
                conn.execute(query("queue_message_send_many"), params)
        except OperationalError as exc:
            raise InfrastructureError(f"queue send failed: {exc}") from exc

    def receive(
        self, *, now: datetime, max_messages: int, visibility_timeout_s: float
    ) -> list[Message]:
        params = {
            "queue": self.name,
            "now": now,
            "limit": max_messages,
            "max_receive_count": self.max_receive_count,
            "visibility_timeout_s": float(visibility_timeout_s),
        }
        with self._engine.begin() as conn:
            rows = sorted(
                conn.execute(query("queue_message_receive"), params).all(),
                key=lambda r: (r.created_at, r.id),
            )
        return [
            Message(
                message_id=str(r.id),
                body=_body(r.body),
                receipt_handle=str(r.receipt_handle),
                receive_count=r.receive_count,
            )
            for r in rows
        ]

    def delete(self, receipt_handles: Sequence[str]) -> None:
        if not receipt_handles:
            return
        handles = id_array(uuid.UUID(h) for h in receipt_handles)
        with self._engine.begin() as conn:
            conn.execute(
                query("queue_message_delete_many"), {"queue": self.name, "handles": handles}
            )

    def change_visibility(self, receipt_handle: str, *, now: datetime, timeout_s: float) -> None:
        with self._engine.begin() as conn:
            conn.execute(
                query("queue_message_change_visibility"),
                {
                    "queue": self.name,
                    "handle": uuid.UUID(receipt_handle),
                    "now": now,
                    "timeout_s": float(timeout_s),
                },
            )

    def change_visibility_batch(
        self, changes: Sequence[tuple[str, float]], *, now: datetime
    ) -> None:
        if not changes:
            return
        with self._engine.begin() as conn:
            conn.execute(
                query("queue_message_change_visibility_many"),
                {
                    "queue": self.name,
                    "rows": json_rows(
                        {"handle": uuid.UUID(h), "timeout_s": float(t)} for h, t in changes
                    ),
                    "now": now,
                },
            )

    def depth(self, *, now: datetime) -> QueueDepth:
        with self._engine.connect() as conn:
            row = conn.execute(query("queue_message_depth"), {"queue": self.name, "now": now}).one()
        return QueueDepth(
            visible=row.visible, not_visible=row.not_visible, dead_lettered=row.dead_lettered
        )

    def dead_letters(self, *, limit: int, unrecorded_only: bool = False) -> list[DeadLetter]:
        name = (
            "queue_message_lock_dead_unrecorded" if unrecorded_only else "queue_message_list_dead"
        )
        with self._engine.begin() as conn:
            rows = conn.execute(query(name), {"queue": self.name, "limit": limit}).all()
        return [
            DeadLetter(
                message_id=str(r.id),
                body=dict(r.body),
                receive_count=r.receive_count,
                dead_lettered_at=r.dead_lettered_at,
                recorded_at=r.dead_letter_recorded_at,
            )
            for r in rows
        ]

    def mark_dead_letters_recorded(self, message_ids: Sequence[str], *, now: datetime) -> None:
        if not message_ids:
            return
        with self._engine.begin() as conn:
            conn.execute(
                query("queue_message_mark_dead_recorded"),
                {"queue": self.name, "ids": [int(i) for i in message_ids], "now": now},
            )

    def redrive(self, message_ids: Sequence[str], *, now: datetime) -> list[str]:
        if not message_ids:
            return []
        with self._engine.begin() as conn:
            rows = conn.execute(
                query("queue_message_redrive"),
                {"queue": self.name, "ids": [int(i) for i in message_ids], "now": now},
            ).scalars()
            return [str(i) for i in rows]

    def delete_dead_letters(self, message_ids: Sequence[str] | None) -> list[str]:
        if message_ids is not None and not message_ids:
            return []
        with self._engine.begin() as conn:
            if message_ids is None:
                rows = conn.execute(
                    query("queue_message_purge_dead"), {"queue": self.name}
                ).scalars()
            else:
                ids = [int(i) for i in message_ids]
                rows = conn.execute(
                    query("queue_message_delete_dead"), {"queue": self.name, "ids": ids}
                ).scalars()
            return [str(i) for i in rows]


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
