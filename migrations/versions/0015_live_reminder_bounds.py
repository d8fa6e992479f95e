"""live reminder bounds

Revision ID: 0015
Revises: 0014
Create Date: 2026-12-04 20:40:00

docs/operations.md, "Fair limits" (issue 15): one row per user, an upper bound of their
live (pending, claimed or paused) reminders, raised by every create or change that makes a
reminder live and recounted only when it passes QUOTA_LIVE_REMINDERS, so a create no
longer counts the user's reminders. A new, empty table: no lock on any existing one; a
user's row is started from an exact count by their first create after the upgrade.

During a rolling upgrade, reminders created by API processes still on the earlier version
are not in the bound: a user could pass the quota by at most that many until the bound next
reaches it and is recounted.
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0015"
down_revision: str | None = "0014"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.create_table(
        "live_reminder_bounds",
        sa.Column("user_id", sa.Text(), nullable=False),
        sa.Column("bound", sa.Integer(), nullable=False),
        sa.CheckConstraint("user_id <> ''", name=op.f("ck_live_reminder_bounds_user_id_not_empty")),
        sa.CheckConstraint("bound >= 0", name=op.f("ck_live_reminder_bounds_bound_not_negative")),
        sa.PrimaryKeyConstraint("user_id", name=op.f("pk_live_reminder_bounds")),
    )


def downgrade() -> None:
    op.drop_table("live_reminder_bounds")
