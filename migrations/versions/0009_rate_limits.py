"""rate limits

Revision ID: 0009
Revises: 0008
Create Date: 2026-12-03 22:20:00

docs/operations.md, "Fair limits" (issue 17): one row per user of the /v1 API, the
theoretical arrival time (GCRA) of the user's request budget, updated atomically by every
API process, so several processes share one budget. A new, empty table: no lock on any
existing one. One row per user ever limited (a row whose `tat` has passed holds no debt).
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0009"
down_revision: str | None = "0008"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.create_table(
        "rate_limits",
        sa.Column("user_id", sa.Text(), nullable=False),
        sa.Column("tat", sa.DateTime(timezone=True), nullable=False),
        sa.CheckConstraint("user_id <> ''", name=op.f("ck_rate_limits_user_id_not_empty")),
        sa.PrimaryKeyConstraint("user_id", name=op.f("pk_rate_limits")),
    )


def downgrade() -> None:
    op.drop_table("rate_limits")
