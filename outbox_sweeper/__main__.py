"""`python -m outbox_sweeper`: `reminders sweeper` (the same options, --help and exit status)."""

from outbox_sweeper.command import sweeper
from reminder_core.worker.command import run_command

run_command(sweeper, prog_name="python -m outbox_sweeper")
