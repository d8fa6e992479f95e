"""quiet hours: held_until on reminders and delivery_log

Revision ID: 0010
Revises: 0009
Create Date: 2026-12-03 22:30:00

docs/design.md, "Quiet hours" (issue 17): an occurrence due inside its user's quiet hours
is held to the window's end. `reminders.held_until` is when the claimed occurrence in
hand comes back (the claim rescuer and the backlog's lag do not read a held claim as
stuck or late); `delivery_log.held_until` records, on the row of an occurrence sent after
a hold, the window's end (delivery_lag still runs from `run_time_utc`; the lag checks
leave held rows out). Nullable columns without a default: catalog changes only.
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0010"
down_revision: str | None = "0009"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.add_column("reminders", sa.Column("held_until", sa.DateTime(timezone=True), nullable=True))
    op.add_column(
        "delivery_log", sa.Column("held_until", sa.DateTime(timezone=True), nullable=True)
    )


def downgrade() -> None:
    op.drop_column("delivery_log", "held_until")
    op.drop_column("reminders", "held_until")
