"""Retention (docs/design.md, "Retention"): keep the tables from growing forever; never
delete live work.

A maintenance service (`coordinator.maintenance`), run every RETENTION_INTERVAL_S (the
first run at the workload's start; a run that left rows to delete is followed at once):

- `delivery_log` is partitioned by week of `run_time_utc` (ISO weeks, Monday 00:00 UTC;
  migration 0005). The partitions of the current week and the next
  DELIVERY_LOG_PARTITIONS_AHEAD weeks are made ahead; a partition whose whole week is
  older than DELIVERY_LOG_RETENTION_DAYS is dropped, unless it still holds a `sending`
  row (in flight: kept, logged and counted at each run until that row ends). Rows no
  weekly partition covers land in the default partition (an insert never fails); its
  expired terminal rows are deleted in chunks, and a new weekly partition takes over the
  rows the default held for its week.
- Published outbox rows older than OUTBOX_RETENTION_DAYS and webhook events older than
  WEBHOOK_EVENTS_RETENTION_DAYS (never within the rematch window) are deleted in chunks of
  RETENTION_BATCH_SIZE rows, one short transaction per chunk.
- Worker heartbeat rows not seen for WORKER_HEARTBEATS_RETENTION_DAYS are deleted the
  same way (a process that exited long ago).
- Queue messages are not touched: the queue deletes a message once it is handled, and a
  dead-lettered message stays until `reminders dlq replay|purge` (the DLQ depth alert
  watches it; SQS keeps its own retention period).

Partition DDL takes an ACCESS EXCLUSIVE lock on delivery_log for milliseconds (creation
also a SHARE ROW EXCLUSIVE lock on reminders, for the foreign key), under a short
lock_timeout: a step that cannot get its locks gives up and is tried again at the next
run, rather than queue every sender behind it.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import asdict, dataclass
from datetime import UTC, datetime, timedelta
from enum import Enum
from functools import partial
from typing import Literal, Protocol, TypeVar

from sqlalchemy import Connection, Engine
from sqlalchemy.exc import OperationalError

from reminder_core.metrics import RETENTION_DELETED, RETENTION_PARTITIONS
from reminder_core.store import (
    delivery_log,
    outbox,
    transaction,
    webhook_events,
    worker_heartbeats,
)
from reminder_core.store.delivery_log import PartitionDrop
from reminder_core.worker.loop import TickResult

log = logging.getLogger(__name__)

WEEK = timedelta(days=7)
# SQLSTATEs of a lock not granted in time (lock_not_available) and of a deadlock (the
# other side being a sender's transaction): both mean "again at the next run".
_LOCK_CONFLICT = frozenset({"55P03", "40P01"})

T = TypeVar("T")


class _Busy(Enum):
    """A partition step whose locks were not granted in time: left to the next run."""

    BUSY = "busy"


_BUSY: Literal[_Busy.BUSY] = _Busy.BUSY


class _ChunkDelete(Protocol):
    """A store function deleting at most `limit` expired rows; returns how many."""

    def __call__(self, conn: Connection, *, cutoff: datetime, limit: int) -> int: ...


def week_start(instant: datetime) -> datetime:
    """The Monday 00:00 UTC that starts the ISO week of `instant` (aware), as an aware
    UTC datetime: the lower bound of the delivery_log partition that holds it."""
    day = instant.astimezone(UTC).replace(hour=0, minute=0, second=0, microsecond=0)
    return day - timedelta(days=day.weekday())


@dataclass(frozen=True, slots=True)
class RetentionResult:
    """What one retention run did.

    Attributes:
        partitions_created: weekly delivery_log partitions made.
        rows_moved: rows new partitions took over from the default partition.
        partitions_dropped: expired weekly partitions dropped.
        partitions_kept: expired partitions not dropped, since a `sending` row is in them.
        delivery_log_deleted: expired terminal rows deleted from the default partition.
        outbox_deleted: published outbox rows deleted.
        webhook_events_deleted: webhook events deleted.
        worker_heartbeats_deleted: worker heartbeat rows deleted.
        more: a chunk came back full (rows may be left to delete): run again soon.
    """

    partitions_created: int = 0
    rows_moved: int = 0
    partitions_dropped: int = 0
    partitions_kept: int = 0
    delivery_log_deleted: int = 0
    outbox_deleted: int = 0
    webhook_events_deleted: int = 0
    worker_heartbeats_deleted: int = 0
    more: bool = False

    def counts(self) -> dict[str, int]:
        """The non-zero counts by name (for the maintenance TickResult and logs)."""
        return {k: int(v) for k, v in asdict(self).items() if k != "more" and v}


class Retention:
    """One retention run: partitions ahead, expired partitions, expired rows.

    Args:
        engine: database engine (each step runs in its own short transaction).
        delivery_log_retention_days: DELIVERY_LOG_RETENTION_DAYS.
        partitions_ahead: DELIVERY_LOG_PARTITIONS_AHEAD (weeks after the current one).
        outbox_retention_days: OUTBOX_RETENTION_DAYS (after `published_at`).
        webhook_events_retention_days: WEBHOOK_EVENTS_RETENTION_DAYS (after
            `received_at`); never shorter than `keep_webhook_events_s`.
        keep_webhook_events_s: WEBHOOK_REMATCH_WINDOW_S: unmatched events are matched
            again that long, so none younger is deleted.
        worker_heartbeats_retention_days: WORKER_HEARTBEATS_RETENTION_DAYS (after
            `last_seen_at`).
        batch_size: RETENTION_BATCH_SIZE, rows per DELETE statement.
        max_chunks: most DELETE statements per table per run; more is left to the next
            run (`more`), so one run stays short.
        lock_timeout_s: wait for the locks of partition DDL at most this long (seconds).
        interval_s: RETENTION_INTERVAL_S, seconds between runs.
    """

    name = "retention"

    def __init__(
        self,
        engine: Engine,
        *,
        delivery_log_retention_days: int = 90,
        partitions_ahead: int = 4,
        outbox_retention_days: float = 1.0,
        webhook_events_retention_days: float = 90.0,
        keep_webhook_events_s: float = 0.0,
        worker_heartbeats_retention_days: float = 7.0,
        batch_size: int = 5000,
        max_chunks: int = 10,
        lock_timeout_s: float = 0.5,
        interval_s: float = 600.0,
    ) -> None:
        self._engine = engine
        self.interval_s = interval_s
        self.delivery_log_retention = timedelta(days=delivery_log_retention_days)
        self.partitions_ahead = partitions_ahead
        self.outbox_retention = timedelta(days=outbox_retention_days)
        self.webhook_events_retention = max(
            timedelta(days=webhook_events_retention_days),
            timedelta(seconds=keep_webhook_events_s),
        )
        self.worker_heartbeats_retention = timedelta(days=worker_heartbeats_retention_days)
        self.batch_size = batch_size
        self.max_chunks = max_chunks
        self.lock_timeout_ms = max(1, round(lock_timeout_s * 1000))

    def run_once(self, now: datetime) -> TickResult:
        """One run (`run`) as a maintenance service: its non-zero counts, `more` when a
        chunk came back full."""
        result = self.run(now)
        counts = result.counts()
        return TickResult(processed=sum(counts.values()), more=result.more, counts=counts)

    def run(self, now: datetime) -> RetentionResult:
        """Make the partitions ahead, drop the expired ones, delete expired rows.

        Args:
            now: aware UTC; every cutoff is measured from it.

        Returns:
            The counts of what was done.

        Side effects: DDL on delivery_log partitions and DELETEs, each step committed on
        its own; logs each partition made, dropped or kept; increments
        reminders_retention_partitions_total and reminders_retention_deleted_rows_total.
        A partition step that cannot get its locks in time (or loses a deadlock) is
        logged and left to the next run.

        Raises:
            sqlalchemy.exc.DBAPIError: the database failed otherwise (the maintenance
                tick fails and its loop backs off).
        """
        created, moved = self.ensure_partitions(now)
        dropped, kept = self.drop_expired_partitions(now)
        cutoff = now - self.delivery_log_retention
        deleted = {
            "delivery_log": self._delete_chunks(
                delivery_log.delete_expired_default, "delivery_log", cutoff
            ),
            "outbox": self._delete_chunks(
                outbox.delete_published, "outbox", now - self.outbox_retention
            ),
            "webhook_events": self._delete_chunks(
                webhook_events.delete_expired,
                "webhook_events",
                now - self.webhook_events_retention,
            ),
            "worker_heartbeats": self._delete_chunks(
                worker_heartbeats.delete_expired,
                "worker_heartbeats",
                now - self.worker_heartbeats_retention,
            ),
        }
        result = RetentionResult(
            partitions_created=created,
            rows_moved=moved,
            partitions_dropped=dropped,
            partitions_kept=kept,
            delivery_log_deleted=deleted["delivery_log"][0],
            outbox_deleted=deleted["outbox"][0],
            webhook_events_deleted=deleted["webhook_events"][0],
            worker_heartbeats_deleted=deleted["worker_heartbeats"][0],
            more=any(full for _, full in deleted.values()),
        )
        if result.counts():
            log.info("retention: %s", result.counts(), extra={"retention": result.counts()})
        return result

    def partitions(self) -> dict[datetime, float]:
        """The weekly partitions of delivery_log: week start (aware UTC) -> PostgreSQL's
        row estimate (-1: unknown). The default partition is not listed."""
        with self._engine.connect() as conn:
            listed = delivery_log.list_partitions(conn)
        return {p.week_start: p.estimated_rows for p in listed if p.week_start is not None}

    def ensure_partitions(self, now: datetime) -> tuple[int, int]:
        """Make the missing partitions of the current week and the `partitions_ahead`
        weeks after it; returns (partitions made, rows taken over from the default)."""
        first = week_start(now)
        wanted = [first + WEEK * k for k in range(self.partitions_ahead + 1)]
        existing = self.partitions()
        created = moved = 0
        for start in wanted:
            if start in existing:
                continue
            n = self._partition_ddl(
                "delivery_create_partition",
                start,
                partial(delivery_log.create_partition, week_start=start),
            )
            if n is _BUSY or n is None:  # None: another maintenance process made it
                continue
            created += 1
            moved += n
            RETENTION_PARTITIONS.labels(action="created").inc()
            log.info(
                "made the delivery_log partition of the week of %s (%d rows taken over from"
                " the default partition)",
                start.date(),
                n,
            )
        return created, moved

    def drop_expired_partitions(self, now: datetime) -> tuple[int, int]:
        """Drop each partition whose whole week is older than the retention period and
        that holds no `sending` row; returns (dropped, kept because of a `sending` row)."""
        cutoff = now - self.delivery_log_retention
        dropped = kept = 0
        for start, estimate in self.partitions().items():
            if start + WEEK > cutoff:
                continue
            outcome = self._partition_ddl(
                "delivery_drop_partition",
                start,
                partial(delivery_log.drop_partition, week_start=start, cutoff=cutoff),
            )
            if outcome is PartitionDrop.DROPPED:
                dropped += 1
                RETENTION_PARTITIONS.labels(action="dropped").inc()
                log.info(
                    "dropped the delivery_log partition of the week of %s (~%s rows)",
                    start.date(),
                    f"{estimate:.0f}" if estimate >= 0 else "?",
                )
            elif outcome is PartitionDrop.KEPT:
                kept += 1
                RETENTION_PARTITIONS.labels(action="kept").inc()
                log.warning(
                    "expired delivery_log partition of the week of %s kept: it holds a"
                    " `sending` row (in flight; abandoned ones are failed by the reaper)",
                    start.date(),
                )
        return dropped, kept

    def _partition_ddl(
        self, name: str, week: datetime, step: Callable[[Connection], T]
    ) -> T | Literal[_Busy.BUSY]:
        """Run the partition step `step` (the statement `name`, on the partition of the
        week starting at `week`) in its own transaction under the lock timeout; its
        result, or `_BUSY` when its locks were not granted in time (or it lost a
        deadlock): logged, and left to the next run."""
        try:
            with self._engine.begin() as conn:
                transaction.set_lock_timeout(conn, timeout_ms=self.lock_timeout_ms)
                return step(conn)
        except OperationalError as exc:
            if getattr(exc.orig, "sqlstate", None) not in _LOCK_CONFLICT:
                raise
            log.warning(
                "%s of the week of %s: locks busy; again at the next run", name, week.date()
            )
            return _BUSY

    def _delete_chunks(
        self, delete: _ChunkDelete, table: str, cutoff: datetime
    ) -> tuple[int, bool]:
        """Run the chunked DELETE `delete` until a chunk is short or `max_chunks` ran;
        returns (rows deleted, last chunk full)."""
        total = 0
        full = False
        for _ in range(self.max_chunks):
            with self._engine.begin() as conn:
                n = delete(conn, cutoff=cutoff, limit=self.batch_size)
            total += n
            full = n >= self.batch_size
            if not full:
                break
        if total:
            RETENTION_DELETED.labels(table=table).inc(total)
        return total, full
