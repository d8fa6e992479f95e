"""Typed statements on `cell_loads` (`sql/cell_loads.sql`; docs/design.md, "Cells").
Every function runs on the caller's `Connection` and never commits."""

from __future__ import annotations

from sqlalchemy import Connection

from reminder_core.store._statements import query, run


def list(conn: Connection) -> dict[str, int]:
    """Users assigned to each cell (cells without any are absent) (`cell_load_list`)."""
    return {str(r.cell): int(r.users) for r in run(conn, query("cell_load_list"))}


def add(conn: Connection, *, cell: str, users: int) -> None:
    """Count `users` more users in `cell` (negative: fewer) (`cell_load_add`).

    Side effects: row-locks the cell's row until the caller's transaction ends."""
    run(conn, query("cell_load_add"), {"cell": cell, "users": users})
