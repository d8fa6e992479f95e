"""`python -m coordinator`: `reminders coordinator` (the same options, --help and exit status)."""

from coordinator.command import coordinator
from reminder_core.worker.command import run_command

run_command(coordinator, prog_name="python -m coordinator")
