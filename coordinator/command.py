"""The `coordinator` command (`reminders coordinator`, `python -m coordinator`); cheap to
import: the workload is imported when it runs."""

from __future__ import annotations

import typer

from reminder_core.cell_option import CellOption, worker_settings


def coordinator(cell: CellOption = None) -> None:
    """Claim due reminders into the outbox and publish them."""
    from coordinator.main import main

    raise typer.Exit(main(worker_settings(cell)))
