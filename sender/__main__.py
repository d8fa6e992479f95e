"""`python -m sender`: `reminders sender` (the same options, --help and exit status)."""

from reminder_core.worker.command import run_command
from sender.command import sender

run_command(sender, prog_name="python -m sender")
