"""Embedded PostgreSQL (pgserver) for a laptop: used when DATABASE_URL is unset."""

from __future__ import annotations

import logging
import warnings
from pathlib import Path

log = logging.getLogger(__name__)


def embedded_database_url(state_dir: Path) -> str:
    """Start (or attach to) the embedded PostgreSQL under `state_dir/pgdata`; return its URL.

    The data directory is kept, so reminders survive restarts; a server already started
    by another process on the same directory is reused. The server stops when the last
    process using it exits (pgserver's default cleanup).

    Side effects: creates `state_dir/pgdata` on first use (initdb, a few seconds).

    Raises:
        RuntimeError: the `pgserver` package is missing or the server cannot start.
    """
    try:
        with warnings.catch_warnings():
            # platformdirs warns when XDG_RUNTIME_DIR is unset (containers, CI); harmless.
            warnings.simplefilter("ignore")
            import pgserver
    except ImportError as exc:  # pragma: no cover - dependency of the package
        raise RuntimeError("DATABASE_URL is unset and pgserver is not installed") from exc
    pgdata = (state_dir / "pgdata").resolve()
    pgdata.parent.mkdir(parents=True, exist_ok=True)
    log.info("starting embedded PostgreSQL in %s", pgdata)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        server = pgserver.get_server(pgdata)  # type: ignore[attr-defined]
    uri: str = server.get_uri()
    return uri.replace("postgresql://", "postgresql+psycopg://", 1)


def resolve_database_url(database_url: str | None, state_dir: Path) -> str:
    """Return `database_url`, or the embedded server's URL when it is None or empty."""
    if database_url:
        return database_url
    return embedded_database_url(state_dir)
