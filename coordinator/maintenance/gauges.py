"""Backlog gauges: next_run_lag_seconds, due backlog, outbox, queue and DLQ depth, ...
computed by the maintenance workload, once per run, rather than by every pod on every
scrape (reminder_core.backlog.refresh_backlog_gauges)."""

from __future__ import annotations

from datetime import datetime

from sqlalchemy import Engine

from reminder_core.backlog import refresh_backlog_gauges
from reminder_core.queue import Queue
from reminder_core.worker.loop import TickResult


class BacklogGauges:
    """Refreshes the backlog gauges of this process's /metrics.

    Args:
        engine: database engine.
        queue: the queue whose depths are read.
        interval_s: seconds between refreshes.
    """

    name = "gauges"

    def __init__(self, engine: Engine, queue: Queue, *, interval_s: float) -> None:
        self._engine = engine
        self._queue = queue
        self.interval_s = interval_s

    def run_once(self, now: datetime) -> TickResult:
        """Read the backlog as of `now` (aware UTC) and set the gauges; counts nothing.

        Raises:
            sqlalchemy.exc.DBAPIError, InfrastructureError: the database or the queue
                could not be read (the gauges keep their last values).
        """
        refresh_backlog_gauges(self._engine, self._queue, now)
        return TickResult()
