"""What every process builds at start: settings → database → queue → profiles."""

from __future__ import annotations

import logging
import os
import sys
import threading
from collections.abc import Callable
from dataclasses import dataclass
from typing import NoReturn, Protocol

from sqlalchemy import Engine

from reminder_core.cells import process_settings
from reminder_core.db.embedded import resolve_database_url
from reminder_core.db.session import make_engine
from reminder_core.errors import (
    ConfigurationError,
    InfrastructureError,
    QueueNotFound,
    configuration_errors,
)
from reminder_core.gc_policy import apply_gc_policy
from reminder_core.logging import configure_logging
from reminder_core.metrics_server import serve_worker_metrics
from reminder_core.profile_service import HttpProfileSource, profile_source_from_settings
from reminder_core.profiles import ProfileSource
from reminder_core.queue import Queue, open_queue
from reminder_core.settings import Settings
from reminder_core.worker.loop import Heartbeat, Service, join_loops, start_loops
from reminder_core.worker.registry import WorkerRegistry
from reminder_core.worker.signals import install_stop_handlers

log = logging.getLogger(__name__)


@dataclass
class Runtime:
    """The shared dependencies of one process."""

    settings: Settings
    database_url: str
    engine: Engine
    queue: Queue
    profiles: ProfileSource

    def close(self) -> None:
        if isinstance(self.profiles, HttpProfileSource):
            self.profiles.close()
        close_queue = getattr(self.queue, "close", None)  # the PostgreSQL queue's LISTEN
        if close_queue is not None:
            close_queue()
        self.engine.dispose()


def open_runtime(
    settings: Settings,
    *,
    application_name: str,
    migrate: bool = False,
    pool_size: int | None = None,
    check_queue: bool = False,
    worker: bool = False,
    statement_timeout_s: float = 0.0,
) -> Runtime:
    """Connect to the database (embedded when DATABASE_URL is unset) and build the queue.

    Args:
        migrate: apply pending migrations first (`reminders dev` does; production runs the
            migration Job instead).
        statement_timeout_s: bound every statement on the engine's connections (seconds,
            0: none; the API passes API_STATEMENT_TIMEOUT_S; `make_engine`).
        check_queue: ask the queue once whether it exists (`check_queue_at_start`): the
            workloads that use it do; one-off commands need not.
        worker: a cell's worker: with CELLS, CELL (`--cell`) must name its cell, whose
            database and queue it opens (`cells.process_settings`); other processes open
            the first cell's. `Runtime.settings` has the URLs opened.

    Raises:
        RuntimeError: the embedded database cannot start.
        ConfigurationError: DATABASE_URL is unset and STATE_DIR holds no embedded database
            (unless `migrate`).
        sqlalchemy.exc.OperationalError: the database cannot be reached (on migrate).
        ConfigurationError: with `check_queue`, the queue QUEUE_URL names does not exist.
    """
    settings = process_settings(settings, worker=worker)
    # Only `reminders dev` (which migrates) makes an embedded database; every other
    # process is refused one in a directory that has none (embedded_database_url).
    url = resolve_database_url(settings.database_url, settings.state_dir, create=migrate)
    if migrate:
        from reminder_core.db.migrate import upgrade  # alembic: only `reminders dev`

        upgrade(url)
    engine = make_engine(
        url,
        pool_size=pool_size or settings.db_pool_size,
        application_name=application_name,
        pool_timeout_s=settings.db_pool_timeout_s,
        statement_timeout_s=statement_timeout_s,
    )
    queue = open_queue(
        settings.queue_url,
        engine,
        max_receive_count=settings.max_receive_count,
        sqs_endpoint_url=settings.sqs_endpoint_url,
        aws_region=settings.aws_region,
        sqs_wait_time_s=settings.sqs_wait_time_s,
    )
    if check_queue:
        check_queue_at_start(queue, settings)
    profiles = profile_source_from_settings(settings)
    return Runtime(
        settings=settings, database_url=url, engine=engine, queue=queue, profiles=profiles
    )


def check_queue_at_start(queue: Queue, settings: Settings) -> None:
    """Ask the queue once whether it exists and can be used (`Queue.check`).

    A queue the server says does not exist is a configuration error: nothing would ever
    be published or received, while the process looked healthy. A server that cannot be
    asked is an outage, not a mistake: logged, and the process starts anyway (its loops
    retry; `/readyz` and reminders_tick_failures_total show the failing ticks), so that an
    SQS outage does not crash-loop every pod.

    Raises:
        ConfigurationError: the queue, or its dead-letter queue, does not exist (the CLI
            prints it as one `error:` line and exits with status 2).
    """
    try:
        queue.check()
    except QueueNotFound as exc:
        where = (
            f" at SQS_ENDPOINT_URL {settings.sqs_endpoint_url}" if settings.sqs_endpoint_url else ""
        )
        raise ConfigurationError(
            f"QUEUE_URL {settings.queue_url} names a queue that does not exist{where} ({exc});"
            " create it with `reminders queue create`, or correct QUEUE_URL"
        ) from exc
    except InfrastructureError as exc:
        log.warning(
            "cannot check the queue of QUEUE_URL %s at start: %s; starting anyway",
            settings.queue_url,
            exc,
        )


def run_services(
    loops: list[tuple[Service, float]],
    settings: Settings,
    stop: threading.Event | None = None,
    *,
    engine: Engine | None = None,
) -> int:
    """Run workload loops in this process until SIGTERM/SIGINT; return an exit status.

    Soft stop: each loop finishes its current tick; after `shutdown_grace_s` the process
    exits anyway, at once and with status 1 (`hard_exit`: abandoned work is re-driven by
    claim and lease timeouts). With
    METRICS_PORT set, `/metrics` and `/healthz` are served on it while the loops run (a
    port that cannot be bound: status 1 before any loop starts).

    Args:
        stop: the event the signals set; pass the one the services watch, if any.
        engine: where the loops' heartbeat rows go (`reminder_core.worker.registry`:
            every WORKER_HEARTBEAT_INTERVAL_S, marked stopped at exit); None: none.
    """
    stop = stop or threading.Event()
    install_stop_handlers(stop)
    apply_gc_policy(settings.gc_gen0_threshold)  # set up: the rest is per tick
    heartbeats: dict[str, Heartbeat] = {}
    threads: list[threading.Thread] = []
    try:
        serve_worker_metrics(settings, threads, heartbeats)
    except OSError:
        return 1  # logged
    loop_threads = start_loops(loops, stop, heartbeats)
    threads.extend(loop_threads)
    registry = start_registry(engine, heartbeats, settings)
    names = ", ".join(s.name for s, _ in loops)
    log.info("running %s; SIGTERM or Ctrl-C to stop", names)
    try:
        while not stop.wait(1.0):
            if not any(t.is_alive() for t in loop_threads):
                log.error("every loop has exited; stopping")
                return 1
        stuck = join_loops(threads, settings.shutdown_grace_s)
        if stuck:
            log.warning(
                "hard stop after %.0fs grace; still running: %s",
                settings.shutdown_grace_s,
                ", ".join(stuck),
            )
            if registry is not None:
                registry.close()
            hard_exit(1)
        log.info("stopped cleanly")
        return 0
    finally:
        if registry is not None:
            registry.close()


def start_registry(
    engine: Engine | None, heartbeats: dict[str, Heartbeat], settings: Settings
) -> WorkerRegistry | None:
    """Start writing the heartbeat rows of the loops in `heartbeats` (None without an
    engine); the caller closes it at exit (`WorkerRegistry.close`)."""
    if engine is None:
        return None
    registry = WorkerRegistry(engine, heartbeats, interval_s=settings.worker_heartbeat_interval_s)
    registry.start()
    return registry


def run_workload(
    settings: Settings | None,
    *,
    application_name: str,
    build: Callable[[Runtime], Service],
    poll_interval_s: Callable[[Settings], float],
) -> int:
    """A one-service workload's `main`: logging configured, the runtime opened (the
    queue checked), the service built by `build` and run by the shared loop every
    `poll_interval_s(settings)` seconds until SIGTERM/SIGINT; returns the exit status.

    Raises:
        ConfigurationError, InfrastructureError: at start (a setting, the database, the
            queue): the CLI prints them as `error: ...` with status 2 or 3.
    """
    settings = settings or Settings()
    configure_logging(settings.log_level, settings.log_format)
    stop = threading.Event()
    install_stop_handlers(stop)  # before the database opens: see `stopped_while_opening`
    if stopped_while_opening(stop):  # a signal held since the first line
        return 0
    with configuration_errors():
        rt = open_runtime(
            settings, application_name=application_name, check_queue=True, worker=True
        )
        service = build(rt)
    try:
        if stopped_while_opening(stop):
            return 0
        return run_services(
            [(service, poll_interval_s(rt.settings))], rt.settings, stop, engine=rt.engine
        )
    finally:
        close_service = getattr(service, "close", None)  # e.g. the coordinator's LISTEN
        if close_service is not None:
            close_service()
        rt.close()


def stopped_while_opening(stop: threading.Event) -> bool:
    """Whether a SIGTERM or SIGINT came while the process opened its runtime (the stop
    handlers were installed first, `install_stop_handlers`): the caller then closes what
    it opened and exits with status 0 instead of starting its loops. Without the handlers
    first, a SIGTERM while the embedded PostgreSQL started killed the process past
    pgserver's exit hook and left the server running (trial helper-54)."""
    if stop.is_set():
        log.info("stopped while starting")
        return True
    return False


class WorkloadMain(Protocol):
    """A workload's entry point: runs it with `settings` (default: from the environment)
    until SIGTERM/SIGINT; returns the exit status."""

    def __call__(self, settings: Settings | None = None) -> int: ...


def workload_main(
    application_name: str,
    build: Callable[[Runtime], Service],
    poll_interval_s: Callable[[Settings], float],
) -> WorkloadMain:
    """The `main(settings=None) -> exit status` of a one-service workload: `run_workload`
    with these arguments (coordinator, sweeper, maintenance)."""

    def main(settings: Settings | None = None) -> int:
        return run_workload(
            settings,
            application_name=application_name,
            build=build,
            poll_interval_s=poll_interval_s,
        )

    return main


def hard_exit(status: int) -> NoReturn:
    """Exit now with `status`, without waiting for any thread: a provider call still under
    way in a send thread would otherwise keep the process alive until its own timeout
    (the interpreter joins a ThreadPoolExecutor's threads at exit), past SHUTDOWN_GRACE_S
    and Kubernetes' terminationGracePeriodSeconds. What is abandoned is re-driven by claim
    and lease timeouts. Log handlers are flushed first."""
    logging.shutdown()
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(status)
