"""`reminders api` / `python -m reminder_api`: serve the API with uvicorn, in this process
or in `workers` processes sharing one listening socket."""

from __future__ import annotations

import contextlib
import ctypes
import logging
import multiprocessing
import os
import shutil
import signal
import socket
import sys
import tempfile
import threading
from collections.abc import AsyncIterator, Callable
from typing import Any

import uvicorn
from fastapi import FastAPI
from uvicorn.supervisors import Multiprocess

from reminder_api.app import create_app
from reminder_api.serving import StopEventServer
from reminder_core.cell_directory import CellRouting, open_cell_routing
from reminder_core.db.embedded import release_embedded_servers
from reminder_core.errors import configuration_errors
from reminder_core.gc_policy import apply_gc_policy
from reminder_core.listening import bind_problem
from reminder_core.logging import configure_logging
from reminder_core.runtime import Runtime, open_runtime, stopped_while_opening
from reminder_core.settings import Settings
from reminder_core.worker.signals import install_stop_handlers

log = logging.getLogger(__name__)

#: At most this many processes by default: past it, two cores gain nothing and every
#: process holds its own connection pool.
DEFAULT_MAX_WORKERS = 4


def default_workers() -> int:
    """One process per CPU this process may run on (its affinity mask), at most
    DEFAULT_MAX_WORKERS."""
    try:
        cpus = len(os.sched_getaffinity(0))
    except AttributeError:  # not Linux
        cpus = os.cpu_count() or 1
    return max(1, min(cpus, DEFAULT_MAX_WORKERS))


def main(
    settings: Settings | None = None,
    *,
    host: str = "127.0.0.1",
    port: int = 8000,
    workers: int | None = None,
) -> int:
    """Serve until SIGTERM/SIGINT; returns 0 after a clean stop, 1 if the server failed to
    start (e.g. the port is taken).

    Args:
        workers: processes to serve with (None: API_WORKERS, else `default_workers()`).
            With more than one, uvicorn's supervisor binds the socket, starts the worker
            processes (each builds its own app and pool from the environment, as
            `worker_app`), restarts one that dies and stops them all on SIGTERM.
    """
    settings = settings or Settings()
    configure_logging(settings.log_level, settings.log_format)
    # Before the database opens: uvicorn's failure to bind came after it, as one record
    # among others, and the process exited 3 (trial helper-57).
    if problem := bind_problem(host, port):
        log.error("cannot serve on %s:%d: %s", host, port, problem)
        return 1
    count = workers or settings.api_workers or default_workers()
    if count > 1:
        return _serve_multiprocess(settings, host=host, port=port, workers=count)
    # Our handlers before the database opens (a signal then stops cleanly once it is
    # open) and while uvicorn serves (StopEventServer: a second signal is a hard stop).
    stop = threading.Event()
    install_stop_handlers(stop)
    if stopped_while_opening(stop):  # a signal held since the first line
        return 0
    with configuration_errors():
        rt = open_runtime(
            settings,
            application_name="reminders-api",
            statement_timeout_s=settings.api_statement_timeout_s,
        )
        app = create_app(rt.settings, rt.engine, rt.profiles, cells=_cells(rt))
    apply_gc_policy(settings.gc_gen0_threshold)  # set up: the rest is per request
    try:
        if stop.is_set():
            return 0
        server = StopEventServer(_config(app, settings, host=host, port=port), stop)
        server.run()
        return 0 if server.started else 1
    finally:
        rt.close()


def _cells(rt: Runtime) -> CellRouting | None:
    """The routing to the users' cells with CELLS (docs/design.md, "Cells"), else None."""
    return open_cell_routing(
        rt.settings,
        rt.engine,
        application_name="reminders-api",
        statement_timeout_s=rt.settings.api_statement_timeout_s,
    )


def _config(app: FastAPI | str, settings: Settings, **kwargs: object) -> uvicorn.Config:
    return uvicorn.Config(
        app,
        log_level=settings.log_level.lower(),
        log_config=None,  # uvicorn's records go to our handler (reminder_core.logging)
        timeout_graceful_shutdown=int(settings.shutdown_grace_s),
        **kwargs,  # type: ignore[arg-type]
    )


def _serve_multiprocess(settings: Settings, *, host: str, port: int, workers: int) -> int:
    # A bad setting is reported once, here, not by every worker as it crashes and is
    # restarted: build the app once (no connection is opened) and drop it. Our stop
    # handlers meanwhile (the embedded PostgreSQL may be starting); uvicorn's supervisor
    # installs its own when it runs.
    stop = threading.Event()
    install_stop_handlers(stop)
    if stopped_while_opening(stop):  # a signal held since the first line
        return 0
    with configuration_errors():
        rt = open_runtime(
            settings,
            application_name="reminders-api",
            statement_timeout_s=settings.api_statement_timeout_s,
        )
        try:
            create_app(rt.settings, rt.engine, rt.profiles, cells=_cells(rt))
        finally:
            rt.close()
    if stopped_while_opening(stop):
        return 0
    # Each process counts its own requests; prometheus_client's multiprocess mode sums
    # them on /metrics (the workers inherit this variable; docs/operations.md).
    # A directory made here is removed once the workers have stopped (one was left in
    # $TMPDIR at every start); one the operator set is theirs.
    made: str | None = None
    if not os.environ.get("PROMETHEUS_MULTIPROC_DIR"):
        _remove_orphaned_metrics_dirs()
        made = tempfile.mkdtemp(prefix=f"{METRICS_DIR_PREFIX}{os.getpid()}-")
        os.environ["PROMETHEUS_MULTIPROC_DIR"] = made

    def remove_made() -> None:
        if made is not None:
            shutil.rmtree(made, ignore_errors=True)

    try:
        return _run_workers(
            settings, host=host, port=port, workers=workers, stop=stop, at_hard_stop=remove_made
        )
    finally:
        remove_made()


#: Prefix of the metrics directory a supervisor makes in $TMPDIR, followed by its pid.
METRICS_DIR_PREFIX = "reminders-metrics-"


def _remove_orphaned_metrics_dirs() -> None:
    """Remove the metrics directories of supervisors no longer running
    (`<TMPDIR>/reminders-metrics-<pid>-*` whose pid is gone): a supervisor killed with
    SIGKILL cannot remove its own (trial helper-57). Errors are ignored; a directory
    whose pid was reused by another process is kept until that one ends."""
    with contextlib.suppress(OSError):
        for entry in os.scandir(tempfile.gettempdir()):
            pid_text = entry.name.removeprefix(METRICS_DIR_PREFIX).partition("-")[0]
            if entry.name.startswith(METRICS_DIR_PREFIX) and pid_text.isdigit():
                if not _running(int(pid_text)) and entry.is_dir(follow_symlinks=False):
                    shutil.rmtree(entry.path, ignore_errors=True)


def _running(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # another user's process
        return True
    return True


def _run_workers(
    settings: Settings,
    *,
    host: str,
    port: int,
    workers: int,
    stop: threading.Event,
    at_hard_stop: Callable[[], None] | None = None,
) -> int:
    """uvicorn's supervisor over `workers` processes on one socket, until `stop` is set
    (`Supervisor`; `at_hard_stop` runs after a hard stop killed the workers)."""
    config = _config(
        "reminder_api.main:worker_app",
        settings,
        factory=True,
        host=host,
        port=port,
        workers=workers,
    )
    sock = config.bind_socket()  # exits with status 1 when the port is taken
    try:
        Supervisor(config, [sock], stop, at_hard_stop=at_hard_stop).run()
    finally:
        sock.close()
    return 0


class Supervisor(Multiprocess):
    """uvicorn's supervisor of worker processes, stopped by the process's own handlers
    (`install_stop_handlers`): the first SIGTERM or SIGINT sets `stop`, which is the
    supervisor's `should_exit` (its workers are sent SIGTERM and waited for, each
    draining its connections); a second one kills the workers (SIGKILL) and exits with
    status 130 at once. uvicorn's own handlers queued every signal and handled none while
    it waited for the workers, so a second Ctrl-C did nothing (trial helper-55). SIGHUP,
    SIGTTIN and SIGTTOU keep uvicorn's meaning (restart, one worker more, one fewer).
    `at_hard_stop` runs after the workers are killed, before the exit (the exit skips
    `finally` blocks: the metrics directory made for the workers is removed there; trial
    helper-56 found one left in $TMPDIR after every hard stop).
    """

    def __init__(
        self,
        config: uvicorn.Config,
        sockets: list[socket.socket],
        stop: threading.Event,
        *,
        at_hard_stop: Callable[[], None] | None = None,
    ) -> None:
        super().__init__(config, sockets)  # installs uvicorn's handlers for its signals
        self.should_exit = stop
        self._at_hard_stop = at_hard_stop
        install_stop_handlers(stop, on_hard_stop=self._kill_workers)

    def _kill_workers(self) -> None:
        for process in self.processes:
            if process.pid is not None:
                with contextlib.suppress(ProcessLookupError):
                    os.kill(process.pid, signal.SIGKILL)
        if self._at_hard_stop is not None:
            self._at_hard_stop()


def worker_app() -> FastAPI:
    """The app of one worker process of `reminders api --workers N` (uvicorn's factory):
    settings from the environment, its own engine and pool, closed when the process
    exits."""
    settings = Settings()
    configure_logging(settings.log_level, settings.log_format)
    rt = open_runtime(
        settings,
        application_name="reminders-api",
        statement_timeout_s=settings.api_statement_timeout_s,
    )
    app = create_app(rt.settings, rt.engine, rt.profiles, cells=_cells(rt))
    _close_at_shutdown(app, rt)
    exit_with_parent()
    apply_gc_policy(settings.gc_gen0_threshold)  # set up: the rest is per request
    return app


def _close_at_shutdown(app: FastAPI, rt: Runtime) -> None:
    """Close `rt` and release the embedded PostgreSQL when `app` shuts down (its
    lifespan's end), not at exit: a worker ends by the SIGTERM uvicorn raises again after
    its graceful shutdown, which skips exit hooks, so with every user of the embedded
    server gone that way (the supervisor killed, trial helper-55) none stopped it."""
    inner = app.router.lifespan_context

    @contextlib.asynccontextmanager
    async def lifespan(application: FastAPI) -> AsyncIterator[Any]:
        async with inner(application) as state:
            yield state
        # Shutting down: a Ctrl-C storm to the group raised KeyboardInterrupt in the
        # release, mid-write of the server's list of users, which it left empty (trial
        # helper-58). The supervisor's hard stop is SIGKILL, which this does not hold.
        with contextlib.suppress(ValueError):  # not the main thread: nothing to hold
            signal.signal(signal.SIGINT, signal.SIG_IGN)
            signal.signal(signal.SIGTERM, signal.SIG_IGN)
        rt.close()
        release_embedded_servers()

    app.router.lifespan_context = lifespan


#: prctl(2) option: the signal the kernel sends this process when its parent dies.
PR_SET_PDEATHSIG = 1


def exit_with_parent() -> None:
    """Linux: have the kernel send this worker SIGTERM when its supervisor dies (prctl(2)
    PR_SET_PDEATHSIG), which uvicorn's server takes as a graceful stop. A supervisor killed
    with SIGKILL left its workers serving the port as orphans (trial helper-55). Elsewhere,
    or when prctl fails: nothing (logged). A supervisor already gone: SIGTERM now.
    """
    if not sys.platform.startswith("linux"):
        return
    libc = ctypes.CDLL(None, use_errno=True)
    if libc.prctl(PR_SET_PDEATHSIG, signal.SIGTERM, 0, 0, 0) != 0:
        log.warning("prctl(PR_SET_PDEATHSIG): %s", os.strerror(ctypes.get_errno()))
        return
    parent = multiprocessing.parent_process()
    if parent is not None and os.getppid() != parent.pid:  # it died before prctl
        os.kill(os.getpid(), signal.SIGTERM)
