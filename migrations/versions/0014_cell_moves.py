"""cell moves: a user being moved between cells

Revision ID: 0014
Revises: 0013
Create Date: 2026-12-04 18:00:00

docs/design.md, "Moving a user between cells" (issue 18): while `reminders cells move`
copies a user's rows from one cell to another, both cells hold a `cell_moves` row for
them. An API write of that user (which takes the user's shared advisory lock first) reads
it and answers 503 with Retry-After instead of writing to a cell that is being emptied,
and the suppression recheck leaves their paused reminders alone.
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0014"
down_revision: str | None = "0013"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.create_table(
        "cell_moves",
        sa.Column("user_id", sa.Text(), nullable=False),
        sa.Column("from_cell", sa.Text(), nullable=False),
        sa.Column("to_cell", sa.Text(), nullable=False),
        sa.Column("started_at", sa.DateTime(timezone=True), nullable=False),
        sa.CheckConstraint("from_cell <> to_cell", name=op.f("ck_cell_moves_two_cells")),
        sa.PrimaryKeyConstraint("user_id", name=op.f("pk_cell_moves")),
    )


def downgrade() -> None:
    op.drop_table("cell_moves")
