"""Engines: sync SQLAlchemy 2 on psycopg 3 (docs/design.md, "Stack")."""

from __future__ import annotations

import time
from typing import Any

import psycopg
from sqlalchemy import Engine, create_engine, event
from sqlalchemy.engine import make_url
from sqlalchemy.exc import ArgumentError, DisconnectionError

#: A pooled connection idle for longer than this is pinged before it is handed out
#: (seconds). A connection in steady use is not: SQLAlchemy's `pool_pre_ping` pinged on
#: every checkout, one more round trip (BEGIN; SELECT 1) on every API request (issue 15).
PING_AFTER_IDLE_S = 5.0


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


def make_engine(
    url: str,
    *,
    pool_size: int = 5,
    application_name: str = "reminders",
    pool_timeout_s: float = 30.0,
    statement_timeout_s: float = 0.0,
) -> Engine:
    """Create an engine for `url` (no connection is opened until first use).

    Every connection runs in UTC so that `timestamp without time zone` casts and logs read
    the same on every host, and with the client encoding UTF8, whatever PGCLIENTENCODING
    says. With `statement_timeout_s` > 0 (seconds; the API's
    API_STATEMENT_TIMEOUT_S), every statement on its connections, its lock waits
    included, is cancelled by the server after that long (PostgreSQL `statement_timeout`,
    SQLSTATE 57014: `sqlalchemy.exc.OperationalError`, its transaction rolled back), set
    once per connection at connect time (no round trip per request); a transaction may
    still lower or raise it with `SET LOCAL` (`reminder_core.store.transaction`).

    A checkout waits at most `pool_timeout_s` seconds for a free connection (then
    `sqlalchemy.exc.TimeoutError`). A connection that sat idle in the pool for over
    `PING_AFTER_IDLE_S` is pinged first, and replaced when the ping fails (a database
    restart, a proxy's idle timeout); see `_ping_if_idle`.
    """
    options = "-c timezone=UTC"
    if statement_timeout_s > 0:
        options += f" -c statement_timeout={max(1, round(statement_timeout_s * 1000))}"
    engine = create_engine(
        normalize_url(url),
        pool_size=pool_size,
        max_overflow=pool_size,
        pool_timeout=pool_timeout_s,
        pool_recycle=1800,
        connect_args={
            "application_name": application_name,
            "options": options,
            "connect_timeout": 10,
            # Whatever PGCLIENTENCODING says: users' and providers' text is Unicode, and
            # a client encoding such as LATIN1 made one emoji fail a whole batch
            # (issue 15's trial); the database itself is UTF8 (migrations/env.py).
            "client_encoding": "UTF8",
        },
    )
    event.listen(engine.pool, "checkin", _note_checkin)
    event.listen(engine.pool, "checkout", _ping_if_idle)
    return engine


def _note_checkin(_dbapi_connection: Any, record: Any) -> None:
    record.info["checked_in_at"] = time.monotonic()


def _ping_if_idle(dbapi_connection: Any, record: Any, _proxy: Any) -> None:
    """Pool `checkout` hook: ping a connection idle for over PING_AFTER_IDLE_S.

    Raising `DisconnectionError` makes the pool discard the connection and check out
    another (a fresh one if need be; SQLAlchemy, "Disconnect Handling - Pessimistic",
    custom checkout events). The ping runs outside any transaction (`SELECT 1` then
    rollback), so the caller's transaction starts clean.
    """
    checked_in_at = record.info.get("checked_in_at")
    if checked_in_at is None or time.monotonic() - checked_in_at <= PING_AFTER_IDLE_S:
        return  # new, or in steady use
    try:
        dbapi_connection.execute("SELECT 1")
        dbapi_connection.rollback()
    except psycopg.Error as exc:
        raise DisconnectionError(f"pooled connection failed its ping: {exc}") from exc
