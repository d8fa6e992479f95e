"""Helpers for integration tests: bulk-insert reminders with plain SQL."""

from __future__ import annotations

from datetime import datetime

from sqlalchemy import Engine, text


def insert_due_reminders(
    engine: Engine,
    count: int,
    *,
    next_run_utc: datetime,
    user_id: str = "alice",
    status: str = "pending",
    title: str = "Due",
    timezone: str | None = "UTC",
) -> None:
    """Insert `count` one-time reminders due at `next_run_utc` (one statement).

    `timezone` None makes them follow the user's profile zone.
    """
    with engine.begin() as conn:
        conn.execute(
            text(
                "INSERT INTO reminders (user_id, title, start_local, timezone, next_run_utc,"
                " status) SELECT :user_id, :title || ' ' || g, :local, :tz, :next_run, :status"
                " FROM generate_series(1, :count) AS g"
            ),
            {
                "user_id": user_id,
                "title": title,
                "local": next_run_utc.replace(tzinfo=None),
                "next_run": next_run_utc,
                "status": status,
                "tz": timezone,
                "count": count,
            },
        )
