"""Typed statements on `outbox`, the transactional outbox (`sql/outbox.sql`).

Rows are inserted by `reminders.claim_due` in the claim's own statement; this module
publishes and expires them. Every function runs on the caller's `Connection` and never
commits.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterable
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from sqlalchemy import Connection

from reminder_core.store._statements import id_array, query, records, run


@dataclass(frozen=True, slots=True)
class OutboxRow:
    """One outbox row: its id and the queue message body of its occurrence (the shape
    `reminder_core.messages.OccurrenceMessage.encode` gives: reminder_id, run_time_utc,
    version, user_id)."""

    id: uuid.UUID
    payload: dict[str, Any]


def mark_published(conn: Connection, ids: Iterable[uuid.UUID], *, now: datetime) -> None:
    """Set `published_at = now` (aware UTC) on the rows of `ids` not yet published
    (`outbox_mark_published`); rows already published keep their time."""
    run(conn, query("outbox_mark_published"), {"ids": id_array(ids), "now": now})


def lock_unpublished(conn: Connection, *, older_than: datetime, limit: int) -> list[OutboxRow]:
    """Up to `limit` unpublished rows created at or before `older_than` (aware UTC), oldest
    first, row-locked `FOR UPDATE SKIP LOCKED` until the caller's transaction ends (two
    sweepers never publish the same row at once) (`outbox_lock_unpublished`)."""
    rows = run(conn, query("outbox_lock_unpublished"), {"older_than": older_than, "limit": limit})
    return records(OutboxRow, rows, payload=dict)


def delete_published(conn: Connection, *, cutoff: datetime, limit: int) -> int:
    """Delete up to `limit` rows published before `cutoff` (aware UTC); unpublished rows
    are never deleted (`outbox_delete_published`). Returns how many were deleted."""
    result = run(conn, query("outbox_delete_published"), {"cutoff": cutoff, "limit": limit})
    return int(result.rowcount)
