"""`python -m reminder_api`: `reminders api` (the same options, --help and exit status)."""

from reminders.cli import main

main(command="api", prog_name="python -m reminder_api")
