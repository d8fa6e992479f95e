"""Alembic environment: online migrations against the URL given by `reminders migrate`."""

from __future__ import annotations

from alembic import context
from sqlalchemy import Connection, text

from reminder_core.db.models import Base
from reminder_core.db.session import make_engine

config = context.config
target_metadata = Base.metadata


def _partitions(connection: Connection) -> frozenset[str]:
    """Names of the partitions in the schema (delivery_log's weekly ones and its default):
    made and dropped at run time by the maintenance workload, not by the models."""
    ours = not connection.in_transaction()
    names = frozenset(
        connection.execute(
            text("SELECT relname FROM pg_class WHERE relispartition AND pg_table_is_visible(oid)")
        ).scalars()
    )
    if ours:
        connection.rollback()  # read only; the migrations open their own transaction
    return names


def _run(connection: Connection) -> None:
    partitions = _partitions(connection)

    def include_name(name: str | None, type_: str, parent_names: object) -> bool:
        del parent_names
        return not (type_ == "table" and name in partitions)

    context.configure(
        connection=connection,
        target_metadata=target_metadata,
        compare_type=True,
        transaction_per_migration=True,
        include_name=include_name,
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
