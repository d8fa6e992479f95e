"""index on queue_messages.receipt_handle

Revision ID: 0003
Revises: 0002
Create Date: 2026-12-01 02:35:00

Delete and ChangeMessageVisibility address a received message by its receipt handle;
without an index each was a scan of the whole queue table, which grows with the backlog.
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0003"
down_revision: str | None = "0002"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.create_index(
        "ix_queue_messages_receipt_handle",
        "queue_messages",
        ["receipt_handle"],
        unique=True,
        postgresql_where=sa.text("receipt_handle IS NOT NULL"),
    )


def downgrade() -> None:
    op.drop_index("ix_queue_messages_receipt_handle", table_name="queue_messages")
