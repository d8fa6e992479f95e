"""delivery_log: no foreign key to reminders; the provider-message index only on rows that have one

Revision ID: 0016
Revises: 0015
Create Date: 2026-12-06 21:10:00

docs/performance.md, "Fewer writes per delivery row" (issue 15). Every delivery row
written paid for two things it did not need:

- the foreign key to `reminders`: a per-row check (a `SELECT ... FOR KEY SHARE` of the
  reminder, which also writes a lock on the reminder's row and its WAL record) for every
  insert, although every writer read the reminder in the same transaction, and its
  `ON DELETE CASCADE` served one statement (a cell move's delete of a user's reminders,
  which now deletes their delivery rows itself: `cell_move_delete_reminders`);
- an entry of `ix_delivery_log_provider_message` for every row version, although only a
  row with a `provider_message_id` is ever looked up by it (a webhook's event,
  `delivery_get_by_provider_message`): the index is now partial on that.

Locks, none held for long: every statement that takes a strong lock runs in a transaction
of its own under `lock_timeout` (LOCK_TIMEOUT) and is tried again after a lock timeout or
a deadlock (up to LOCK_ATTEMPTS times, after a growing pause), so that a long transaction
elsewhere cannot queue every write behind it for its whole length. Dropping the foreign
key takes ACCESS EXCLUSIVE on delivery_log, then on reminders with NOWAIT (writers lock the
two in either order: the drop never waits while it holds one, so no writer meets a
deadlock). The new index is built without blocking writes: on the parent only (ON ONLY),
then on each partition CONCURRENTLY (waiting for older transactions anywhere in the
database, as every concurrent build does; one that loses a deadlock to retention is built
again on the next pass) and attached (ACCESS EXCLUSIVE on that partition's new index, a
moment), then the old index is dropped (ACCESS EXCLUSIVE on delivery_log and its
partitions, a moment). Partitions made meanwhile get the index from the parent; one
dropped meanwhile (retention) is skipped.

Interrupted (killed, a build failed), it is finished by running it again: each step checks
what an earlier run left (the key already gone, the parent's index made, a partition's
index built, invalid, or attached) and the old index is dropped only once the new one is
valid on every partition.

Rolling upgrade: code of the earlier version runs on this schema unchanged, except that
a cell move run by it would leave the moved user's delivery rows behind in the old cell
(they name no reminder there and are dropped with their partitions by retention).

Downgrade: deletes delivery rows whose reminder no longer exists (the cascade would have),
then restores the foreign key and the full index, under locks that block writes while
they build; stop the API and the workloads first (under write load, adding the key can
end in a deadlock, and the downgrade then fails and is rolled back).
"""

from __future__ import annotations

import time
from collections.abc import Sequence

from alembic import op
from psycopg import errors
from sqlalchemy import text
from sqlalchemy.exc import OperationalError, ProgrammingError

from migrations.online import index_state as _index
from migrations.online import locking as _locking
from migrations.online import scalar as _scalar

revision: str = "0016"
down_revision: str | None = "0015"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

INDEX = "ix_delivery_log_provider_message"
NEW = "ix_delivery_log_provider_message_new"
FK = "fk_delivery_log_reminder_id_reminders"
COLUMNS = "(provider, provider_message_id) WHERE provider_message_id IS NOT NULL"
#: Passes over the partitions (retention may make or drop one during a pass).
PASSES = 5


def _unindexed_partitions() -> list[str]:
    """delivery_log's partitions (weekly ones and the default) with no index attached to
    NEW, by name."""
    found = op.get_bind().execute(
        text(
            "SELECT c.relname FROM pg_inherits p JOIN pg_class c ON c.oid = p.inhrelid"
            " WHERE p.inhparent = 'delivery_log'::regclass AND NOT EXISTS ("
            "   SELECT 1 FROM pg_inherits ip JOIN pg_index i ON i.indexrelid = ip.inhrelid"
            "   WHERE ip.inhparent = CAST(:new AS regclass) AND i.indrelid = c.oid)"
            " ORDER BY c.relname"
        ),
        {"new": NEW},
    )
    return list(found.scalars())


def _index_partition(part: str) -> None:
    """Build the index on partition `part` concurrently (an invalid one an interrupted
    build left is dropped first) and attach it to NEW. A partition dropped meanwhile is
    skipped; a build that lost a deadlock (retention making or dropping a partition at
    the same moment) is left for the next pass, which drops what it left and builds again."""
    child = f"{part}_provider_message_idx"
    state = _index(child)
    try:
        if state is not None and not state[0]:
            op.execute(f'DROP INDEX CONCURRENTLY IF EXISTS "{child}"')
        op.execute(f'CREATE INDEX CONCURRENTLY IF NOT EXISTS "{child}" ON "{part}" {COLUMNS}')
        _locking(f'ALTER INDEX {NEW} ATTACH PARTITION "{child}"')
    except ProgrammingError as exc:
        if isinstance(exc.orig, errors.UndefinedTable | errors.UndefinedObject) and (
            _scalar("SELECT to_regclass(:p) IS NULL", p=f'"{part}"')
        ):
            return  # dropped by retention meanwhile: nothing to index
        raise
    except OperationalError as exc:
        if not isinstance(exc.orig, errors.DeadlockDetected | errors.LockNotAvailable):
            raise


def upgrade() -> None:
    with op.get_context().autocommit_block():
        if _scalar("SELECT count(*) FROM pg_constraint WHERE conname = :fk", fk=FK):
            # Writers lock reminders and delivery_log in either order, so whoever holds
            # one and waits for the other can meet a deadlock: hold delivery_log, then
            # take reminders without waiting (NOWAIT; given up and tried again when a
            # writer holds it), so that the drop never waits while it holds a lock.
            _locking(
                "LOCK TABLE delivery_log IN ACCESS EXCLUSIVE MODE",
                "LOCK TABLE reminders IN ACCESS EXCLUSIVE MODE NOWAIT",
                f"ALTER TABLE delivery_log DROP CONSTRAINT IF EXISTS {FK}",
            )
        done = _index(INDEX)
        if done is not None and done[1]:
            return  # an earlier run got as far as the rename: only the version was left
        _locking(f"CREATE INDEX IF NOT EXISTS {NEW} ON ONLY delivery_log {COLUMNS}")
        for n in range(PASSES):
            for part in _unindexed_partitions():
                _index_partition(part)
            if _index(NEW) == (True, True):
                break
            time.sleep(0.5 * (n + 1))
        else:
            raise RuntimeError(
                f"index {NEW} is not valid after {PASSES} passes; partitions without it:"
                f" {_unindexed_partitions()}; run `reminders migrate` again"
            )
        _locking(f"DROP INDEX IF EXISTS {INDEX}")
        _locking(f"ALTER INDEX {NEW} RENAME TO {INDEX}")


def downgrade() -> None:
    op.execute(
        "DELETE FROM delivery_log AS d"
        " WHERE NOT EXISTS (SELECT 1 FROM reminders AS r WHERE r.id = d.reminder_id)"
    )
    op.execute(f"DROP INDEX {INDEX}")
    op.create_index(INDEX, "delivery_log", ["provider", "provider_message_id"])
    op.create_foreign_key(
        FK, "delivery_log", "reminders", ["reminder_id"], ["id"], ondelete="CASCADE"
    )
