"""The `sender` command (`reminders sender`, `python -m sender`); cheap to import: the
workload is imported when it runs."""

from __future__ import annotations

import typer

from reminder_core.cell_option import CellOption, worker_settings


def sender(cell: CellOption = None) -> None:
    """Deliver queued occurrences by email."""
    from sender.main import main

    raise typer.Exit(main(worker_settings(cell)))
