"""suppression list and webhook events

Revision ID: 0004
Revises: 0003
Create Date: 2026-12-01 03:40:00

docs/design.md, "Data model" and "Suppression list" (issue 6): `suppressions` (one row per
case-folded address that a hard bounce or complaint put off limits), `webhook_events`
(each verified provider event once, unique per provider and provider event id, with its
raw body and what applying it did), and on `reminders` why a reminder was paused by a
suppression (`paused_reason`, `suppressed_address`) and when the maintenance workload last
checked whether it may resume (`suppression_checked_at`).
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0004"
down_revision: str | None = "0003"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

PAUSED_BY_SUPPRESSION = "status = 'paused' AND suppressed_address IS NOT NULL"


def upgrade() -> None:
    op.create_table(
        "suppressions",
        sa.Column("email", sa.Text(), nullable=False),
        sa.Column("reason", sa.Text(), nullable=False),
        sa.Column("provider", sa.Text(), nullable=True),
        sa.Column("source_event_id", sa.Text(), nullable=True),
        sa.Column("detail", sa.Text(), nullable=True),
        sa.Column(
            "created_at",
            sa.DateTime(timezone=True),
            server_default=sa.text("now()"),
            nullable=False,
        ),
        sa.CheckConstraint(
            "reason IN ('bounce', 'complaint')", name=op.f("ck_suppressions_reason")
        ),
        sa.CheckConstraint("email <> ''", name=op.f("ck_suppressions_email_not_empty")),
        sa.PrimaryKeyConstraint("email", name=op.f("pk_suppressions")),
    )
    op.create_table(
        "webhook_events",
        sa.Column("id", sa.UUID(), server_default=sa.text("reminders_uuidv7()"), nullable=False),
        sa.Column("provider", sa.Text(), nullable=False),
        sa.Column("event_id", sa.Text(), nullable=False),
        sa.Column("kind", sa.Text(), nullable=False),
        sa.Column("provider_message_id", sa.Text(), nullable=True),
        sa.Column("recipient", sa.Text(), nullable=False),
        sa.Column("reason", sa.Text(), nullable=False),
        sa.Column("occurred_at", sa.DateTime(timezone=True), nullable=True),
        sa.Column("received_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("raw_body", sa.Text(), nullable=False),
        sa.Column("outcome", sa.Text(), nullable=False),
        sa.Column("delivery_id", sa.UUID(), nullable=True),
        sa.Column("applied_at", sa.DateTime(timezone=True), nullable=True),
        sa.CheckConstraint(
            "kind IN ('hard_bounce', 'soft_bounce', 'complaint')",
            name=op.f("ck_webhook_events_kind"),
        ),
        sa.CheckConstraint(
            "outcome IN ('unmatched', 'recorded', 'suppressed')",
            name=op.f("ck_webhook_events_outcome"),
        ),
        sa.CheckConstraint(
            "(outcome = 'unmatched') = (delivery_id IS NULL)",
            name=op.f("ck_webhook_events_matched_has_delivery"),
        ),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_webhook_events")),
        sa.UniqueConstraint(
            "provider", "event_id", name=op.f("uq_webhook_events_provider_event_id")
        ),
    )
    op.create_index(
        "ix_webhook_events_unmatched",
        "webhook_events",
        ["received_at"],
        postgresql_where=sa.text("outcome = 'unmatched'"),
    )
    op.add_column("reminders", sa.Column("paused_reason", sa.Text(), nullable=True))
    op.add_column("reminders", sa.Column("suppressed_address", sa.Text(), nullable=True))
    op.add_column(
        "reminders",
        sa.Column("suppression_checked_at", sa.DateTime(timezone=True), nullable=True),
    )
    op.create_index(
        "ix_reminders_suppressed_address",
        "reminders",
        ["suppressed_address"],
        postgresql_where=sa.text(PAUSED_BY_SUPPRESSION),
    )
    op.create_index(
        "ix_reminders_suppression_check",
        "reminders",
        ["suppression_checked_at"],
        postgresql_where=sa.text(PAUSED_BY_SUPPRESSION),
    )


def downgrade() -> None:
    op.drop_index("ix_reminders_suppression_check", table_name="reminders")
    op.drop_index("ix_reminders_suppressed_address", table_name="reminders")
    op.drop_column("reminders", "suppression_checked_at")
    op.drop_column("reminders", "suppressed_address")
    op.drop_column("reminders", "paused_reason")
    op.drop_index("ix_webhook_events_unmatched", table_name="webhook_events")
    op.drop_table("webhook_events")
    op.drop_table("suppressions")
