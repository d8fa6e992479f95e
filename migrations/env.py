"""Alembic environment: online migrations against the URL given by `reminders migrate`."""

from __future__ import annotations

import time

from alembic import context
from sqlalchemy import Connection, text

from reminder_core.db.models import Base
from reminder_core.db.session import make_engine
from reminder_core.errors import ConfigurationError

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


#: Advisory lock key serialising `reminders migrate` runs on one database.
MIGRATION_LOCK = 727274
#: Seconds between two tries of MIGRATION_LOCK while another run holds it.
LOCK_POLL_S = 0.2


def _require_utf8(connection: Connection) -> None:
    """Refuse a database whose encoding is not UTF8: users' titles and provider text are
    Unicode, and a database in, say, LATIN1 refuses what it cannot encode in every
    statement that carries it (an emoji title, a U+FFFD that replaced a provider's NUL).

    Raises:
        ConfigurationError: the server encoding is another (the CLI prints it, exit 2).
    """
    ours = not connection.in_transaction()
    encoding = connection.execute(text("SHOW server_encoding")).scalar_one()
    if ours:
        connection.rollback()
    if encoding != "UTF8":
        database = connection.engine.url.database
        raise ConfigurationError(
            f"the database {database!r} is encoded {encoding}; reminders needs UTF8: create"
            f" it with CREATE DATABASE ... ENCODING 'UTF8' TEMPLATE template0"
        )


def _run(connection: Connection) -> None:
    _require_utf8(connection)
    # Two replicas of the migration Job at once: the second waits for the first, then finds
    # nothing to do. A session lock, held across the per-migration transactions (a
    # transaction-level lock taken outside them ends with the statement that takes it).
    # Waited for by polling, outside any transaction: a `pg_advisory_lock` call blocked in
    # its statement holds a snapshot, which a CREATE INDEX CONCURRENTLY of the holder's
    # migration (0016) waits for, while the blocked call waits for the holder: a deadlock
    # that PostgreSQL ends by failing the waiter (test_migrate_concurrent.py).
    while not connection.execute(
        text("SELECT pg_try_advisory_lock(:key)"), {"key": MIGRATION_LOCK}
    ).scalar_one():
        connection.commit()
        time.sleep(LOCK_POLL_S)
    connection.commit()
    try:
        _migrate(connection)
    finally:
        if connection.in_transaction():
            connection.rollback()
        connection.execute(text("SELECT pg_advisory_unlock(:key)"), {"key": MIGRATION_LOCK})
        connection.commit()


def _migrate(connection: Connection) -> None:
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
