"""`python -m outbox_sweeper`: `reminders sweeper` (the same options, --help and exit status)."""

from reminders.cli import main

main(command="sweeper", prog_name="python -m outbox_sweeper")
