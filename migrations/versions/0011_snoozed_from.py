"""snoozes: reminders.snoozed_from

Revision ID: 0011
Revises: 0010
Create Date: 2026-12-03 23:20:00

docs/design.md, "Links in emails" (issue 17): a snooze link creates one one-time
reminder for the extra occurrence, `snoozed_from` naming the reminder the email was
about, so that its delivery shows in that reminder's history. A nullable column (catalog
change only), its foreign key (NULL on every existing row: nothing to validate but the
scan), and a partial index for the history's lookup of a reminder's snoozes.
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0011"
down_revision: str | None = "0010"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.add_column("reminders", sa.Column("snoozed_from", sa.Uuid(), nullable=True))
    op.create_foreign_key(
        op.f("fk_reminders_snoozed_from_reminders"),
        "reminders",
        "reminders",
        ["snoozed_from"],
        ["id"],
        ondelete="SET NULL",
    )
    op.create_index(
        "ix_reminders_snoozed_from",
        "reminders",
        ["snoozed_from"],
        postgresql_where=sa.text("snoozed_from IS NOT NULL"),
    )


def downgrade() -> None:
    op.drop_index("ix_reminders_snoozed_from", table_name="reminders")
    op.drop_constraint(op.f("fk_reminders_snoozed_from_reminders"), "reminders", type_="foreignkey")
    op.drop_column("reminders", "snoozed_from")
