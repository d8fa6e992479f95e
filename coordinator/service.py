"""Claim due reminders and write their outbox rows in one transaction, then publish; on the
PostgreSQL queue, write their queue messages in the claim's transaction instead."""

from __future__ import annotations

import logging
import os
import socket
import threading
from collections.abc import Callable
from datetime import datetime, timedelta

from sqlalchemy import Engine
from sqlalchemy.exc import InterfaceError, OperationalError

from reminder_core.clock import utcnow
from reminder_core.db.listen import Listener
from reminder_core.errors import InfrastructureError
from reminder_core.metrics import CLAIMS, CLAIMS_PER_TICK, PUBLISHED
from reminder_core.outbox import publish_outbox_rows
from reminder_core.queue import PostgresQueue, Queue
from reminder_core.services import reminders as reminder_services
from reminder_core.store import reminders as reminder_store
from reminder_core.store.outbox import OutboxRow
from reminder_core.worker.loop import TickResult

log = logging.getLogger(__name__)


def default_worker_id(kind: str) -> str:
    """A worker id that names host and process, e.g. "coordinator@host:1234"."""
    return f"{kind}@{socket.gethostname()}:{os.getpid()}"


class Coordinator:
    """Claims due reminders (`FOR UPDATE SKIP LOCKED`) into the transactional outbox.

    On the PostgreSQL queue in the coordinator's own database, the claim writes the queue
    messages themselves in its transaction (`claim_due_to_queue`): the message row is the
    outbox row, with nothing to publish afterwards (issue 15: three row writes and one
    transaction fewer per occurrence). Any other queue (SQS) gets outbox rows, published
    right after the commit, with the outbox sweeper as the safety net.

    Args:
        engine: database engine.
        queue: where claimed occurrences go.
        lookahead_s: claim reminders due up to this many seconds after `now`; their
            messages are delayed until the due time.
        batch_size: most reminders claimed per tick.
        worker_id: written to `reminders.claimed_by`.
        clock: the current time of `wait_for_work` (aware UTC).
        coalesce_s: a woken coordinator waits this long past the instant it woke for, so
            that reminders due together are claimed as one batch.
    """

    name = "coordinator"

    def __init__(
        self,
        engine: Engine,
        queue: Queue,
        *,
        lookahead_s: float,
        batch_size: int,
        worker_id: str | None = None,
        clock: Callable[[], datetime] = utcnow,
        coalesce_s: float = 0.02,
    ) -> None:
        self._clock = clock
        self.coalesce_s = coalesce_s
        self._listener = Listener(engine, reminder_store.DUE_CHANNEL)
        self._engine = engine
        self._queue = queue
        self.lookahead_s = lookahead_s
        self.batch_size = batch_size
        self.worker_id = worker_id or default_worker_id(self.name)
        #: The PostgreSQL queue whose table is in this database, by name: claims write
        #: its messages in their own statement (None: outbox rows, then publish).
        self.claim_queue: str | None = (
            queue.name if isinstance(queue, PostgresQueue) and queue.in_database_of(engine)
            else None
        )  # fmt: skip

    def claim(self, now: datetime) -> list[OutboxRow]:
        """Claim due reminders and insert their outbox rows; commit.

        Args:
            now: aware UTC; reminders with next_run_utc <= now + lookahead_s are due.

        Returns:
            The outbox row of each claimed reminder, in the order the statement returns
            them; its payload is {"reminder_id", "run_time_utc" (ISO 8601 UTC),
            "version", "user_id"}.

        Side effects: one committed transaction (claim + outbox together; docs/design.md,
        "Claim and outbox").
        """
        horizon = now + timedelta(seconds=self.lookahead_s)
        with self._engine.begin() as conn:
            return reminder_services.claim_due(
                conn, horizon=horizon, now=now, limit=self.batch_size, worker=self.worker_id
            )

    def wait_for_work(self, stop: threading.Event, timeout_s: float) -> None:
        """Wait after a tick that claimed all that was due (the worker loop calls it):
        until the next pending reminder comes within `lookahead_s` (+ `coalesce_s`), or a
        reminder written due within DUE_SOON_S is NOTIFYed (the API's create, change and
        resume), at most `timeout_s` seconds; returns early when `stop` is set. A
        reminder created for "now" is so claimed within milliseconds instead of at the
        next poll (issue 15). The database unreachable: a plain sleep (the next tick
        reports it)."""
        now = self._clock()

        def wait_s(spent: float) -> float:
            with self._engine.connect() as conn:
                due = reminder_services.next_due(conn)
            if due is None:
                return timeout_s
            claimable_at = due - timedelta(seconds=self.lookahead_s)
            until = (claimable_at - (now + timedelta(seconds=spent))).total_seconds()
            return max(0.0, until) + self.coalesce_s

        try:
            self._listener.wait_until(stop, timeout_s=timeout_s, wait_s=wait_s)
        except (OperationalError, InterfaceError) as exc:
            log.debug("waiting for due reminders by polling (the database failed: %s)", exc)
            stop.wait(timeout_s)

    def close(self) -> None:
        """Close the LISTEN connection `wait_for_work` opened, if any."""
        self._listener.close()

    def claim_to_queue(self, now: datetime, queue: str) -> int:
        """Claim due reminders and write their messages into the PostgreSQL queue `queue`
        in one transaction; commit. Returns how many were claimed."""
        horizon = now + timedelta(seconds=self.lookahead_s)
        with self._engine.begin() as conn:
            return reminder_services.claim_due_to_queue(
                conn, horizon=horizon, now=now, limit=self.batch_size,
                worker=self.worker_id, queue=queue,
            )  # fmt: skip

    def run_once(self, now: datetime) -> TickResult:
        """Claim one batch, then publish it. A failed publish is left to the sweeper (the
        claims and their outbox rows are committed), and the tick says so: `failed` is
        "publish", which the loop counts as a failed tick (reminders_tick_failures_total,
        `/readyz`), so that a queue the coordinator cannot reach shows. On the PostgreSQL
        queue (`claim_queue`) the claim's commit is the publication.

        Metrics: reminders_claims_total, reminders_claims_per_tick,
        reminders_outbox_published_total{path="fast"} (published right after the claim)
        or {path="claim"} (written by the claim itself).
        """
        if self.claim_queue is not None:
            n = self.claim_to_queue(now, self.claim_queue)
            CLAIMS.inc(n)
            CLAIMS_PER_TICK.observe(n)
            PUBLISHED.labels(path="claim").inc(n)
            return TickResult(
                processed=n, more=n >= self.batch_size, counts={"claimed": n, "published": n}
            )
        claimed = self.claim(now)
        CLAIMS.inc(len(claimed))
        CLAIMS_PER_TICK.observe(len(claimed))
        published = 0
        failed = None
        if claimed:
            try:
                published = publish_outbox_rows(self._engine, self._queue, claimed, now=now)
                PUBLISHED.labels(path="fast").inc(published)
            except Exception as exc:
                failed = "publish"
                log.error(
                    "publishing %d claimed occurrences failed; the outbox sweeper will retry%s",
                    len(claimed),
                    f": {exc}" if isinstance(exc, InfrastructureError) else "",
                    exc_info=not isinstance(exc, InfrastructureError),
                )
        return TickResult(
            processed=len(claimed),
            more=len(claimed) >= self.batch_size,
            counts={"claimed": len(claimed), "published": published},
            failed=failed,
        )
