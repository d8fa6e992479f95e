"""The migrated schema: time-ordered ids and the invariants held by CHECK constraints."""

from __future__ import annotations

import uuid

import pytest
from sqlalchemy import Engine, text
from sqlalchemy.exc import IntegrityError


def test_uuidv7_has_version_7_variant_10_and_current_millis(db: Engine) -> None:
    # RFC 9562 §5.7: unix_ts_ms in the first 48 bits, ver = 0b0111, var = 0b10.
    with db.connect() as conn:
        row = conn.execute(
            text(
                "SELECT reminders_uuidv7() AS a, reminders_uuidv7() AS b,"
                " (extract(epoch FROM clock_timestamp()) * 1000)::bigint AS ms"
            )
        ).one()
    for value in (row.a, row.b):
        u = uuid.UUID(str(value))
        assert u.version == 7
        assert u.variant == uuid.RFC_4122
        assert abs((u.int >> 80) - row.ms) < 5_000


def test_uuidv7_sorts_by_creation_time(db: Engine) -> None:
    with db.connect() as conn:
        ids = [
            conn.execute(text("SELECT reminders_uuidv7(), pg_sleep(0.002)")).scalar_one()
            for _ in range(5)
        ]
    assert ids == sorted(ids)


@pytest.mark.parametrize(
    ("status", "next_run", "claimed"),
    [
        ("pending", None, False),  # a pending reminder needs next_run_utc
        ("claimed", "2030-01-01T00:00Z", False),  # a claim records who and when
        ("done", "2030-01-01T00:00Z", False),  # unknown state
    ],
)
def test_check_constraints_refuse_impossible_reminders(
    db: Engine, status: str, next_run: str | None, claimed: bool
) -> None:
    with pytest.raises(IntegrityError), db.begin() as conn:
        conn.execute(
            text(
                "INSERT INTO reminders (user_id, title, start_local, status, next_run_utc,"
                " claimed_by, claimed_at) VALUES ('u', 't', '2030-01-01T00:00', :status,"
                " :next_run, :by, :at)"
            ),
            {
                "status": status,
                "next_run": next_run,
                "by": "w" if claimed else None,
                "at": next_run if claimed else None,
            },
        )


def test_migrations_match_the_models(database_url: str) -> None:
    # `alembic check`: autogenerate finds nothing to add, so the migrated schema and the
    # SQLAlchemy models (what the code believes) are the same.
    from alembic import command

    from reminder_core.db.migrate import alembic_config

    command.check(alembic_config(database_url))
