"""Database access: schema (models), engines and sessions, named hot-path SQL."""
