"""The `--cell NAME` option of the worker commands (coordinator, sweeper, sender,
maintenance; docs/design.md, "Cells"); cheap to import, as the command modules are."""

from __future__ import annotations

from typing import TYPE_CHECKING, Annotated

import typer

if TYPE_CHECKING:
    from reminder_core.settings import Settings

CellOption = Annotated[
    str | None,
    typer.Option(
        "--cell",
        metavar="NAME",
        help="The cell of CELLS to work for (its database and queue); default: CELL."
        " Required when CELLS names cells.",
        show_default=False,
    ),
]


def worker_settings(cell: str | None) -> Settings | None:
    """The settings a worker command runs with: the environment's, with CELL = `cell`
    when given (None: read everything from the environment in the workload's main)."""
    if cell is None:
        return None
    from reminder_core.settings import Settings

    return Settings(cell=cell)
