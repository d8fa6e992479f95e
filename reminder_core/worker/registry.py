"""Worker heartbeats in the database (docs/design.md, "Workers"): each process that runs
workload loops writes one `worker_heartbeats` row per loop every
WORKER_HEARTBEAT_INTERVAL_S and marks them stopped when it exits cleanly, so that
`reminders status` (and an SRE) can tell a role without a live worker from a quiet one.
`/healthz` answers for one process; these rows answer for the whole deployment."""

from __future__ import annotations

import logging
import os
import socket
import sys
import threading
import uuid
from collections.abc import Callable, Mapping
from datetime import datetime
from importlib import metadata

from sqlalchemy import Engine
from sqlalchemy.exc import SQLAlchemyError

from reminder_core.clock import utcnow
from reminder_core.store import worker_heartbeats
from reminder_core.store.worker_heartbeats import LoopBeat, ProcessInfo
from reminder_core.worker.loop import Heartbeat

log = logging.getLogger(__name__)


def package_version() -> str:
    """The installed `reminders` distribution's version ("unknown" when not installed)."""
    try:
        return metadata.version("reminders")
    except metadata.PackageNotFoundError:
        return "unknown"


def this_process(command: str | None = None, *, now: datetime) -> ProcessInfo:
    """This process as a heartbeat names it: host, pid, `command` (default: the program
    and its first argument, e.g. "reminders sender"), package version, started at `now`."""
    if command is None:
        argv = [os.path.basename(sys.argv[0] or "python"), *sys.argv[1:2]]
        command = " ".join(argv)
    return ProcessInfo(
        host=socket.gethostname(),
        pid=os.getpid(),
        process=command,
        version=package_version(),
        started_at=now,
    )


class WorkerRegistry:
    """Writes the heartbeat rows of this process's loops from a daemon thread.

    Args:
        engine: database engine (one short transaction per beat).
        heartbeats: loop (service) name -> the `Heartbeat` its loop keeps
            (`start_loops(heartbeats=...)`); read at every beat, so loops may be added
            until the first one.
        interval_s: seconds between beats (WORKER_HEARTBEAT_INTERVAL_S).
        command: the process's command, e.g. "reminders dev" (default: from argv).
        clock: aware UTC now.

    A beat that fails (the database is down) is logged at WARNING once per outage and
    retried at the next interval: the loops do not depend on it.
    """

    def __init__(
        self,
        engine: Engine,
        heartbeats: Mapping[str, Heartbeat],
        *,
        interval_s: float,
        command: str | None = None,
        clock: Callable[[], datetime] = utcnow,
    ) -> None:
        self._engine = engine
        self._heartbeats = heartbeats
        self.interval_s = interval_s
        self._clock = clock
        self.process = this_process(command, now=clock())
        self._ids: dict[str, uuid.UUID] = {}
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._failing = False

    def ids(self) -> dict[str, uuid.UUID]:
        """Row id of each loop beaten so far, by loop name."""
        return dict(self._ids)

    def beat(self) -> bool:
        """Write one heartbeat for every loop now; returns whether it was written."""
        now = self._clock()
        loops = [
            LoopBeat(
                id=self._ids.setdefault(name, uuid.uuid4()),
                role=name,
                last_tick_at=hb.last_tick_at,
                consecutive_failures=hb.consecutive_failures,
            )
            for name, hb in list(self._heartbeats.items())
        ]
        try:
            with self._engine.begin() as conn:
                worker_heartbeats.beat_many(conn, process=self.process, loops=loops, now=now)
        except SQLAlchemyError as exc:
            if not self._failing:
                log.warning("worker heartbeat not written (retrying every %.0f s): %s",
                            self.interval_s, exc)  # fmt: skip
            self._failing = True
            return False
        if self._failing:
            log.info("worker heartbeat written again")
        self._failing = False
        return True

    def start(self) -> threading.Thread:
        """Beat now and then every `interval_s` from a daemon thread; returns the thread."""
        self._thread = threading.Thread(target=self._run, name="worker-heartbeat", daemon=True)
        self._thread.start()
        return self._thread

    def _run(self) -> None:
        while True:
            self.beat()
            if self._stop.wait(self.interval_s):
                return

    def close(self, *, stopped: bool = True) -> None:
        """Stop beating; with `stopped`, mark this process's rows stopped (a clean exit:
        `reminders status` then shows them stopped at once instead of after
        WORKER_STALE_AFTER_S). Never raises: a database that is down leaves the rows to
        go stale."""
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=5)
        if not stopped or not self._ids:
            return
        try:
            with self._engine.begin() as conn:
                worker_heartbeats.mark_stopped(conn, self._ids.values(), now=self._clock())
        except SQLAlchemyError as exc:
            log.warning("worker heartbeat rows not marked stopped: %s", exc)
