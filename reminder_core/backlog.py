"""The scheduler's backlog, read from the database and the queue: the maintenance
workload's gauges and `reminders status` (docs/design.md, "Metrics")."""

from __future__ import annotations

import logging
from dataclasses import dataclass
from datetime import datetime

from sqlalchemy import Connection, Engine

from reminder_core.errors import InfrastructureError
from reminder_core.metrics import (
    BACKLOG_UPDATED,
    DLQ_DEPTH,
    DUE_BACKLOG,
    NEXT_RUN_LAG,
    OLDEST_PENDING_AGE,
    OUTBOX_OLDEST_AGE,
    OUTBOX_UNPUBLISHED,
    QUEUE_DEPTH,
)
from reminder_core.queue import Queue, QueueDepth
from reminder_core.store import reminders

log = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class Backlog:
    """What is late or waiting at one instant.

    Attributes:
        next_run_lag_s: seconds between now and the oldest `next_run_utc` of a due
            occurrence not yet delivered (reminder `pending`, or `claimed` and waiting in
            the outbox, the queue or a sender); 0.0 when nothing is due.
        oldest_pending_age_s: the same among reminders not yet claimed by the coordinator
            (`pending`): the coordinator's own lag; 0.0 when none.
        due_backlog: how many reminders are due and not yet claimed.
        outbox_unpublished: outbox rows not yet published to the queue.
        outbox_oldest_age_s: age of the oldest of them, seconds; 0.0 when none.
    """

    next_run_lag_s: float
    oldest_pending_age_s: float
    due_backlog: int
    outbox_unpublished: int
    outbox_oldest_age_s: float


def age_s(now: datetime, since: datetime | None) -> float:
    """Seconds from `since` to `now` (both aware), never negative; 0.0 when `since` is None."""
    if since is None:
        return 0.0
    return max(0.0, (now - since).total_seconds())


def read_backlog(conn: Connection, now: datetime) -> Backlog:
    """Read the backlog as of `now` (aware UTC) in one read-only statement on `conn`.

    Raises:
        sqlalchemy.exc.DBAPIError: the database failed.
    """
    reading = reminders.backlog(conn, now=now)
    return Backlog(
        next_run_lag_s=age_s(now, reading.oldest_due),
        oldest_pending_age_s=age_s(now, reading.oldest_pending),
        due_backlog=reading.due_backlog,
        outbox_unpublished=reading.outbox_unpublished,
        outbox_oldest_age_s=age_s(now, reading.outbox_oldest_unpublished),
    )


def refresh_backlog_gauges(engine: Engine, queue: Queue, now: datetime) -> Backlog:
    """Compute the backlog gauges of `reminder_core.metrics` (next_run_lag_seconds, outbox,
    queue and DLQ depth, ...) as of `now`; the maintenance workload calls it every tick.

    Side effects: one read-only statement, one `queue.depth()` call (SQS: two
    GetQueueAttributes), the gauges set and `reminders_backlog_updated_timestamp_seconds`
    set to `now`. A queue that cannot be read leaves the queue gauges at their last
    values (logged); the database gauges are set anyway.

    Returns:
        the backlog read.

    Raises:
        sqlalchemy.exc.DBAPIError: the database failed; no gauge was changed.
    """
    with engine.connect() as conn:
        backlog = read_backlog(conn, now)
    depth: QueueDepth | None
    try:
        depth = queue.depth(now=now)
    except InfrastructureError as exc:
        log.warning("queue depth unavailable; queue gauges keep their last values: %s", exc)
        depth = None
    NEXT_RUN_LAG.set(backlog.next_run_lag_s)
    OLDEST_PENDING_AGE.set(backlog.oldest_pending_age_s)
    DUE_BACKLOG.set(backlog.due_backlog)
    OUTBOX_UNPUBLISHED.set(backlog.outbox_unpublished)
    OUTBOX_OLDEST_AGE.set(backlog.outbox_oldest_age_s)
    if depth is not None:
        QUEUE_DEPTH.labels(state="visible").set(depth.visible)
        QUEUE_DEPTH.labels(state="not_visible").set(depth.not_visible)
        DLQ_DEPTH.set(depth.dead_lettered)
    BACKLOG_UPDATED.set(now.timestamp())
    return backlog
