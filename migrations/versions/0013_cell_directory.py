"""cell directory: which cell each user lives in

Revision ID: 0013
Revises: 0012
Create Date: 2026-12-04 07:00:00

docs/design.md, "Cells" (issue 18): `cell_assignments` maps a user to their cell and
`cell_loads` counts the users of each cell, so a new user goes to the least loaded cell
(by weight) without a count over the directory. Two new tables; every cell's database has
them, only the directory's database writes them.
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0013"
down_revision: str | None = "0012"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.create_table(
        "cell_assignments",
        sa.Column("user_id", sa.Text(), nullable=False),
        sa.Column("cell", sa.Text(), nullable=False),
        sa.Column("assigned_at", sa.DateTime(timezone=True), nullable=False),
        sa.CheckConstraint("user_id <> ''", name=op.f("ck_cell_assignments_user_id_not_empty")),
        sa.PrimaryKeyConstraint("user_id", name=op.f("pk_cell_assignments")),
    )
    op.create_table(
        "cell_loads",
        sa.Column("cell", sa.Text(), nullable=False),
        sa.Column("users", sa.BigInteger(), server_default=sa.text("0"), nullable=False),
        sa.PrimaryKeyConstraint("cell", name=op.f("pk_cell_loads")),
    )


def downgrade() -> None:
    op.drop_table("cell_loads")
    op.drop_table("cell_assignments")
