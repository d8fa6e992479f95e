"""The store's statements (reminder_core/store/_statements.py) against the real database:
the result columns declared from a statement's first records (issue 15), and what a
migration under a running process does to them: a column added is refused loudly and the
statement works again once it is gone; columns reordered (a column recreated, as a type
change does) map to the right fields, never swapped (found by an adversarial trial: the
declared columns map by position)."""

from __future__ import annotations

import uuid
from datetime import UTC, datetime

import pytest
from sqlalchemy import Connection, Engine, TextClause, text
from sqlalchemy.sql.selectable import TextualSelect

from reminder_core.store import reminders
from reminder_core.store._statements import query


def table_columns(db: Engine, table: str) -> list[str]:
    """The table's columns in the database's order (information_schema, not our code)."""
    with db.connect() as conn:
        return table_columns_in(conn, table)


def table_columns_in(conn: Connection, table: str) -> list[str]:
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
        reminders.get(conn, user_id="u1", reminder_id=reminder_id)  # cached metadata
        assert not isinstance(query("reminder_get"), TextClause)  # learned
        conn.execute(text("ALTER TABLE reminders ADD COLUMN added_by_a_migration int"))
        with pytest.raises(RuntimeError, match="added_by_a_migration"):
            reminders.get(conn, user_id="u1", reminder_id=reminder_id)
        conn.execute(text("ALTER TABLE reminders DROP COLUMN added_by_a_migration"))
        again = reminders.get(conn, user_id="u1", reminder_id=reminder_id)  # no restart
        assert again is not None
        assert again.id == reminder_id
        conn.rollback()


def test_columns_reordered_by_a_migration_still_map_to_their_fields(db: Engine) -> None:
    reminder_id = insert_one(db)
    with db.begin() as conn:
        conn.execute(text("UPDATE reminders SET body = 'the body', snoozed_from = id"))
    with db.connect() as conn:
        for _ in range(3):  # learned, then SQLAlchemy's metadata cached
            before = reminders.get(conn, user_id="u1", reminder_id=reminder_id)
        assert before is not None
        # Recreate `title` and `snoozed_from` at the end of the table: every column after
        # them moves, and the count stays the same.
        conn.execute(text(
            "ALTER TABLE reminders ADD COLUMN title_new text, ADD COLUMN sf_new uuid;"
            " UPDATE reminders SET title_new = title, sf_new = snoozed_from;"
            " ALTER TABLE reminders DROP COLUMN title, DROP COLUMN snoozed_from;"
            " ALTER TABLE reminders RENAME COLUMN title_new TO title;"
            " ALTER TABLE reminders RENAME COLUMN sf_new TO snoozed_from"
        ))  # fmt: skip
        assert table_columns_in(conn, "reminders")[-2:] == ["title", "snoozed_from"]
        for _ in range(3):
            after = reminders.get(conn, user_id="u1", reminder_id=reminder_id)
            assert after == before  # title 't', body 'the body', snoozed_from its own id
        assert after is not None
        assert (after.title, after.body, after.snoozed_from) == ("t", "the body", reminder_id)
        assert after.webhook_endpoint_id is None
        conn.rollback()
