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

Locks: dropping the foreign key holds delivery_log and reminders for a moment (no scan).
The new index is built without blocking writes: on the parent only (ON ONLY), then on
each partition CONCURRENTLY and attached, then the old index is dropped (a moment's
exclusive lock on delivery_log). Partitions made later get it from the parent.

Rolling upgrade: code of the earlier version runs on this schema unchanged, except that
a cell move run by it would leave the moved user's delivery rows behind in the old cell
(they name no reminder there and are dropped with their partitions by retention).

Downgrade: deletes delivery rows whose reminder no longer exists (the cascade would have),
then restores the foreign key and the full index (both built under locks that block
writes for as long as the build takes).
"""

from __future__ import annotations

from collections.abc import Sequence

from alembic import op
from sqlalchemy import text

revision: str = "0016"
down_revision: str | None = "0015"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

INDEX = "ix_delivery_log_provider_message"
NEW = "ix_delivery_log_provider_message_new"
FK = "fk_delivery_log_reminder_id_reminders"


def _partitions() -> list[str]:
    """delivery_log's partitions (weekly ones and the default), by name."""
    found = op.get_bind().execute(
        text(
            "SELECT c.relname FROM pg_inherits i JOIN pg_class c ON c.oid = i.inhrelid"
            " WHERE i.inhparent = 'delivery_log'::regclass ORDER BY c.relname"
        )
    )
    return list(found.scalars())


def upgrade() -> None:
    op.drop_constraint(FK, "delivery_log", type_="foreignkey")
    op.execute(
        f"CREATE INDEX {NEW} ON ONLY delivery_log (provider, provider_message_id)"
        " WHERE provider_message_id IS NOT NULL"
    )
    partitions = _partitions()
    with op.get_context().autocommit_block():
        for part in partitions:
            child = f"{part}_provider_message_idx"
            # IF NOT EXISTS: a run interrupted here is finished by running it again.
            op.execute(
                f'CREATE INDEX CONCURRENTLY IF NOT EXISTS "{child}" ON "{part}"'
                " (provider, provider_message_id) WHERE provider_message_id IS NOT NULL"
            )
            op.execute(f'ALTER INDEX {NEW} ATTACH PARTITION "{child}"')
    op.execute(f"DROP INDEX {INDEX}")
    op.execute(f"ALTER INDEX {NEW} RENAME TO {INDEX}")


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
