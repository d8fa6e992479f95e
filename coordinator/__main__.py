"""`python -m coordinator`: `reminders coordinator` (the same options, --help and exit status)."""

from reminders.cli import main

main(command="coordinator", prog_name="python -m coordinator")
