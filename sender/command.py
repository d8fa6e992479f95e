"""The `sender` command (`reminders sender`, `python -m sender`); cheap to import: the
workload is imported when it runs."""

from __future__ import annotations

import typer


def sender() -> None:
    """Deliver queued occurrences by email."""
    from sender.main import main

    raise typer.Exit(main())
