"""Engines: sync SQLAlchemy 2 on psycopg 3 (docs/design.md, "Stack")."""

from __future__ import annotations

from sqlalchemy import Engine, create_engine
from sqlalchemy.engine import make_url
from sqlalchemy.exc import ArgumentError


def normalize_url(url: str) -> str:
    """Return `url` with the psycopg 3 driver (postgres:// and postgresql:// accepted).

    Raises:
        ValueError: `url` is not a URL, or not a PostgreSQL one (the value is not repeated:
            it may hold a password).
    """
    try:
        parsed = make_url(url.replace("postgres://", "postgresql://", 1))
    except ArgumentError:
        raise ValueError(
            "DATABASE_URL is not a database URL (expected postgresql://user@host:port/name)"
        ) from None
    if parsed.drivername in ("postgresql", "postgresql+psycopg2"):
        parsed = parsed.set(drivername="postgresql+psycopg")
    if parsed.drivername != "postgresql+psycopg":
        raise ValueError(f"DATABASE_URL must be a PostgreSQL URL, got {parsed.drivername!r}")
    return parsed.render_as_string(hide_password=False)


def make_engine(url: str, *, pool_size: int = 5, application_name: str = "reminders") -> Engine:
    """Create an engine for `url` (no connection is opened until first use).

    Every connection runs in UTC so that `timestamp without time zone` casts and logs read
    the same on every host.
    """
    return create_engine(
        normalize_url(url),
        pool_size=pool_size,
        max_overflow=pool_size,
        pool_pre_ping=True,
        pool_recycle=1800,
        connect_args={
            "application_name": application_name,
            "options": "-c timezone=UTC",
            "connect_timeout": 10,
        },
    )
