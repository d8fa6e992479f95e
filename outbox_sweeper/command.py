"""The `sweeper` command (`reminders sweeper`, `python -m outbox_sweeper`); cheap to
import: the workload is imported when it runs."""

from __future__ import annotations

import typer

from reminder_core.cell_option import CellOption, worker_settings


def sweeper(cell: CellOption = None) -> None:
    """Republish outbox rows left unpublished (safety net)."""
    from outbox_sweeper.main import main

    raise typer.Exit(main(worker_settings(cell)))
