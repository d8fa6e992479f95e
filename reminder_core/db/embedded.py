"""Embedded PostgreSQL (pgserver) for a laptop: used when DATABASE_URL is unset."""

from __future__ import annotations

import atexit
import hashlib
import json
import logging
import os
import re
import subprocess
import sys
import warnings
from collections.abc import Callable
from pathlib import Path

from sqlalchemy.engine import URL

from reminder_core.errors import ConfigurationError, InfrastructureError
from reminder_core.paths import unusable_directory

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


def embedded_path_problem(state_dir: Path) -> str | None:
    """Why the embedded PostgreSQL cannot live under `state_dir` (in `state_dir/pgdata`),
    found without writing anything; None when it can. `reminders dev` asks before it
    writes its other state (trial helper-54: the JWT secret, profiles and mail directory
    were made before the refusal).

    Returns one of: a broken link, a loop of links or a file on the path to pgdata
    (`reminder_core.paths.unusable_directory`: pgserver would follow a dangling link and
    make the database at its target, or fail in initdb with a traceback); a path the
    shell would expand (`$`, a backquote, `"`, a backslash, a newline: pg_ctl starts
    postgres through the shell with `-D "<pgdata>"`, PostgreSQL src/bin/pg_ctl/pg_ctl.c,
    start_postmaster).
    """
    pgdata = state_dir.absolute() / "pgdata"
    if unusable := unusable_directory(pgdata):
        return f"its data directory {pgdata} cannot be used: {unusable}"
    resolved = pgdata.resolve()
    if shell := sorted(_SHELL_EXPANDED & set(str(resolved))):
        return (
            f"it cannot run in {str(resolved)!r}: pg_ctl passes its path through the shell,"
            f" which expands {' '.join(map(repr, shell))}"
        )
    return None


def embedded_database_url(state_dir: Path, *, create: bool = True) -> str:
    """Start (or attach to) the embedded PostgreSQL under `state_dir/pgdata`; return its URL.

    The data directory is kept, so reminders survive restarts; a server already started
    by another process on the same directory is reused. The server stops when the last
    process using it exits (pgserver's cleanup at exit; users that died without it are
    forgotten first, `_forget_dead_handles`). initdb and pg_ctl run in their own session
    (`_own_session`): a signal to this process's group (a terminal's Ctrl-C, timeout(1))
    reaches this process only, whose stop handler lets the start finish and then stops.

    Args:
        create: make `state_dir/pgdata` when it is missing (`reminders dev`, `reminders
            migrate`); without, a missing one is refused: a command run in the wrong
            directory would otherwise start an empty database there and report its
            missing schema (trial helper-53).

    Returns:
        A `postgresql+psycopg://` URL over the server's Unix socket, the socket directory
        percent-encoded (pgserver's own URI leaves it raw, so a `+` or `%41` in the path
        was decoded into another directory: trial helper-54).

    Side effects: creates `state_dir/pgdata` on first use (initdb, a few seconds).

    Raises:
        RuntimeError: the `pgserver` package is missing.
        ConfigurationError: no `state_dir/pgdata` and not `create`; or a path it cannot
            use (`embedded_path_problem`).
        InfrastructureError: initdb or pg_ctl failed or timed out (the error names the
            server's log).
    """
    if problem := embedded_path_problem(state_dir):
        raise ConfigurationError(
            f"the embedded PostgreSQL cannot be used: {problem}; set STATE_DIR to another"
            " directory, or DATABASE_URL"
        )
    pgdata = (state_dir / "pgdata").resolve()
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
    module = pgserver.postgres_server
    with module.PostgresServer._lock:
        _forget_dead_handles(pgdata)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        _quote_safe_socket_dir(module)
        _own_session(module)
        try:
            server = pgserver.get_server(pgdata)  # type: ignore[attr-defined]
        except (subprocess.CalledProcessError, subprocess.TimeoutExpired) as exc:
            raise InfrastructureError(
                f"the embedded PostgreSQL did not start in {pgdata} ({_command(exc)}); its"
                f" log is {pgdata / 'log'}",
                dependency="the embedded PostgreSQL",
            ) from exc
    _forget_dead_handles_at_exit(module, pgdata)
    info = server.get_postmaster_info()
    if info.socket_dir is None:  # pragma: no cover - pgserver uses a socket off Windows
        uri: str = server.get_uri()
        return uri.replace("postgresql://", "postgresql+psycopg://", 1)
    url = URL.create(
        "postgresql+psycopg",
        username="postgres",
        database="postgres",
        query={"host": str(info.socket_dir)},
    )
    return url.render_as_string(hide_password=False)


def _command(exc: subprocess.CalledProcessError | subprocess.TimeoutExpired) -> str:
    """ "initdb exited with status 1", "pg_ctl timed out after 10 s", ...: the program's
    name and what happened, for the error line."""
    program = Path(str(exc.cmd[0] if isinstance(exc.cmd, list | tuple) else exc.cmd)).name
    if isinstance(exc, subprocess.TimeoutExpired):
        return f"{program} timed out after {exc.timeout:g} s"
    if exc.returncode < 0:
        return f"{program} was stopped by signal {-exc.returncode}"
    return f"{program} exited with status {exc.returncode}"


def _own_session(module: object) -> None:
    """Run pgserver's initdb and pg_ctl in a session of their own (setsid(2), through
    subprocess's `start_new_session`), wrapped once per process.

    A terminal's Ctrl-C, and timeout(1), signal the whole foreground process group
    (coreutils src/timeout.c, `cleanup`). initdb and pg_ctl are in it, and die at once:
    pgserver raised CalledProcessError (a traceback, status 1) and a postmaster started
    by the dying pg_ctl was left running, not yet in pgserver's list of users (trial
    helper-54, 7 of 7 runs). In their own session only this process gets the signal; its
    stop handler (`install_stop_handlers`) lets the start finish and then stops cleanly.
    """
    for name in ("initdb", "pg_ctl"):
        command: Callable[..., str] = getattr(module, name)
        if not getattr(command, "own_session", False):
            setattr(module, name, _in_own_session(command))


#: Seconds pg_ctl may take to start the server: pg_ctl's own wait (`-w`, PGCTLTIMEOUT's
#: default, PostgreSQL docs "pg_ctl"); pgserver allows it 10, which a loaded laptop or CI
#: machine can exceed (the start then failed, the server starting anyway).
PG_CTL_TIMEOUT_S = 60.0


def _in_own_session(command: Callable[..., str]) -> Callable[..., str]:
    """`command` (one of pgserver's program wrappers) with `start_new_session=True`, and
    a timeout, where pgserver gives one, of at least PG_CTL_TIMEOUT_S."""

    def in_own_session(args: list[str], pgdata: Path | None = None, **kwargs: object) -> str:
        kwargs.setdefault("start_new_session", True)
        timeout = kwargs.get("timeout")
        if isinstance(timeout, int | float):
            kwargs["timeout"] = max(float(timeout), PG_CTL_TIMEOUT_S)
        return command(args, pgdata=pgdata, **kwargs)

    in_own_session.own_session = True  # type: ignore[attr-defined]
    return in_own_session


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
        log.info(
            "embedded PostgreSQL socket in %s (the path %s is not safe for the shell)",
            fallback,
            pgdata,
        )
        return fallback

    quote_safe.quote_safe = True  # type: ignore[attr-defined]
    module.find_suitable_socket_dir = quote_safe  # type: ignore[attr-defined]


def _forget_dead_handles(pgdata: Path) -> None:
    """Drop processes that no longer exist from pgserver's list of users of the server.

    pgserver stops the embedded server when the last process in `.handle_pids.json`
    exits; a process that died without its exit hook (kill -9, a second Ctrl-C) stays
    listed for ever, so no later process would ever stop the server again.

    An unreadable list (pgserver rewrites it in place, truncating first: a worker
    interrupted there by a Ctrl-C storm left it empty, and every later start failed with
    "Expecting value", trial helper-58) is replaced by an empty one, with a warning: the
    server's other users, if any, are then no longer counted, and it stops with this
    process (they reconnect once it runs again) instead of never starting again.
    Our own writes replace the file whole (a rename).
    """
    handles = pgdata / ".handle_pids.json"
    try:
        text = handles.read_text()
    except OSError:
        return
    try:
        pids = json.loads(text)
    except ValueError:
        log.warning(
            "the list of the embedded PostgreSQL's users (%s) is unreadable (an interrupted"
            " write); starting it afresh: processes still using the server are no longer"
            " counted", handles,
        )  # fmt: skip
        _replace(handles, [])
        return
    if not isinstance(pids, list):
        return
    alive = [pid for pid in pids if isinstance(pid, int) and _alive(pid)]
    if alive != pids:
        log.info("forgetting %d dead user(s) of the embedded PostgreSQL", len(pids) - len(alive))
        _replace(handles, alive)


def _replace(path: Path, value: object) -> None:
    """Write `value` as JSON to `path` by a rename: a reader sees the old or the new."""
    temporary = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    temporary.write_text(json.dumps(value))
    os.replace(temporary, path)


def _forget_dead_handles_at_exit(module: object, pgdata: Path) -> None:
    """At exit, before pgserver's own cleanup (atexit runs hooks last registered first),
    forget the users of the server that died without theirs (`_forget_dead_handles`), so
    that this process, when it is the last one alive, stops the server. The workers of
    `reminders api --workers N` die by the SIGTERM uvicorn re-raises after their graceful
    shutdown, which skips their exit hooks: the server was left running with their pids
    listed (trial helper-54). Registered once per data directory and process.
    """
    if pgdata in _FORGET_AT_EXIT:
        return
    _FORGET_AT_EXIT.add(pgdata)
    lock = module.PostgresServer._lock  # type: ignore[attr-defined]

    def forget() -> None:
        with lock:
            _forget_dead_handles(pgdata)

    atexit.register(forget)


def release_embedded_servers() -> None:
    """Stop using the embedded PostgreSQL servers this process started or attached to,
    now rather than at exit: forget their dead users (`_forget_dead_handles`), then run
    pgserver's cleanup for this process (which stops a server whose last user this
    process was; a second run, at exit, does nothing). For processes that do not reach
    their exit hooks: a worker of `reminders api --workers N` ends by the SIGTERM uvicorn
    raises again after its graceful shutdown, so it releases the server at its app's
    shutdown (reminder_api.main.worker_app). Without pgserver, or no server: nothing.
    """
    module = sys.modules.get("pgserver.postgres_server")
    if module is None:
        return
    servers = module.PostgresServer._instances
    for pgdata, server in list(servers.items()):
        with module.PostgresServer._lock:
            _forget_dead_handles(pgdata)
        server._cleanup()


#: Data directories whose `_forget_dead_handles_at_exit` hook this process registered.
_FORGET_AT_EXIT: set[Path] = set()


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
