"""webhook endpoints: the webhook channel's destinations

Revision ID: 0012
Revises: 0011
Create Date: 2026-12-03 23:40:00

docs/design.md, "Webhook channel" (issue 17): `webhook_endpoints` holds each URL a user
registered and its Standard Webhooks signing secret (`whsec_...`: the sender signs with
it, so it is stored as given to the user, like Svix stores it); `reminders.
webhook_endpoint_id` delivers a reminder there instead of by email. A new table, and a
nullable column with its foreign key (NULL on every existing row).
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0012"
down_revision: str | None = "0011"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.create_table(
        "webhook_endpoints",
        sa.Column("id", sa.Uuid(), server_default=sa.text("reminders_uuidv7()"), nullable=False),
        sa.Column("user_id", sa.Text(), nullable=False),
        sa.Column("url", sa.Text(), nullable=False),
        sa.Column("secret", sa.Text(), nullable=False),
        sa.Column(
            "created_at",
            sa.DateTime(timezone=True),
            server_default=sa.text("now()"),
            nullable=False,
        ),
        sa.CheckConstraint(
            "char_length(url) <= 2000", name=op.f("ck_webhook_endpoints_url_length")
        ),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_webhook_endpoints")),
    )
    op.create_index("ix_webhook_endpoints_user", "webhook_endpoints", ["user_id", "created_at"])
    op.add_column("reminders", sa.Column("webhook_endpoint_id", sa.Uuid(), nullable=True))
    op.create_foreign_key(
        op.f("fk_reminders_webhook_endpoint_id_webhook_endpoints"),
        "reminders",
        "webhook_endpoints",
        ["webhook_endpoint_id"],
        ["id"],
        ondelete="SET NULL",
    )


def downgrade() -> None:
    op.drop_constraint(
        op.f("fk_reminders_webhook_endpoint_id_webhook_endpoints"), "reminders", type_="foreignkey"
    )
    op.drop_column("reminders", "webhook_endpoint_id")
    op.drop_index("ix_webhook_endpoints_user", table_name="webhook_endpoints")
    op.drop_table("webhook_endpoints")
