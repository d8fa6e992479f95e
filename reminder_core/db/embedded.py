"""Embedded PostgreSQL (pgserver) for a laptop: used when DATABASE_URL is unset."""

from __future__ import annotations

import json
import logging
import os
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
    _forget_dead_handles(pgdata)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        server = pgserver.get_server(pgdata)  # type: ignore[attr-defined]
    uri: str = server.get_uri()
    return uri.replace("postgresql://", "postgresql+psycopg://", 1)


def _forget_dead_handles(pgdata: Path) -> None:
    """Drop processes that no longer exist from pgserver's list of users of the server.

    pgserver stops the embedded server when the last process in `.handle_pids.json`
    exits; a process that died without its exit hook (kill -9, a second Ctrl-C) stays
    listed for ever, so no later process would ever stop the server again.
    """
    handles = pgdata / ".handle_pids.json"
    try:
        pids = json.loads(handles.read_text())
    except (OSError, ValueError):
        return
    if not isinstance(pids, list):
        return
    alive = [pid for pid in pids if isinstance(pid, int) and _alive(pid)]
    if alive != pids:
        log.info("forgetting %d dead user(s) of the embedded PostgreSQL", len(pids) - len(alive))
        handles.write_text(json.dumps(alive))


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def resolve_database_url(database_url: str | None, state_dir: Path) -> str:
    """Return `database_url`, or the embedded server's URL when it is None or empty."""
    if database_url:
        return database_url
    return embedded_database_url(state_dir)
