"""`python -m coordinator`: `reminders coordinator` (the same options, --help and exit status)."""

from reminder_core.worker.signals import hold_early_stop_signals

hold_early_stop_signals()  # before the slow imports: a signal then stops it cleanly

from coordinator.command import coordinator  # noqa: E402
from reminder_core.worker.command import run_command  # noqa: E402

run_command(coordinator, prog_name="python -m coordinator")
