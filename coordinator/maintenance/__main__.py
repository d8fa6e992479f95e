"""`python -m coordinator.maintenance`: `reminders maintenance` (the same options, --help
and exit status)."""

from coordinator.maintenance.command import maintenance
from reminder_core.worker.command import run_command

run_command(maintenance, prog_name="python -m coordinator.maintenance")
