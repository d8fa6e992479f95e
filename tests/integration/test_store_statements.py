"""The store's statements (reminder_core/store/_statements.py) against the real database:
the result columns learned from a statement's first records, and the drift check that
still catches a column added after they were learned (issue 15)."""

from __future__ import annotations

import uuid
from datetime import UTC, datetime

import pytest
from sqlalchemy import Engine, TextClause, text
from sqlalchemy.sql.selectable import TextualSelect

from reminder_core.store import reminders
from reminder_core.store._statements import query


def table_columns(db: Engine, table: str) -> list[str]:
    """The table's columns in the database's order (information_schema, not our code)."""
    with db.connect() as conn:
        return list(
            conn.execute(
                text("SELECT column_name FROM information_schema.columns"
                     " WHERE table_name = :t ORDER BY ordinal_position"),
                {"t": table},
            ).scalars()
        )  # fmt: skip


def insert_one(db: Engine) -> uuid.UUID:
    with db.begin() as conn:
        return uuid.UUID(
            str(
                conn.execute(
                    text("INSERT INTO reminders (user_id, title, start_local, timezone,"
                         " next_run_utc) VALUES ('u1', 't', '2031-03-30 09:00',"
                         " 'Europe/Paris', :due) RETURNING id"),
                    {"due": datetime(2031, 3, 30, 7, tzinfo=UTC)},
                ).scalar_one()
            )
        )  # fmt: skip


def test_a_select_star_learns_the_columns_the_database_returns(db: Engine) -> None:
    reminder_id = insert_one(db)
    with db.connect() as conn:
        first = reminders.get(conn, user_id="u1", reminder_id=reminder_id)
        learned = query("reminder_get")
        again = reminders.get(conn, user_id="u1", reminder_id=reminder_id)
    assert first is not None
    assert again == first
    assert isinstance(learned, TextualSelect)  # SQLAlchemy caches its result metadata
    assert [c.name for c in learned.selected_columns] == table_columns(db, "reminders")


def test_a_column_added_after_the_columns_were_learned_fails_loudly(db: Engine) -> None:
    reminder_id = insert_one(db)
    with db.connect() as conn:
        reminders.get(conn, user_id="u1", reminder_id=reminder_id)
        assert not isinstance(query("reminder_get"), TextClause)  # learned
        conn.execute(text("ALTER TABLE reminders ADD COLUMN added_by_a_migration int"))
        with pytest.raises(RuntimeError, match="now returns"):
            reminders.get(conn, user_id="u1", reminder_id=reminder_id)
        conn.rollback()  # the column goes again
    assert "added_by_a_migration" not in table_columns(db, "reminders")
