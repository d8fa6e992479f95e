"""REST API workload (FastAPI): create, read, list and cancel reminders."""
