"""Apply Alembic migrations programmatically (`reminders migrate`, tests, `reminders dev`)."""

from __future__ import annotations

from pathlib import Path

from alembic import command
from alembic.config import Config

from reminder_core.db.session import normalize_url


def alembic_config(url: str) -> Config:
    """Alembic config for `url`, with the migrations shipped in the `migrations` package."""
    import migrations

    cfg = Config()
    cfg.set_main_option("script_location", str(Path(migrations.__file__).parent))
    cfg.set_main_option("sqlalchemy.url", normalize_url(url).replace("%", "%%"))
    return cfg


def upgrade(url: str, revision: str = "head") -> None:
    """Migrate the database at `url` to `revision` (default: the newest).

    Safe to run concurrently: migrations take an advisory lock.
    """
    command.upgrade(alembic_config(url), revision)
