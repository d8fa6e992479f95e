"""worker heartbeats

Revision ID: 0007
Revises: 0006
Create Date: 2026-12-03 17:40:00

docs/design.md, "Workers" (issue 16): one row per workload loop of each running process,
refreshed every WORKER_HEARTBEAT_INTERVAL_S and marked stopped at a clean exit, so that
`reminders status` can say that a role has no live worker (it said OK with every workload
stopped). A new, empty table: no lock on any existing one.
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects import postgresql

revision: str = "0007"
down_revision: str | None = "0006"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.create_table(
        "worker_heartbeats",
        sa.Column("id", postgresql.UUID(), nullable=False),
        sa.Column("role", sa.Text(), nullable=False),
        sa.Column("host", sa.Text(), nullable=False),
        sa.Column("pid", sa.Integer(), nullable=False),
        sa.Column("process", sa.Text(), nullable=False),
        sa.Column("version", sa.Text(), nullable=False),
        sa.Column("started_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("last_seen_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("last_tick_at", sa.DateTime(timezone=True), nullable=True),
        sa.Column(
            "consecutive_failures", sa.Integer(), server_default=sa.text("0"), nullable=False
        ),
        sa.Column("stopped_at", sa.DateTime(timezone=True), nullable=True),
        sa.CheckConstraint("role <> ''", name=op.f("ck_worker_heartbeats_role_not_empty")),
        sa.CheckConstraint(
            "consecutive_failures >= 0", name=op.f("ck_worker_heartbeats_consecutive_failures")
        ),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_worker_heartbeats")),
    )
    op.create_index(
        "ix_worker_heartbeats_role_last_seen_at",
        "worker_heartbeats",
        ["role", "last_seen_at"],
        unique=False,
    )


def downgrade() -> None:
    op.drop_index("ix_worker_heartbeats_role_last_seen_at", table_name="worker_heartbeats")
    op.drop_table("worker_heartbeats")
