"""count progress of COUNT rules

Revision ID: 0006
Revises: 0005
Create Date: 2026-12-03 07:40:00

docs/design.md, "Occurrences" (issue 14): `reminders.count_progress`, how many instances
of a COUNT rule came before a local time (`recurrence.CountProgress`), kept by the sender
when it advances a reminder, so that computing the next occurrence costs the same at any
age. NULL (every existing row): count from the start, as before; the first advance fills
it in. Adding a nullable column without a default is a catalog change only.
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects import postgresql

revision: str = "0006"
down_revision: str | None = "0005"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.add_column("reminders", sa.Column("count_progress", postgresql.JSONB(), nullable=True))


def downgrade() -> None:
    op.drop_column("reminders", "count_progress")
