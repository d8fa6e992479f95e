"""The `reminders` console script (and `python -m reminders`): holds a workload's stop
signals from its first line, then runs the CLI (reminders/cli.py)."""

from __future__ import annotations

import signal
import sys
from types import FrameType

from reminder_core.worker.signals import hold_early_stop_signals

#: Commands that stop on SIGTERM/SIGINT through `install_stop_handlers`: a signal that
#: arrives while they import is held for them. `migrate` is one: it may start the
#: embedded PostgreSQL, which a signal must not interrupt.
STOP_HANDLING_COMMANDS = frozenset(
    {"dev", "api", "coordinator", "sweeper", "sender", "maintenance", "migrate"}
)

#: Exit status of a one-shot command stopped by a signal: 128 + its number (the shell's
#: convention, as if the default action had ended it).
EXIT_TERMINATED = 128 + signal.SIGTERM
EXIT_INTERRUPTED = 128 + signal.SIGINT


def _terminated(_signum: int, _frame: FrameType | None) -> None:
    signal.signal(signal.SIGTERM, signal.SIG_IGN)  # once: the unwinding is not cut short
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    print("terminated", file=sys.stderr)
    raise SystemExit(EXIT_TERMINATED)


def main(prog_name: str | None = None) -> None:
    """Run `reminders` with sys.argv (reminders.cli.main).

    For a workload command (and migrate), stop signals are held from here until its handlers are
    installed (reminder_core/worker/signals.py, `hold_early_stop_signals`). Every other
    command (the API's client commands, status, token, ...) is one-shot: a SIGTERM or a
    Ctrl-C ends it at once, by unwinding, so that its exit hooks run, with status 143 or
    130 and one line on stderr (a Ctrl-C while it loaded printed a KeyboardInterrupt
    traceback, trial helper-57).

    Raises:
        SystemExit: with the command's exit status.
    """
    if len(sys.argv) > 1 and sys.argv[1] in STOP_HANDLING_COMMANDS:
        hold_early_stop_signals()
        from reminders.cli import main as cli_main

        cli_main(prog_name=prog_name)
        return
    signal.signal(signal.SIGTERM, _terminated)
    try:
        from reminders.cli import main as cli_main

        cli_main(prog_name=prog_name)
    except KeyboardInterrupt:
        print("interrupted", file=sys.stderr)
        raise SystemExit(EXIT_INTERRUPTED) from None
    finally:
        # Done, or unwound: the exit hooks (the embedded server's stop) and the
        # interpreter's finalization run to the end, and the status is the command's.
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
        signal.signal(signal.SIGINT, signal.SIG_IGN)
