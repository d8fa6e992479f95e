"""`python -m reminders`: the same as the `reminders` command."""

from reminders.cli import main

main(prog_name="python -m reminders")
