"""Embedded PostgreSQL (pgserver) for a laptop: used when DATABASE_URL is unset."""

from __future__ import annotations

import hashlib
import json
import logging
import os
import re
import warnings
from collections.abc import Callable
from pathlib import Path

from reminder_core.errors import ConfigurationError

log = logging.getLogger(__name__)

#: A socket directory pg_ctl can hand to postgres as it is: pgserver passes it as
#: `-o "-k <dir>"`, which pg_ctl runs through the shell, unquoted, so a space (or a
#: quote, `$`, ...) in the path splits the option ("postgres: invalid argument") and the
#: server never starts (found by a trial: a checkout under "my proj/").
_SHELL_SAFE = re.compile(r"[A-Za-z0-9_./+,:=@%~-]+")
#: What the data directory's path cannot hold: pg_ctl starts postgres through the shell
#: with `-D "<pgdata>"`, and inside double quotes the shell still expands `$`, "`" and
#: `\` and ends the word at `"` (PostgreSQL src/bin/pg_ctl/pg_ctl.c, start_postmaster).
_SHELL_EXPANDED = frozenset('$`"\\\n')


def embedded_database_url(state_dir: Path, *, create: bool = True) -> str:
    """Start (or attach to) the embedded PostgreSQL under `state_dir/pgdata`; return its URL.

    The data directory is kept, so reminders survive restarts; a server already started
    by another process on the same directory is reused. The server stops when the last
    process using it exits (pgserver's default cleanup).

    Args:
        create: make `state_dir/pgdata` when it is missing (`reminders dev`, `reminders
            migrate`); without, a missing one is refused: a command run in the wrong
            directory would otherwise start an empty database there and report its
            missing schema (trial helper-53).

    Side effects: creates `state_dir/pgdata` on first use (initdb, a few seconds).

    Raises:
        RuntimeError: the `pgserver` package is missing or the server cannot start.
        ConfigurationError: no `state_dir/pgdata` and not `create`; or a path the shell
            would expand (`$`, a backquote, `"`, a backslash, a newline).
    """
    pgdata = (state_dir / "pgdata").resolve()
    if shell := sorted(_SHELL_EXPANDED & set(str(pgdata))):
        raise ConfigurationError(
            f"the embedded PostgreSQL cannot run in {str(pgdata)!r}: pg_ctl passes its"
            f" path through the shell, which expands {' '.join(map(repr, shell))}; set"
            " STATE_DIR to another directory, or DATABASE_URL"
        )
    if not create and not (pgdata / "PG_VERSION").is_file():
        raise ConfigurationError(
            f"DATABASE_URL is unset and {state_dir} holds no embedded database: run"
            " `reminders dev` once in this directory (or set STATE_DIR to the directory"
            " it ran with), or set DATABASE_URL"
        )
    try:
        with warnings.catch_warnings():
            # platformdirs warns when XDG_RUNTIME_DIR is unset (containers, CI); harmless.
            warnings.simplefilter("ignore")
            import pgserver
    except ImportError as exc:  # pragma: no cover - dependency of the package
        raise RuntimeError("DATABASE_URL is unset and pgserver is not installed") from exc
    pgdata.parent.mkdir(parents=True, exist_ok=True)
    log.info("starting embedded PostgreSQL in %s", pgdata)
    _forget_dead_handles(pgdata)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        _quote_safe_socket_dir(pgserver.postgres_server)
        server = pgserver.get_server(pgdata)  # type: ignore[attr-defined]
    uri: str = server.get_uri()
    return uri.replace("postgresql://", "postgresql+psycopg://", 1)


def _quote_safe_socket_dir(module: object) -> None:
    """Make pgserver choose a socket directory the shell does not split (_SHELL_SAFE):
    where the one it picks (the data directory, when its socket path is short enough)
    is not, its own second choice, `<runtime path>/<hash of pgdata>`, is used instead.
    pgserver's `find_suitable_socket_dir` is wrapped once per process.

    Raises:
        RuntimeError: neither directory is safe (a runtime path with a space, too).
    """
    find: Callable[[Path, Path], Path] = module.find_suitable_socket_dir  # type: ignore[attr-defined]
    if getattr(find, "quote_safe", False):
        return

    def quote_safe(pgdata: Path, runtime_path: Path) -> Path:
        chosen = find(pgdata, runtime_path)
        if _SHELL_SAFE.fullmatch(str(chosen)):
            return chosen
        # As pgserver names its second choice (utils.find_suitable_socket_dir).
        identity = f"{pgdata}-{pgdata.stat().st_ino}".encode()
        fallback = runtime_path / hashlib.sha256(identity).hexdigest()[:10]
        if not _SHELL_SAFE.fullmatch(str(fallback)):
            raise RuntimeError(
                f"the embedded PostgreSQL cannot start under {pgdata}: its socket directory"
                " must not hold spaces or shell characters; set STATE_DIR to another"
                " directory, or DATABASE_URL"
            )
        fallback.mkdir(parents=True, exist_ok=True)
        log.info("embedded PostgreSQL socket in %s (%s holds a space)", fallback, pgdata)
        return fallback

    quote_safe.quote_safe = True  # type: ignore[attr-defined]
    module.find_suitable_socket_dir = quote_safe  # type: ignore[attr-defined]


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


def resolve_database_url(database_url: str | None, state_dir: Path, *, create: bool = True) -> str:
    """Return `database_url`, or the embedded server's URL when it is None or empty
    (`create`: make the embedded database when `state_dir` has none;
    `embedded_database_url`)."""
    if database_url:
        return database_url
    return embedded_database_url(state_dir, create=create)
