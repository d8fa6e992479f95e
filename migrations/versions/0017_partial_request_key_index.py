"""reminders: the create's idempotency key is unique by a partial index, on rows with a key

Revision ID: 0017
Revises: 0016
Create Date: 2026-12-07 01:40:00

docs/performance.md, "Fewer index entries per reminder update" (issue 15). A reminder's
claim and its completion are non-HOT updates (they change `status` and indexed columns),
so each writes a new entry in every index whose predicate the new row version meets; the
unique constraint on (`user_id`, `client_request_id`) was one of them, though most
reminders have no key (NULL: never a conflict, never looked up). It becomes a unique
index `WHERE client_request_id IS NOT NULL` under the same name: the same uniqueness for
every key, two index entries fewer per occurrence. The creates' conflict target already
names the predicate (`ON CONFLICT (user_id, client_request_id) WHERE client_request_id IS
NOT NULL`, reminder_core/store/sql/reminders.sql), which infers either form, and the
look-up by key (`reminder_get_by_request_id`: `client_request_id = :key`, which implies
NOT NULL) uses the partial index.

Locks, none held for long: the index is built CONCURRENTLY (writes go on; it waits for
older transactions anywhere in the database, as every concurrent build does), then the
constraint is dropped and the index renamed in one short transaction under `lock_timeout`
(ACCESS EXCLUSIVE on reminders, a moment), tried again after a lock timeout
(migrations/online.py). Interrupted, it is finished by running it again: an invalid index
a killed build left is dropped and built again; the constraint goes only once the new
index is valid.

While the index is being built (and while a killed build's invalid index is left), a
keyed insert that meets a concurrent insert of the same key can fail with a unique
violation on it instead of doing nothing: PostgreSQL checks an index under construction
but does not arbitrate ON CONFLICT with it. The API's creates of one user are serialised
(the `live_reminder_bounds` row lock), so they do not meet this; a tool that inserts
keyed reminders by itself should not run during the migration (trial finding).

Rolling upgrade: code since the creates named the predicate runs on either schema; code
before it (never released) fails every keyed and unkeyed create on the new schema ("no
unique or exclusion constraint matching the ON CONFLICT specification") until it is
replaced.

Downgrade: builds the full unique index concurrently and makes it the constraint again
(`ADD CONSTRAINT ... UNIQUE USING INDEX`, a moment under the same lock discipline).
Interrupted, the version stays 0017 and the full index `..._new` may be left, being built
or invalid, costing every write its entries (trial finding): run the downgrade again, or
drop it (`DROP INDEX CONCURRENTLY uq_reminders_user_id_client_request_id_new`) to stay at
0017; `alembic check` names it.
"""

from __future__ import annotations

from collections.abc import Sequence

from alembic import op

from migrations.online import has_constraint, index_state, locking

revision: str = "0017"
down_revision: str | None = "0016"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

NAME = "uq_reminders_user_id_client_request_id"
NEW = "uq_reminders_user_id_client_request_id_new"
COLUMNS = "(user_id, client_request_id)"
PREDICATE = "WHERE client_request_id IS NOT NULL"


def _build(name: str, definition: str) -> None:
    """Build unique index `name` on reminders `definition` concurrently; an invalid one
    an interrupted build left is dropped first."""
    state = index_state(name)
    if state is not None and not state[0]:
        op.execute(f"DROP INDEX CONCURRENTLY IF EXISTS {name}")
    op.execute(f"CREATE UNIQUE INDEX CONCURRENTLY IF NOT EXISTS {name} ON reminders {definition}")


def upgrade() -> None:
    with op.get_context().autocommit_block():
        if not has_constraint("reminders", NAME):
            return  # an earlier run swapped it: only the version was left
        _build(NEW, f"{COLUMNS} {PREDICATE}")
        locking(
            f"ALTER TABLE reminders DROP CONSTRAINT {NAME}",
            f"ALTER INDEX {NEW} RENAME TO {NAME}",
        )


def downgrade() -> None:
    with op.get_context().autocommit_block():
        if has_constraint("reminders", NAME):
            return
        _build(NEW, COLUMNS)
        locking(
            f"DROP INDEX IF EXISTS {NAME}",
            f"ALTER TABLE reminders ADD CONSTRAINT {NAME} UNIQUE USING INDEX {NEW}",
        )
