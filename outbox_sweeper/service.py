"""The safety net of the transactional outbox."""

from __future__ import annotations

from datetime import datetime, timedelta

from sqlalchemy import Engine

from reminder_core.metrics import PUBLISHED
from reminder_core.outbox import message_delay_s
from reminder_core.queue import Queue
from reminder_core.store import outbox
from reminder_core.worker.loop import TickResult


class OutboxSweeper:
    """Publishes outbox rows still unpublished `grace_s` seconds after they were written.

    The rows stay locked (`FOR UPDATE SKIP LOCKED`) while they are sent, so two sweepers
    never publish the same row at once; a crash leaves them unpublished for the next tick.

    Args:
        engine: database engine.
        queue: where rows are published.
        grace_s: leave younger rows to the coordinator's fast path.
        batch_size: most rows per tick.
    """

    name = "outbox_sweeper"

    def __init__(self, engine: Engine, queue: Queue, *, grace_s: float, batch_size: int = 500):
        self._engine = engine
        self._queue = queue
        self.grace_s = grace_s
        self.batch_size = batch_size

    def run_once(self, now: datetime) -> TickResult:
        """Publish one batch of stale unpublished rows; commit marks them published
        (reminders_outbox_published_total{path="sweeper"} counts them after the commit)."""
        with self._engine.begin() as conn:
            rows = outbox.lock_unpublished(
                conn, older_than=now - timedelta(seconds=self.grace_s), limit=self.batch_size
            )
            if not rows:
                return TickResult()
            payloads = [r.payload for r in rows]
            self._queue.send_batch(
                payloads, now=now, delays_s=[message_delay_s(p, now) for p in payloads]
            )
            outbox.mark_published(conn, (r.id for r in rows), now=now)
        PUBLISHED.labels(path="sweeper").inc(len(rows))
        return TickResult(
            processed=len(rows),
            more=len(rows) >= self.batch_size,
            counts={"republished": len(rows)},
        )
