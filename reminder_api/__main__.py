"""`python -m reminder_api`: `reminders api` (the same options, --help and exit status)."""

from reminder_api.command import api
from reminder_core.worker.command import run_command

run_command(api, prog_name="python -m reminder_api")
