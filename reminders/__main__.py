"""`python -m reminders`: the same as the `reminders` command."""

from reminders.entry import main

main(prog_name="python -m reminders")
