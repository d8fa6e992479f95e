"""Typed statements on `cell_assignments` (`sql/cell_assignments.sql`; docs/design.md,
"Cells"). Every function runs on the caller's `Connection` and never commits."""

from __future__ import annotations

from datetime import datetime

from sqlalchemy import Connection

from reminder_core.store._statements import query, run


def get(conn: Connection, *, user_id: str) -> str | None:
    """The name of the cell `user_id` lives in, None when unassigned
    (`cell_assignment_get`)."""
    found = run(conn, query("cell_assignment_get"), {"user_id": user_id}).scalar_one_or_none()
    return None if found is None else str(found)


def insert(conn: Connection, *, user_id: str, cell: str, now: datetime) -> bool:
    """Assign `user_id` to `cell` at `now` (aware UTC); False when the user already had a
    cell (a concurrent first request won: read it with `get`) (`cell_assignment_insert`)."""
    row = run(
        conn, query("cell_assignment_insert"), {"user_id": user_id, "cell": cell, "now": now}
    ).first()
    return row is not None


def move(conn: Connection, *, user_id: str, from_cell: str, to_cell: str, now: datetime) -> bool:
    """Point `user_id` at `to_cell` where they live in `from_cell`; False when they do
    not (already switched, or elsewhere) (`cell_assignment_move`).

    Side effects: row-locks the user's assignment until the transaction ends."""
    row = run(
        conn,
        query("cell_assignment_move"),
        {"user_id": user_id, "from_cell": from_cell, "to_cell": to_cell, "now": now},
    ).first()
    return row is not None
