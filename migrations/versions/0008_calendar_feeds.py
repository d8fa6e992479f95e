"""calendar feeds

Revision ID: 0008
Revises: 0007
Create Date: 2026-12-03 22:30:00

Issue 17, "Calendars in and out": one row per user who has an iCalendar feed
(docs/api.md, "Calendar feed and import"). Only the SHA-256 of the feed's secret is
stored: the secret is the credential of `GET /v1/calendar-feed/{secret}.ics`, and a
read of this table must not be enough to read anyone's calendar. Rotating replaces the
row's digest, revoking deletes the row. A new, empty table: no lock on any existing one.
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects import postgresql

revision: str = "0008"
down_revision: str | None = "0007"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.create_table(
        "calendar_feeds",
        sa.Column("user_id", sa.Text(), nullable=False),
        sa.Column("secret_sha256", postgresql.BYTEA(), nullable=False),
        sa.Column(
            "created_at",
            sa.DateTime(timezone=True),
            server_default=sa.text("now()"),
            nullable=False,
        ),
        sa.CheckConstraint(
            "octet_length(secret_sha256) = 32", name=op.f("ck_calendar_feeds_secret_sha256_length")
        ),
        sa.PrimaryKeyConstraint("user_id", name=op.f("pk_calendar_feeds")),
        sa.UniqueConstraint("secret_sha256", name=op.f("uq_calendar_feeds_secret_sha256")),
    )


def downgrade() -> None:
    op.drop_table("calendar_feeds")
