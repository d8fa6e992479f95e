"""`python -m sender`: `reminders sender` (the same options, --help and exit status)."""

from reminders.cli import main

main(command="sender", prog_name="python -m sender")
