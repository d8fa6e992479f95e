"""The `sweeper` command (`reminders sweeper`, `python -m outbox_sweeper`); cheap to
import: the workload is imported when it runs."""

from __future__ import annotations

import typer


def sweeper() -> None:
    """Republish outbox rows left unpublished (safety net)."""
    from outbox_sweeper.main import main

    raise typer.Exit(main())
