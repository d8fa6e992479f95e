"""The `maintenance` command (`reminders maintenance`, `python -m coordinator.maintenance`);
cheap to import: the workload is imported when it runs."""

from __future__ import annotations

import typer

from reminder_core.cell_option import CellOption, worker_settings


def maintenance(cell: CellOption = None) -> None:
    """Reap stuck claims and abandoned deliveries; record dead letters as failed; resume
    reminders whose suppression cleared; refresh the backlog gauges; retention."""
    from coordinator.maintenance.main import main

    raise typer.Exit(main(worker_settings(cell)))
