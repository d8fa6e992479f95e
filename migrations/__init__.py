"""Alembic migrations of the reminders schema (run with `reminders migrate`)."""
