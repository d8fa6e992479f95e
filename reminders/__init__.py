"""The `reminders` command: one CLI that starts any workload, or all of them (`dev`)."""
