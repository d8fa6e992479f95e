"""Typed statements on `queue_messages` (`sql/queue_messages.sql`), the PostgreSQL queue
backend with SQS semantics: visibility timeout, receive count, dead letters. Every
function runs on the caller's `Connection` and never commits; `queue` names the queue
(several share the table)."""

from __future__ import annotations

import re
import uuid
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

import orjson
from sqlalchemy import Connection

from reminder_core.record import record
from reminder_core.store._statements import (
    id_array,
    json_rows,
    query,
    records,
    run,
)


@record
class ReceivedMessage:
    """One message as a receive left it: invisible, with a fresh receipt handle.

    Attributes:
        id: the message's row id (stable across receives).
        body_json: the JSON object that was sent, as text (decoded by the queue after
            the receive commits, so that a body that is no object still counts as
            received).
        receipt_handle: the handle of this receive (a stale one deletes nothing):
            "<id>.<token>", the row's id and this receive's random token (a UUID), as
            `Message.receipt_handle` carries it (`split_receipt_handles` parts it).
        receive_count: receives so far, this one included (>= 1).
        created_at: aware UTC, when it was sent.
    """

    id: int
    body_json: str
    receipt_handle: str
    receive_count: int
    created_at: datetime


@dataclass(frozen=True, slots=True)
class Depth:
    """Counts of one queue's messages at one instant: visible, not visible (in flight or
    delayed) and dead-lettered."""

    visible: int
    not_visible: int
    dead_lettered: int


@dataclass(frozen=True, slots=True)
class DeadMessage:
    """A dead-lettered message.

    Attributes:
        id: the message's row id.
        body: the JSON object that was sent.
        receive_count: receives before it was dead-lettered.
        dead_lettered_at: aware UTC, when it was moved to the dead-letter queue.
        dead_letter_recorded_at: aware UTC, when its occurrence was recorded `failed`
            (None: not yet).
    """

    id: int
    body: dict[str, Any]
    receive_count: int
    dead_lettered_at: datetime | None
    dead_letter_recorded_at: datetime | None


def send_many(
    conn: Connection,
    *,
    queue: str,
    bodies: Sequence[Mapping[str, object]],
    delays_s: Sequence[float],
    now: datetime,
) -> None:
    """Insert one message per body, body i visible `delays_s[i]` seconds after `now`
    (aware UTC), in one statement (`queue_message_send_many`). The two sequences have the
    same length (the statement pairs them by position)."""
    run(
        conn,
        query("queue_message_send_many"),
        {
            "queue": queue,
            "bodies": json_rows(dict(b) for b in bodies),
            "delays_s": [float(d) for d in delays_s],
            "now": now,
        },
    )


def receive(
    conn: Connection,
    *,
    queue: str,
    now: datetime,
    limit: int,
    max_receive_count: int,
    visibility_timeout_s: float,
    autocommit: bool = False,
) -> list[ReceivedMessage]:
    """Receive up to `limit` messages visible at `now` (aware UTC), oldest first (by
    created_at, then id) (`queue_message_receive`); with `autocommit` (`conn` outside a
    transaction), as a transaction of its own, committed as it runs (no BEGIN and
    COMMIT round trips).

    Side effects: each message returned is hidden for `visibility_timeout_s` seconds, its
    receive count incremented and a new receipt handle given; a visible message already
    received `max_receive_count` times is dead-lettered instead of returned. Messages
    another transaction has locked are skipped.
    """
    result = run(
        conn,
        query("queue_message_receive"),
        {
            "queue": queue,
            "now": now,
            "limit": limit,
            "max_receive_count": max_receive_count,
            "visibility_timeout_s": float(visibility_timeout_s),
        },
        autocommit=autocommit,
    )
    return sorted(records(ReceivedMessage, result), key=lambda m: (m.created_at, m.id))


#: The largest message id (queue_messages.id is a bigint).
MAX_ID = 2**63 - 1
#: A receipt handle of this queue: "<id>.<token>" (`receive`).
_HANDLE = re.compile(r"([0-9]{1,19})\.([0-9a-f]{8}(?:-[0-9a-f]{4}){3}-[0-9a-f]{12})")


def split_receipt_handle(handle: str) -> tuple[int, str]:
    """(row id, token) of a receipt handle `receive` gave.

    Raises:
        ValueError: `handle` is not one of this queue's handles (e.g. an SQS one).
    """
    match = _HANDLE.fullmatch(handle) if type(handle) is str else None
    if match is None or int(match[1]) > MAX_ID:  # 19 digits can pass a bigint (trial)
        raise ValueError(f"not a receipt handle of the PostgreSQL queue: {handle!r}")
    return int(match[1]), match[2]


def delete_many(
    conn: Connection, *, queue: str, receipt_handles: Iterable[str], autocommit: bool = False
) -> None:
    """Delete the messages whose current receipt handle is one of `receipt_handles` (as
    `receive` gave them); a stale handle (the message was received again since) deletes
    nothing (`queue_message_delete_many`: by primary key, the token checked). With
    `autocommit` (`conn` outside a transaction), as a transaction of its own.

    The delete's transaction commits asynchronously (`synchronous_commit` off for it
    alone; docs/design.md, "Statements of a batch"): it returns before its WAL is on disk,
    and a PostgreSQL crash in the next few hundred milliseconds may bring its messages
    back, to be found terminal (DUPLICATE). Inside a caller's transaction, that whole
    transaction commits asynchronously.

    Raises:
        ValueError: a handle is not one of this queue's (nothing is deleted).
    """
    parts = [split_receipt_handle(h) for h in receipt_handles]
    run(
        conn,
        query("queue_message_delete_many"),
        {
            "queue": queue,
            "ids": id_array([i for i, _ in parts]),
            # Written as receive writes them (a handle's id may have come with leading
            # zeros): the statement compares the row's handle with these keys as text.
            "handles": orjson.dumps(dict.fromkeys((f"{i}.{t}" for i, t in parts), 1)).decode(),
        },
        autocommit=autocommit,
    )


def change_visibility(
    conn: Connection, *, queue: str, receipt_handle: str, now: datetime, timeout_s: float
) -> None:
    """Make the message of `receipt_handle` visible `timeout_s` seconds after `now` (aware
    UTC; 0: visible now); a stale handle or a dead letter changes nothing
    (`queue_message_change_visibility`).

    Raises:
        ValueError: the handle is not one of this queue's.
    """
    message_id, token = split_receipt_handle(receipt_handle)
    run(
        conn,
        query("queue_message_change_visibility"),
        {
            "queue": queue,
            "id": message_id,
            "token": uuid.UUID(token),
            "now": now,
            "timeout_s": float(timeout_s),
        },
    )


def change_visibility_many(
    conn: Connection, *, queue: str, changes: Iterable[tuple[str, float]], now: datetime
) -> None:
    """`change_visibility` for many messages in one statement: (receipt handle, timeout in
    seconds after `now`) pairs (`queue_message_change_visibility_many`).

    Raises:
        ValueError: a handle is not one of this queue's (nothing is changed).
    """
    rows = []
    for handle, timeout_s in changes:
        message_id, token = split_receipt_handle(handle)
        rows.append({"id": message_id, "token": token, "timeout_s": float(timeout_s)})
    run(
        conn,
        query("queue_message_change_visibility_many"),
        {"queue": queue, "rows": json_rows(rows), "now": now},
    )


def depth(conn: Connection, *, queue: str, now: datetime) -> Depth:
    """Count the queue's messages as of `now` (aware UTC); reads only
    (`queue_message_depth`)."""
    row = run(conn, query("queue_message_depth"), {"queue": queue, "now": now}).one()
    return Depth(visible=row.visible, not_visible=row.not_visible, dead_lettered=row.dead_lettered)


def list_dead(conn: Connection, *, queue: str, limit: int) -> list[DeadMessage]:
    """Up to `limit` dead letters, oldest dead-lettered first (then by id); no lock
    (`queue_message_list_dead`)."""
    rows = run(conn, query("queue_message_list_dead"), {"queue": queue, "limit": limit})
    return records(DeadMessage, rows, body=dict)


def lock_dead_unrecorded(conn: Connection, *, queue: str, limit: int) -> list[DeadMessage]:
    """Up to `limit` dead letters whose occurrence is not recorded yet, oldest first,
    row-locked `FOR UPDATE SKIP LOCKED` until the caller's transaction ends
    (`queue_message_lock_dead_unrecorded`)."""
    rows = run(conn, query("queue_message_lock_dead_unrecorded"), {"queue": queue, "limit": limit})
    return records(DeadMessage, rows, body=dict)


def mark_dead_recorded(conn: Connection, *, queue: str, ids: Iterable[int], now: datetime) -> None:
    """Set `dead_letter_recorded_at = now` (aware UTC) on the dead letters of `ids`; ids
    not dead-lettered are left alone (`queue_message_mark_dead_recorded`)."""
    run(
        conn,
        query("queue_message_mark_dead_recorded"),
        {"queue": queue, "ids": list(ids), "now": now},
    )


def redrive(conn: Connection, *, queue: str, ids: Iterable[int], now: datetime) -> list[int]:
    """Move the dead letters of `ids` back to the queue: visible at `now` (aware UTC),
    receive count 0, body marked `"replay": true` (`queue_message_redrive`). Returns the
    ids moved (an id that is no dead letter is not)."""
    result = run(
        conn, query("queue_message_redrive"), {"queue": queue, "ids": list(ids), "now": now}
    )
    return list(result.scalars())


def count_live_copies(
    conn: Connection, *, queue: str, reminder_id: uuid.UUID, run_time_utc: datetime
) -> int:
    """Live (not dead-lettered) messages of `queue` for the occurrence (`reminder_id`,
    `run_time_utc` aware UTC) (`queue_message_count_live_copies`)."""
    params = {"queue": queue, "reminder_id": reminder_id, "run_time_utc": run_time_utc}
    return int(run(conn, query("queue_message_count_live_copies"), params).scalar_one())


def delete_dead(conn: Connection, *, queue: str, ids: Iterable[int]) -> list[int]:
    """Delete the dead letters of `ids` (`queue_message_delete_dead`); returns the ids
    deleted (an id that is no dead letter is not)."""
    result = run(conn, query("queue_message_delete_dead"), {"queue": queue, "ids": list(ids)})
    return list(result.scalars())


def purge_dead(conn: Connection, *, queue: str) -> list[int]:
    """Delete every dead letter of the queue (`queue_message_purge_dead`); returns their
    ids."""
    return list(run(conn, query("queue_message_purge_dead"), {"queue": queue}).scalars())


#: The LISTEN/NOTIFY channel of every PostgreSQL queue; the payload names the queue.
NOTIFY_CHANNEL = "reminders_queue_messages"


def next_visible(conn: Connection, *, queue: str) -> datetime | None:
    """When the queue's next message becomes visible (aware UTC; at or before now when
    one is visible already), None when it holds none (`queue_message_next_visible`)."""
    value: datetime | None = run(
        conn, query("queue_message_next_visible"), {"queue": queue}
    ).scalar_one()
    return value


def notify(conn: Connection, *, queue: str) -> None:
    """Tell the queue's receivers, at commit, that messages were sent
    (`queue_message_notify`; PostgreSQL NOTIFY on NOTIFY_CHANNEL)."""
    run(conn, query("queue_message_notify"), {"channel": NOTIFY_CHANNEL, "queue": queue})
