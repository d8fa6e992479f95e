"""Migrations 0017 (the create's idempotency key unique by a partial index) and 0018 (no
index on queue receipt handles), issue 15.

Against a real PostgreSQL database of its own, migrated step by step.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import UTC, datetime
from typing import Any

import pytest
from sqlalchemy import Connection, Engine, create_engine, text
from sqlalchemy.exc import IntegrityError

from reminder_core.db.migrate import alembic_config, upgrade
from tests.support.locks import reading
from tests.support.workloads import fresh_database as empty_database

NAME = "uq_reminders_user_id_client_request_id"


@pytest.fixture
def fresh_database(admin_url: str) -> Iterator[str]:
    """An empty database of its own (each test migrates it step by step)."""
    with empty_database(admin_url, "reminders_mig17") as (url, _):
        yield url


@contextmanager
def _at(url: str, revision: str, **engine_options: Any) -> Iterator[Engine]:
    """The database at `url` migrated to `revision`, and an engine on it (disposed at the
    end; `engine_options` go to `create_engine`)."""
    upgrade(url, revision)
    engine = create_engine(url, **engine_options)
    try:
        yield engine
    finally:
        engine.dispose()


def _insert(engine: Engine, user: str, key: str | None) -> None:
    """One reminder of `user` with create key `key` (None: none)."""
    with engine.begin() as conn:
        conn.execute(
            text(
                "INSERT INTO reminders (user_id, title, start_local, timezone, next_run_utc,"
                " client_request_id) VALUES (:u, 't', '2030-01-01T09:00', 'UTC',"
                " '2030-01-01T09:00Z', :k)"
            ),
            {"u": user, "k": key},
        )


def _key_index(conn: Connection) -> list[tuple[str, str, bool, bool]]:
    """(name, definition, valid, backs a constraint) of every index of reminders on
    (user_id, client_request_id)."""
    rows = conn.execute(
        text(
            "SELECT c.relname, pg_get_indexdef(i.indexrelid), i.indisvalid,"
            "       EXISTS (SELECT 1 FROM pg_constraint k WHERE k.conindid = i.indexrelid)"
            " FROM pg_index i JOIN pg_class c ON c.oid = i.indexrelid"
            " WHERE i.indrelid = 'reminders'::regclass"
            "   AND pg_get_indexdef(i.indexrelid) LIKE '%(user_id, client_request_id)%'"
            " ORDER BY 1"
        )
    ).all()
    return [(str(a), str(b), bool(c), bool(d)) for a, b, c, d in rows]


def _full() -> tuple[str, str, bool, bool]:
    """What `_key_index` shows of the full unique constraint (the schema before 0017)."""
    definition = f"CREATE UNIQUE INDEX {NAME} ON public.reminders USING btree"
    return (NAME, f"{definition} (user_id, client_request_id)", True, True)


def test_migration_0017_makes_the_key_unique_by_a_partial_index_and_back(
    fresh_database: str,
) -> None:
    from alembic import command

    with _at(fresh_database, "0016") as engine:
        _insert(engine, "alice", "k-1")
        _insert(engine, "alice", None)
        _insert(engine, "bob", "k-1")
        with engine.begin() as conn:
            before = conn.execute(text("SELECT * FROM reminders ORDER BY id")).all()
            assert _key_index(conn) == [_full()]

        upgrade(fresh_database)  # 0017, and 0018 (which leaves reminders alone)
        with engine.begin() as conn:
            assert conn.execute(text("SELECT * FROM reminders ORDER BY id")).all() == before
            (name, definition, valid, _) = _full()
            partial = f"{definition} WHERE (client_request_id IS NOT NULL)"
            assert _key_index(conn) == [(name, partial, valid, False)]
        command.check(alembic_config(fresh_database))  # the models say the same
        # The same uniqueness: a key once per user, any number of reminders without one.
        with pytest.raises(IntegrityError):
            _insert(engine, "alice", "k-1")
        _insert(engine, "alice", None)
        _insert(engine, "alice", "k-2")

        command.downgrade(alembic_config(fresh_database), "0016")
        with engine.begin() as conn:
            assert _key_index(conn) == [_full()]
        with pytest.raises(IntegrityError):
            _insert(engine, "alice", "k-2")


def test_migration_0017_interrupted_is_finished_by_running_it_again(
    fresh_database: str,
) -> None:
    # What a run killed during its concurrent build leaves: the new index, invalid (a
    # concurrent build that failed leaves its index behind), and the constraint.
    with _at(fresh_database, "0016", isolation_level="AUTOCOMMIT") as engine:
        _insert(engine, "alice", "k-1")
        _insert(engine, "alice", "k-2")
        with engine.connect() as conn, pytest.raises(IntegrityError):
            # Unique on user_id alone: alice twice, so the build fails ...
            conn.execute(
                text(f"CREATE UNIQUE INDEX CONCURRENTLY {NAME}_new ON reminders (user_id)")
            )
        with engine.connect() as conn:
            invalid = conn.execute(
                text("SELECT NOT indisvalid FROM pg_index WHERE indexrelid = CAST(:i AS regclass)"),
                {"i": f"{NAME}_new"},
            ).scalar_one()
            assert invalid  # ... and leaves its index behind, invalid

        upgrade(fresh_database, "0017")
        upgrade(fresh_database, "0017")  # and once more: nothing left to do
        with engine.connect() as conn:
            indexes = _key_index(conn)
            assert [(name, valid, constraint) for name, _, valid, constraint in indexes] == [
                (NAME, True, False)
            ]
            assert indexes[0][1].endswith("WHERE (client_request_id IS NOT NULL)")
            assert conn.execute(text("SELECT version_num FROM alembic_version")).scalar() == "0017"
        with pytest.raises(IntegrityError):
            _insert(engine, "alice", "k-2")


def test_migration_0017_does_not_queue_writes_behind_a_long_transaction(
    fresh_database: str,
) -> None:
    # A transaction that read reminders holds its ACCESS SHARE lock; the constraint's drop
    # waits at most LOCK_TIMEOUT (2 s) per try for it, so the creates queued behind a try
    # wait about that long, not for the whole transaction; the migration ends after it.
    with _at(fresh_database, "0016") as engine:
        hold_s = 6.0
        reader = reading(engine, "reminders", hold_s)
        migrating = threading.Thread(target=upgrade, args=(fresh_database, "0017"))
        started = time.monotonic()
        migrating.start()
        waits = []
        for n in range(4):
            time.sleep(0.5)
            before = time.monotonic()
            _insert(engine, "alice", f"k-{n}")
            waits.append(time.monotonic() - before)
        reader.join()
        migrating.join(60)
        assert not migrating.is_alive()
        # The concurrent build waits for the reader's transaction, so the swap came after.
        assert time.monotonic() - started >= hold_s - 1.5
        assert max(waits) < 3.5, waits  # lock_timeout 2 s, plus the retry's pause
        with engine.connect() as conn:
            assert [r[0] for r in _key_index(conn)] == [NAME]
            assert conn.execute(text("SELECT version_num FROM alembic_version")).scalar() == "0017"
            assert conn.execute(text("SELECT count(*) FROM reminders")).scalar_one() == 4


def _handle_indexes(conn: Connection) -> list[str]:
    """Definitions of the indexes of queue_messages on receipt_handle."""
    rows = conn.execute(
        text(
            "SELECT pg_get_indexdef(indexrelid) FROM pg_index"
            " WHERE indrelid = 'queue_messages'::regclass"
            "   AND pg_get_indexdef(indexrelid) LIKE '%(receipt_handle)%'"
        )
    ).scalars()
    return [str(r) for r in rows]


def test_migration_0018_drops_the_receipt_handle_index_and_back(fresh_database: str) -> None:
    from alembic import command

    from reminder_core.queue import PostgresQueue

    with _at(fresh_database, "0017") as engine:
        with engine.connect() as conn:
            assert len(_handle_indexes(conn)) == 1
        upgrade(fresh_database)
        with engine.connect() as conn:
            assert _handle_indexes(conn) == []
        command.check(alembic_config(fresh_database))
        # The queue works on the new schema: a handle deletes its message by id.
        queue = PostgresQueue(engine, name="m18", max_receive_count=5)
        now = datetime.now(UTC)
        queue.send_batch([{"n": 1}], now=now, delays_s=[0])
        (message,) = queue.receive(now=now, max_messages=1, visibility_timeout_s=60)
        queue.delete([message.receipt_handle])
        with engine.connect() as conn:
            assert conn.execute(text("SELECT count(*) FROM queue_messages")).scalar_one() == 0

        command.downgrade(alembic_config(fresh_database), "0017")
        with engine.connect() as conn:
            assert _handle_indexes(conn) == [
                "CREATE UNIQUE INDEX ix_queue_messages_receipt_handle ON public.queue_messages"
                " USING btree (receipt_handle) WHERE (receipt_handle IS NOT NULL)"
            ]
