"""Typed statements on `live_reminder_bounds` (`sql/live_reminder_bounds.sql`;
docs/operations.md, "Fair limits"): an upper bound of each user's live reminders, kept so
that a create checks QUOTA_LIVE_REMINDERS without counting them (issue 15). Every function
runs on the caller's `Connection` and never commits."""

from __future__ import annotations

from sqlalchemy import Connection

from reminder_core.store._statements import query, run


def increment(conn: Connection, *, user_id: str) -> int | None:
    """Raise `user_id`'s bound by one (one more live reminder), row-locking it until the
    caller's transaction ends; the new bound, or None when the user has no row yet
    (`live_reminder_bound_increment`)."""
    bound = run(conn, query("live_reminder_bound_increment"), {"user_id": user_id})
    found = bound.scalar_one_or_none()
    return None if found is None else int(found)


def start(conn: Connection, *, user_id: str) -> int:
    """`user_id`'s first bound: their live reminders counted now plus one, or, when a
    concurrent request started it first, that bound plus one; row-locked until the
    caller's transaction ends (`live_reminder_bound_start`)."""
    return int(run(conn, query("live_reminder_bound_start"), {"user_id": user_id}).scalar_one())


def reset(conn: Connection, *, user_id: str, bound: int) -> None:
    """Set `user_id`'s bound to `bound`, an exact count taken under its row lock
    (`live_reminder_bound_reset`)."""
    run(conn, query("live_reminder_bound_reset"), {"user_id": user_id, "bound": bound})
