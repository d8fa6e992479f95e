"""dead-letter recording

Revision ID: 0002
Revises: 0001
Create Date: 2026-12-01 01:25:00

queue_messages.dead_letter_recorded_at: when the maintenance workload recorded a
dead-lettered occurrence as `failed` (and moved its reminder on), so each dead letter is
recorded once while it stays in the dead-letter queue for `reminders dlq list|replay`.
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0002"
down_revision: str | None = "0001"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.add_column(
        "queue_messages",
        sa.Column("dead_letter_recorded_at", sa.DateTime(timezone=True), nullable=True),
    )
    op.create_index(
        "ix_queue_messages_dlq_unrecorded",
        "queue_messages",
        ["queue_name", "dead_lettered_at"],
        postgresql_where=sa.text("dead_lettered AND dead_letter_recorded_at IS NULL"),
    )


def downgrade() -> None:
    op.drop_index("ix_queue_messages_dlq_unrecorded", table_name="queue_messages")
    op.drop_column("queue_messages", "dead_letter_recorded_at")
