"""Database schema (SQLAlchemy models, read by Alembic), engines, migrations and the
embedded PostgreSQL; the SQL that runs is in `reminder_core.store`."""
