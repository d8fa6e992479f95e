"""queue_messages: no index on receipt_handle; a handle names its message's id

Revision ID: 0018
Revises: 0017
Create Date: 2026-12-07 02:30:00

docs/performance.md, "A receipt handle that names its message" (issue 15). A receive
gives each message a fresh random token, and the unique index on that token (0003) took
an entry at every receive, in a random place of the index, though the handle is only ever
used by the receiver that got it. A receipt handle is now "<id>.<token>": the statements
that take one (delete, change visibility) find the row by its primary key and check the
token, which keeps a stale receiver from touching a message received again since, as
before, with no index of its own.

The index is dropped CONCURRENTLY (no lock that blocks writes; it waits for the
transactions that use it to end). Rolling upgrade: code of the earlier version, whose
handles are the token alone, keeps working on this schema, but each of its deletes and
visibility changes scans the queue table until it is replaced: upgrade the senders with
the migration. Handles are never stored, so none outlives its process.

Downgrade: builds the unique index again, CONCURRENTLY.
"""

from __future__ import annotations

from collections.abc import Sequence

from alembic import op

from migrations.online import index_state

revision: str = "0018"
down_revision: str | None = "0017"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

INDEX = "ix_queue_messages_receipt_handle"


def upgrade() -> None:
    with op.get_context().autocommit_block():
        op.execute(f"DROP INDEX CONCURRENTLY IF EXISTS {INDEX}")


def downgrade() -> None:
    with op.get_context().autocommit_block():
        state = index_state(INDEX)
        if state is not None and not state[0]:  # an interrupted build's, invalid
            op.execute(f"DROP INDEX CONCURRENTLY IF EXISTS {INDEX}")
        op.execute(
            f"CREATE UNIQUE INDEX CONCURRENTLY IF NOT EXISTS {INDEX} ON queue_messages"
            " (receipt_handle) WHERE receipt_handle IS NOT NULL"
        )
