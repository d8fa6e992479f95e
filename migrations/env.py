"""Alembic environment: online migrations against the URL given by `reminders migrate`."""

from __future__ import annotations

from alembic import context
from sqlalchemy import Connection

from reminder_core.db.models import Base
from reminder_core.db.session import make_engine

config = context.config
target_metadata = Base.metadata


def _run(connection: Connection) -> None:
    context.configure(
        connection=connection,
        target_metadata=target_metadata,
        compare_type=True,
        transaction_per_migration=True,
    )
    with context.begin_transaction():
        # Two replicas running the migration Job at once: the second waits, then no-ops.
        context.execute("SELECT pg_advisory_xact_lock(727274)")
        context.run_migrations()


def run_migrations_online() -> None:
    connection = config.attributes.get("connection")
    if connection is not None:
        _run(connection)
        return
    engine = make_engine(config.get_main_option("sqlalchemy.url") or "", pool_size=1)
    try:
        with engine.connect() as conn:
            _run(conn)
    finally:
        engine.dispose()


if context.is_offline_mode():
    raise SystemExit("offline migrations are not supported; run `reminders migrate`")
run_migrations_online()
