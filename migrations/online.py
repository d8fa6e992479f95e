"""What the migrations that change a live schema share: short lock waits, index states.

A migration that runs while the API and the workloads write (0016, 0017) builds its
indexes CONCURRENTLY, outside any transaction (`op.get_context().autocommit_block()`),
and takes each strong lock in a short transaction of its own (`locking`), so that a long
transaction elsewhere cannot queue every write behind the migration for its whole length.
"""

from __future__ import annotations

import time

from alembic import op
from psycopg import errors
from sqlalchemy import text
from sqlalchemy.exc import OperationalError

#: How long a statement waits for a lock before it gives up and is tried again.
LOCK_TIMEOUT = "2s"
#: Tries of one such transaction (the pauses between them add up to about 9 minutes).
LOCK_ATTEMPTS = 60


def scalar(sql: str, **params: object) -> object:
    """The first column of the first row of `sql` (None without a row), on the
    migration's connection."""
    return op.get_bind().execute(text(sql), params).scalar()


def locking(*statements: str) -> None:
    """Run `statements` in one transaction of their own under LOCK_TIMEOUT (a statement may
    set a shorter one with SET LOCAL), the whole again after a lock timeout or a deadlock,
    up to LOCK_ATTEMPTS times, after a pause that doubles from 0.25 s to 10 s: behind a
    long transaction, writes queued behind a try wait at most about LOCK_TIMEOUT and then
    flow until the next try. Call it inside `autocommit_block()`.

    Raises:
        sqlalchemy.exc.OperationalError: still no lock after the last try, or another error.
    """
    bind = op.get_bind()
    for attempt in range(1, LOCK_ATTEMPTS + 1):
        bind.execute(text("BEGIN"))
        try:
            bind.execute(text(f"SET LOCAL lock_timeout = '{LOCK_TIMEOUT}'"))
            for sql in statements:
                bind.execute(text(sql))
            bind.execute(text("COMMIT"))
            return
        except OperationalError as exc:
            bind.execute(text("ROLLBACK"))
            lock_error = isinstance(exc.orig, errors.LockNotAvailable | errors.DeadlockDetected)
            if not lock_error or attempt == LOCK_ATTEMPTS:
                raise
            time.sleep(min(0.25 * 2 ** (attempt - 1), 10.0))
        except BaseException:
            bind.execute(text("ROLLBACK"))
            raise


def index_state(name: str) -> tuple[bool, bool] | None:
    """(valid, partial) of the index named `name`, None when there is none. An invalid
    index is what a CREATE INDEX CONCURRENTLY that failed or was killed leaves."""
    row = (
        op.get_bind()
        .execute(
            text(
                "SELECT i.indisvalid, i.indpred IS NOT NULL FROM pg_index i"
                " JOIN pg_class c ON c.oid = i.indexrelid WHERE c.relname = :name"
            ),
            {"name": name},
        )
        .one_or_none()
    )
    return None if row is None else (bool(row[0]), bool(row[1]))


def has_constraint(table: str, name: str) -> bool:
    """True when `table` has a constraint named `name`."""
    return bool(
        scalar(
            "SELECT count(*) FROM pg_constraint WHERE conname = :name"
            " AND conrelid = CAST(:table AS regclass)",
            name=name,
            table=table,
        )
    )
