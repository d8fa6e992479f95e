"""The `reminders` console script (and `python -m reminders`): holds a workload's stop
signals from its first line, then runs the CLI (reminders/cli.py)."""

from __future__ import annotations

import sys

from reminder_core.worker.signals import hold_early_stop_signals

#: Commands that stop on SIGTERM/SIGINT through `install_stop_handlers`: a signal that
#: arrives while they import is held for them. Every other command (the API's client
#: commands, migrate, token, ...) keeps Python's default handling, so Ctrl-C ends it.
WORKLOAD_COMMANDS = frozenset({"dev", "api", "coordinator", "sweeper", "sender", "maintenance"})


def main(prog_name: str | None = None) -> None:
    """Run `reminders` with sys.argv (reminders.cli.main); for a workload command, stop
    signals are held from here until its handlers are installed
    (reminder_core/worker/signals.py, `hold_early_stop_signals`).

    Raises:
        SystemExit: with the command's exit status.
    """
    if len(sys.argv) > 1 and sys.argv[1] in WORKLOAD_COMMANDS:
        hold_early_stop_signals()
    from reminders.cli import main as cli_main

    cli_main(prog_name=prog_name)
