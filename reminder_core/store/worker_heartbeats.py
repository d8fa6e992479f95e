"""Typed statements on `worker_heartbeats` (`sql/worker_heartbeats.sql`; docs/design.md,
"Workers"). Every function runs on the caller's `Connection` and never commits."""

from __future__ import annotations

import uuid
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from datetime import datetime

from sqlalchemy import Connection

from reminder_core.store._statements import id_array, json_rows, query, records, run


@dataclass(frozen=True, slots=True)
class LoopBeat:
    """What one loop of this process reports at a heartbeat.

    Attributes:
        id: the loop's row id (made once by the process).
        role: the loop's service name (coordinator, outbox_sweeper, sender, maintenance).
        last_tick_at: aware UTC, its last finished tick (None: none yet).
        consecutive_failures: failed ticks in a row, now.
    """

    id: uuid.UUID
    role: str
    last_tick_at: datetime | None
    consecutive_failures: int


@dataclass(frozen=True, slots=True)
class ProcessInfo:
    """The process a set of loops runs in: host name, pid, command (`reminders sender`),
    package version, and when it started (aware UTC)."""

    host: str
    pid: int
    process: str
    version: str
    started_at: datetime


@dataclass(frozen=True, slots=True)
class WorkerRow:
    """One row of `worker_heartbeats`; instants aware UTC (see the model's comments)."""

    id: uuid.UUID
    role: str
    host: str
    pid: int
    process: str
    version: str
    started_at: datetime
    last_seen_at: datetime
    last_tick_at: datetime | None
    consecutive_failures: int
    stopped_at: datetime | None


def beat_many(
    conn: Connection, *, process: ProcessInfo, loops: Sequence[LoopBeat], now: datetime
) -> None:
    """Insert or refresh one row per loop of `process`, seen at `now` (aware UTC); a row
    already marked stopped is left alone (`worker_heartbeat_beat_many`)."""
    if not loops:
        return
    run(
        conn,
        query("worker_heartbeat_beat_many"),
        {
            "rows": json_rows(
                {
                    "id": b.id,
                    "role": b.role,
                    "last_tick_at": b.last_tick_at,
                    "consecutive_failures": b.consecutive_failures,
                }
                for b in loops
            ),
            "host": process.host,
            "pid": process.pid,
            "process": process.process,
            "version": process.version,
            "started_at": process.started_at,
            "now": now,
        },
    )


def mark_stopped(conn: Connection, ids: Iterable[uuid.UUID], *, now: datetime) -> None:
    """Mark the rows of `ids` stopped at `now` (aware UTC): a clean exit
    (`worker_heartbeat_mark_stopped`)."""
    run(conn, query("worker_heartbeat_mark_stopped"), {"ids": id_array(ids), "now": now})


def list_since(conn: Connection, *, since: datetime) -> list[WorkerRow]:
    """Every row seen at or after `since` (aware UTC), by role, newest first
    (`worker_heartbeat_list_since`)."""
    return records(WorkerRow, run(conn, query("worker_heartbeat_list_since"), {"since": since}))


def last_seen_by_role(conn: Connection) -> dict[str, WorkerRow]:
    """The newest row of every role ever recorded, by role
    (`worker_heartbeat_last_seen_by_role`)."""
    rows = records(WorkerRow, run(conn, query("worker_heartbeat_last_seen_by_role")))
    return {r.role: r for r in rows}


def delete_expired(conn: Connection, *, cutoff: datetime, limit: int) -> int:
    """Delete up to `limit` rows last seen before `cutoff` (aware UTC); returns how many
    (`worker_heartbeat_delete_expired`)."""
    result = run(conn, query("worker_heartbeat_delete_expired"), {"cutoff": cutoff, "limit": limit})
    return int(result.rowcount)
