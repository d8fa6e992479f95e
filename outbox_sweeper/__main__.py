"""`python -m outbox_sweeper`: `reminders sweeper` (the same options, --help and exit status)."""

from reminder_core.worker.signals import hold_early_stop_signals

hold_early_stop_signals()  # before the slow imports: a signal then stops it cleanly

from outbox_sweeper.command import sweeper  # noqa: E402
from reminder_core.worker.command import run_command  # noqa: E402

run_command(sweeper, prog_name="python -m outbox_sweeper")
