"""Typed statements of a user's move between cells (`sql/cell_moves.sql`; docs/design.md,
"Moving a user between cells"): the `cell_moves` marker, the user's advisory lock, and
the freeze, copy and removal of one user's rows in one cell. Every function runs on the
caller's `Connection` and never commits; the caller (reminder_core.services.cell_move)
orders them across the cells.
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass
from datetime import datetime

from sqlalchemy import Connection

from reminder_core.store._statements import query, run

#: The tables holding a user's rows that move with them, in the order they are written
#: (a reminder names its webhook endpoint; a delivery row names its reminder). Left
#: behind: `rate_limits` (a minute's state, deleted), `live_reminder_bounds` (deleted: the
#: target starts the bound from a count), suppressions (per address, shared
#: by the cell's users), queue messages and outbox rows (none in flight once drained).
MOVED_TABLES = ("webhook_endpoints", "reminders", "delivery_log", "calendar_feeds")


@dataclass(frozen=True, slots=True)
class CellMoveMarker:
    """A `cell_moves` row: `user_id` is being moved from `from_cell` to `to_cell` since
    `started_at` (aware UTC)."""

    from_cell: str
    to_cell: str
    started_at: datetime


@dataclass(frozen=True, slots=True)
class InFlight:
    """What keeps a move from copying: `claimed` reminders, `sending` delivery rows under
    a live lease, and `receiving`: messages of the PostgreSQL queue a receiver holds now
    (a first send without a lease, or a backoff, whose outcome is still to be written)."""

    claimed: int
    sending: int
    receiving: int = 0

    @property
    def drained(self) -> bool:
        return self.claimed == 0 and self.sending == 0 and self.receiving == 0


@dataclass(frozen=True, slots=True)
class UserRowsSummary:
    """Counts of one user's rows in one cell, with digests of the reminders' (id, status,
    version) and the delivery rows' (id, status): equal summaries, equal rows."""

    reminders: int
    reminders_digest: str
    deliveries: int
    deliveries_digest: str
    calendar_feeds: int
    webhook_endpoints: int


def lock(conn: Connection, *, user_id: str) -> None:
    """Take `user_id`'s move lock exclusively until the transaction ends, waiting for the
    API writes of that user in progress (`cell_move_lock`)."""
    run(conn, query("cell_move_lock"), {"user_id": user_id})


def lock_shared(conn: Connection, *, user_id: str) -> None:
    """Take `user_id`'s move lock shared until the transaction ends: an API write's
    first statement, before it reads the marker (`cell_move_lock_shared`)."""
    run(conn, query("cell_move_lock_shared"), {"user_id": user_id})


def try_lock(conn: Connection, *, user_id: str) -> bool:
    """Take `user_id`'s mover lock (a session lock, in the directory's database); False
    when another move holds it (`cell_move_try_lock`)."""
    return bool(run(conn, query("cell_move_try_lock"), {"user_id": user_id}).scalar())


def unlock(conn: Connection, *, user_id: str) -> None:
    """Release `user_id`'s mover lock (`cell_move_unlock`)."""
    run(conn, query("cell_move_unlock"), {"user_id": user_id})


def get(conn: Connection, *, user_id: str) -> CellMoveMarker | None:
    """`user_id`'s move marker in this cell, None when they are not moving
    (`cell_move_get`)."""
    row = run(conn, query("cell_move_get"), {"user_id": user_id}).first()
    return None if row is None else CellMoveMarker(row.from_cell, row.to_cell, row.started_at)


def insert(
    conn: Connection, *, user_id: str, from_cell: str, to_cell: str, now: datetime
) -> CellMoveMarker:
    """Mark `user_id` as moving from `from_cell` to `to_cell` (kept when already marked)
    and return the marker now in place (`cell_move_insert`)."""
    run(
        conn,
        query("cell_move_insert"),
        {"user_id": user_id, "from_cell": from_cell, "to_cell": to_cell, "now": now},
    )
    marker = get(conn, user_id=user_id)
    assert marker is not None
    return marker


def delete(conn: Connection, *, user_id: str) -> None:
    """Remove `user_id`'s move marker (`cell_move_delete`)."""
    run(conn, query("cell_move_delete"), {"user_id": user_id})


def pause(
    conn: Connection,
    *,
    user_id: str,
    held_after: datetime,
    lease_cutoff: datetime,
    now: datetime,
) -> list[uuid.UUID]:
    """Freeze `user_id`'s pending reminders (paused_reason 'cell-move') and their claims
    held by quiet hours past `held_after` that no sender holds a live lease on, leases
    taken after `lease_cutoff` counting as live ('cell-move-held'); return their ids
    (`cell_move_pause`). Times aware UTC."""
    rows = run(
        conn,
        query("cell_move_pause"),
        {"user_id": user_id, "held_after": held_after, "lease_cutoff": lease_cutoff, "now": now},
    )
    return [r.id for r in rows]


def in_flight(conn: Connection, *, user_id: str, lease_cutoff: datetime, now: datetime) -> InFlight:
    """`user_id`'s claimed reminders, delivery rows under a lease taken after
    `lease_cutoff`, and queue messages a receiver holds at `now` (aware UTC)
    (`cell_move_in_flight`)."""
    row = run(
        conn,
        query("cell_move_in_flight"),
        {"user_id": user_id, "lease_cutoff": lease_cutoff, "now": now},
    ).one()
    return InFlight(int(row.claimed), int(row.sending), int(row.receiving))


def resume(conn: Connection, *, user_id: str, now: datetime) -> list[uuid.UUID]:
    """In the new cell: make every reminder `pause` froze pending, unclaimed; return their
    ids (`cell_move_resume`). The caller wakes the coordinators (reminders.due_notify)."""
    rows = run(conn, query("cell_move_resume"), {"user_id": user_id, "now": now})
    return [r.id for r in rows]


def undo(conn: Connection, *, user_id: str, now: datetime) -> list[uuid.UUID]:
    """In the old cell, a move abandoned: every reminder `pause` froze as it was (pending,
    or claimed for a held claim); return their ids (`cell_move_undo`)."""
    rows = run(conn, query("cell_move_undo"), {"user_id": user_id, "now": now})
    return [r.id for r in rows]


def summary(conn: Connection, *, user_id: str) -> UserRowsSummary:
    """Counts and digests of `user_id`'s rows here (`cell_move_summary`)."""
    row = run(conn, query("cell_move_summary"), {"user_id": user_id}).one()
    return UserRowsSummary(
        int(row.reminders),
        str(row.reminders_digest),
        int(row.deliveries),
        str(row.deliveries_digest),
        int(row.calendar_feeds),
        int(row.webhook_endpoints),
    )


def export_reminders(conn: Connection, *, user_id: str) -> str:
    """`user_id`'s reminders as a JSON array of whole rows (`cell_move_export_reminders`)."""
    return str(run(conn, query("cell_move_export_reminders"), {"user_id": user_id}).scalar())


def export_delivery_log(conn: Connection, *, user_id: str) -> str:
    """`user_id`'s delivery rows, every partition, as a JSON array
    (`cell_move_export_delivery_log`)."""
    found = run(conn, query("cell_move_export_delivery_log"), {"user_id": user_id})
    return str(found.scalar())


def export_calendar_feeds(conn: Connection, *, user_id: str) -> str:
    """`user_id`'s calendar feed row (or none) as a JSON array
    (`cell_move_export_calendar_feeds`)."""
    found = run(conn, query("cell_move_export_calendar_feeds"), {"user_id": user_id})
    return str(found.scalar())


def export_webhook_endpoints(conn: Connection, *, user_id: str) -> str:
    """`user_id`'s webhook endpoints as a JSON array (`cell_move_export_webhook_endpoints`)."""
    found = run(conn, query("cell_move_export_webhook_endpoints"), {"user_id": user_id})
    return str(found.scalar())


def import_webhook_endpoints(conn: Connection, *, rows: str) -> int:
    """Insert exported webhook endpoint rows as they were; return how many
    (`cell_move_import_webhook_endpoints`)."""
    return run(conn, query("cell_move_import_webhook_endpoints"), {"rows": rows}).rowcount


def import_reminders(conn: Connection, *, rows: str) -> int:
    """Insert exported reminder rows as they were, in one statement; return how many
    (`cell_move_import_reminders`)."""
    return run(conn, query("cell_move_import_reminders"), {"rows": rows}).rowcount


def import_delivery_log(conn: Connection, *, rows: str) -> int:
    """Insert exported delivery rows as they were (into this cell's partitions); return
    how many (`cell_move_import_delivery_log`)."""
    return run(conn, query("cell_move_import_delivery_log"), {"rows": rows}).rowcount


def import_calendar_feeds(conn: Connection, *, rows: str) -> int:
    """Insert an exported calendar feed row; return how many
    (`cell_move_import_calendar_feeds`)."""
    return run(conn, query("cell_move_import_calendar_feeds"), {"rows": rows}).rowcount


def delete_reminders(conn: Connection, *, user_id: str) -> int:
    """Delete `user_id`'s reminders here and, in the same statement, their delivery rows;
    return how many reminders (`cell_move_delete_reminders`)."""
    return run(conn, query("cell_move_delete_reminders"), {"user_id": user_id}).rowcount


def delete_webhook_endpoints(conn: Connection, *, user_id: str) -> int:
    """Delete `user_id`'s webhook endpoints here (`cell_move_delete_webhook_endpoints`)."""
    found = run(conn, query("cell_move_delete_webhook_endpoints"), {"user_id": user_id})
    return found.rowcount


def delete_calendar_feeds(conn: Connection, *, user_id: str) -> int:
    """Delete `user_id`'s calendar feed here (`cell_move_delete_calendar_feeds`)."""
    found = run(conn, query("cell_move_delete_calendar_feeds"), {"user_id": user_id})
    return found.rowcount


def delete_rate_limits(conn: Connection, *, user_id: str) -> int:
    """Delete `user_id`'s rate-limit state here (`cell_move_delete_rate_limits`)."""
    return run(conn, query("cell_move_delete_rate_limits"), {"user_id": user_id}).rowcount


def delete_live_reminder_bounds(conn: Connection, *, user_id: str) -> int:
    """Delete `user_id`'s quota bound here; the cell they live in starts theirs from an
    exact count (`cell_move_delete_live_reminder_bounds`)."""
    return run(conn, query("cell_move_delete_live_reminder_bounds"), {"user_id": user_id}).rowcount


def delete_queue_messages(conn: Connection, *, user_id: str) -> int:
    """Delete `user_id`'s messages from this cell's PostgreSQL queue, dead letters
    excepted; return how many (`cell_move_delete_queue_messages`)."""
    found = run(conn, query("cell_move_delete_queue_messages"), {"user_id": user_id})
    return found.rowcount


def schema_version(conn: Connection) -> str | None:
    """This database's Alembic revision, None when unmigrated (`cell_move_schema_version`)."""
    found = run(conn, query("cell_move_schema_version")).scalar_one_or_none()
    return None if found is None else str(found)
