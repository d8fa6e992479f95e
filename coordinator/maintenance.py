"""Maintenance workload: reapers and dead-letter recording (DESIGN §4.4).

- Reminders stuck in `claimed` past `claim_timeout_s` go back to `pending` with the same
  next_run_utc (re-driven; the unique delivery row keeps this safe).
- `sending` delivery rows that no worker holds and that their reminder will not come back
  to are recorded `failed` ("abandoned").
- Dead-lettered messages: the occurrence is recorded `failed`, a recurring reminder moves
  to its next occurrence and a one-time one becomes `failed`. The message stays in the
  dead-letter queue for `reminders dlq list|replay|purge`. A dead letter whose occurrence
  a worker is still sending under a live lease is a duplicate of the message that worker
  holds: it is recorded only once the lease has ended (by then usually as a no-op, the
  occurrence being `sent`), never by overwriting the live `sending` row.
- Reminders paused by a suppression (DESIGN §4.8) resume when their user's profile
  address changed to one not suppressed, or their entry was removed: each is checked
  every `suppression_recheck_s` (just-paused ones at the next tick).
- Bounce and complaint events whose message id matched no delivery (the webhook beat the
  sender's commit) are matched again for `rematch_window_s` and applied once they match.
- The backlog gauges (next_run_lag_seconds, outbox, queue and DLQ depth, ...) are
  computed here, once per tick, rather than by every pod on every scrape.
- Retention (`coordinator.retention`): every `retention_interval_s`, delivery_log
  partitions made ahead and expired ones dropped, expired rows deleted in chunks.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from datetime import datetime, timedelta

from sqlalchemy import Engine

from coordinator.retention import Retention, RetentionResult
from reminder_core.backlog import refresh_backlog_gauges
from reminder_core.db.queries import query
from reminder_core.delivery import advance_reminder, zone_or_none
from reminder_core.domain.states import DeliveryStatus
from reminder_core.errors import InfrastructureError
from reminder_core.logging import delivery_fields
from reminder_core.messages import MalformedMessage, OccurrenceMessage
from reminder_core.profiles import ProfileSource
from reminder_core.queue import DeadLetter, Queue
from reminder_core.scheduling import ScheduleConfig
from reminder_core.suppression import recheck_paused, rematch_unmatched
from reminder_core.worker.loop import TickResult

log = logging.getLogger(__name__)


class MaintenanceStepFailed(InfrastructureError):
    """One or more maintenance steps failed while the others ran.

    Attributes:
        failures: (step name, exception) per failed step, in order.
        counts: what the steps that ran did (as in a TickResult).
    """

    def __init__(self, failures: list[tuple[str, Exception]], counts: dict[str, int]) -> None:
        names = ", ".join(f"{name}: {exc}" for name, exc in failures)
        super().__init__(f"maintenance steps failed ({names})")
        self.failures = failures
        self.counts = counts


class Maintenance:
    """One tick reaps stuck claims, abandoned deliveries and new dead letters.

    Args:
        engine: database engine.
        queue: the queue whose dead letters are recorded.
        profiles: for the zone of reminders that follow their user's profile.
        schedule_config: recurrence limits.
        claim_timeout_s: a claim older than this is re-driven (> the longest retry
            horizon: max receives x (visibility timeout + backoff)).
        abandon_after_s: an unheld `sending` row older than this may be abandoned.
        lease_s: DELIVERY_LEASE_S; a `sending` row locked more recently is held by a live
            worker.
        batch_size: most rows of each kind per tick.
        suppression_recheck_s: SUPPRESSION_RECHECK_INTERVAL_S.
        rematch_window_s: WEBHOOK_REMATCH_WINDOW_S (0: no rematching).
        retention: the retention step (None: no retention, e.g. in tests of the reapers).
        retention_interval_s: RETENTION_INTERVAL_S, seconds between retention runs (the
            first tick runs one; a run that left rows to delete is followed at once).
    """

    name = "maintenance"

    def __init__(
        self,
        engine: Engine,
        queue: Queue,
        profiles: ProfileSource,
        *,
        schedule_config: ScheduleConfig,
        claim_timeout_s: float,
        abandon_after_s: float,
        lease_s: float = 120.0,
        batch_size: int = 500,
        suppression_recheck_s: float = 300.0,
        rematch_window_s: float = 3600.0,
        retention: Retention | None = None,
        retention_interval_s: float = 600.0,
    ) -> None:
        self._engine = engine
        self._queue = queue
        self._profiles = profiles
        self.schedule_config = schedule_config
        self.claim_timeout_s = claim_timeout_s
        self.abandon_after_s = abandon_after_s
        self.lease_s = lease_s
        self.batch_size = batch_size
        self.suppression_recheck_s = suppression_recheck_s
        self.rematch_window_s = rematch_window_s
        self.retention = retention
        self.retention_interval_s = retention_interval_s
        self._retention_due_at: datetime | None = None

    def run_once(self, now: datetime) -> TickResult:
        """One pass of every reaper, then the backlog gauges
        (`reminder_core.backlog.refresh_backlog_gauges`), then retention when due; counts
        per kind."""
        # Dead letters first: their reminders are claimed too, and must move on rather
        # than be re-driven for another round of failing sends. Each step runs even when
        # an earlier one failed (a profile service outage must not stop the reapers, the
        # gauges or retention); the failures are raised together at the end, so the loop
        # still counts the tick as failed and backs off.
        failures: list[tuple[str, Exception]] = []

        def step(name: str, run: Callable[[datetime], int]) -> int:
            try:
                return run(now)
            except Exception as exc:
                log.exception("maintenance step %s failed; the other steps go on", name)
                failures.append((name, exc))
                return 0

        counts = {
            "dead_letters": step("dead_letters", self.record_dead_letters),
            "reclaimed": step("reclaimed", self.reap_claimed),
            "abandoned": step("abandoned", self.abandon_sending),
            "rematched": step("rematched", self.rematch_events),
            "suppression_resumed": step("suppression_resumed", self.resume_suppressed),
        }
        counts = {k: v for k, v in counts.items() if v}
        more = any(v >= self.batch_size for v in counts.values())

        def gauges(at: datetime) -> int:
            refresh_backlog_gauges(self._engine, self._queue, at)
            return 0

        step("gauges", gauges)
        retention = RetentionResult()

        def retain(at: datetime) -> int:
            nonlocal retention
            retention = self.run_retention(at)
            return 0

        step("retention", retain)
        counts.update(retention.counts())
        more = more or retention.more
        if failures:
            raise MaintenanceStepFailed(failures, counts)
        return TickResult(processed=sum(counts.values()), more=more, counts=counts)

    def run_retention(self, now: datetime) -> RetentionResult:
        """Run the retention step if it is due; returns what it did (empty when not due
        or not configured). See `coordinator.retention.Retention.run` for its effects."""
        if self.retention is None or (
            self._retention_due_at is not None and now < self._retention_due_at
        ):
            return RetentionResult()
        result = self.retention.run(now)
        self._retention_due_at = (
            now if result.more else now + timedelta(seconds=self.retention_interval_s)
        )
        return result

    def reap_claimed(self, now: datetime) -> int:
        """Re-drive reminders claimed more than `claim_timeout_s` ago; returns how many."""
        with self._engine.begin() as conn:
            rows = conn.execute(
                query("reap_claimed"),
                {
                    "cutoff": now - timedelta(seconds=self.claim_timeout_s),
                    "now": now,
                    "limit": self.batch_size,
                },
            ).all()
        if rows:
            log.warning("re-drove %d reminders stuck in claimed", len(rows))
        for row in rows:
            log.info(
                "delivery re-driven: claimed for too long",
                extra=delivery_fields(row.id, row.next_run_utc, None, None),
            )
        return len(rows)

    def abandon_sending(self, now: datetime) -> int:
        """Record unheld, orphaned `sending` rows as failed (as sent when the provider's
        feedback reported it accepted the email); returns how many."""
        with self._engine.begin() as conn:
            rows = conn.execute(
                query("abandon_sending"),
                {
                    "cutoff": now - timedelta(seconds=self.abandon_after_s),
                    "now": now,
                    "limit": self.batch_size,
                },
            ).all()
        failed = sum(1 for row in rows if row.status == DeliveryStatus.FAILED)
        if failed:
            log.warning("recorded %d abandoned deliveries as failed", failed)
        for row in rows:
            log.info(
                "delivery abandoned: recorded failed"
                if row.status == DeliveryStatus.FAILED
                else "delivery abandoned: recorded sent (the provider reported it accepted)",
                extra=delivery_fields(
                    row.reminder_id, row.run_time_utc, None, row.provider,
                    provider_calls=row.attempt_count,
                ),
            )  # fmt: skip
        return len(rows)

    def rematch_events(self, now: datetime) -> int:
        """Apply unmatched bounce/complaint events whose delivery now exists; returns how
        many (see `reminder_core.suppression.rematch_unmatched`)."""
        if self.rematch_window_s <= 0:
            return 0
        with self._engine.begin() as conn:
            return rematch_unmatched(
                conn,
                now=now,
                since=now - timedelta(seconds=self.rematch_window_s),
                limit=self.batch_size,
            )

    def resume_suppressed(self, now: datetime) -> int:
        """Resume reminders paused by a suppression whose address changed or whose entry
        was removed; returns how many (see `reminder_core.suppression.recheck_paused`)."""
        return recheck_paused(
            self._engine,
            self._profiles,
            now=now,
            recheck_interval_s=self.suppression_recheck_s,
            limit=self.batch_size,
            config=self.schedule_config,
        ).resumed

    def record_dead_letters(self, now: datetime) -> int:
        """Record each new dead letter's occurrence as failed and move its reminder on;
        returns how many were recorded (those held by a live lease wait for a later tick)."""
        letters = self._queue.dead_letters(limit=self.batch_size, unrecorded_only=True)
        recorded = [d.message_id for d in letters if self._record(d, now)]
        self._queue.mark_dead_letters_recorded(recorded, now=now)
        return len(recorded)

    def _record(self, letter: DeadLetter, now: datetime) -> bool:
        """Record one dead letter; False when its occurrence is held by a live lease."""
        try:
            occurrence = OccurrenceMessage.decode(letter.body)
        except MalformedMessage:
            log.error(
                "dead letter %s has a malformed body: %r",
                letter.message_id,
                letter.body,
                extra=delivery_fields(
                    None, None, letter.receive_count, None, message_id=letter.message_id
                ),
            )
            return True
        reminder_id, run_time = occurrence.key
        user_id = occurrence.user_id
        error = f"dead-lettered after {letter.receive_count} receives"
        fields = delivery_fields(
            reminder_id, run_time, letter.receive_count, None, message_id=letter.message_id
        )
        try:
            profile = self._profiles.get(user_id)
        except InfrastructureError as exc:
            # Its zone is needed to move a recurring reminder on: try again next tick,
            # without holding up the other letters.
            log.warning(
                "dead letter %s: profile of %r unavailable (%s); recorded at a later tick",
                letter.message_id,
                user_id,
                exc,
                extra=fields,
            )
            return False
        with self._engine.begin() as conn:
            held = conn.execute(
                query("delivery_held_live"),
                {
                    "reminder_id": reminder_id,
                    "run_time_utc": run_time,
                    "lease_cutoff": now - timedelta(seconds=self.lease_s),
                },
            ).first()
            if held is not None:
                log.info(
                    "dead letter %s: %s/%s is being sent under a live lease; not recorded yet",
                    letter.message_id,
                    reminder_id,
                    run_time.isoformat(),
                    extra=fields,
                )
                return False
            failed = conn.execute(
                query("fail_dead_letter"),
                {
                    "reminder_id": reminder_id,
                    "user_id": user_id,
                    "run_time_utc": run_time,
                    "error": error,
                    "now": now,
                },
            ).rowcount
            chosen = (
                conn.execute(
                    query("fail_chosen_after"),
                    {
                        "reminder_id": reminder_id,
                        "run_time_utc": run_time,
                        "error": error,
                        "now": now,
                    },
                )
                .scalars()
                .all()
            )
            timezone = conn.execute(
                query("reminder_for_send"), {"reminder_id": reminder_id}
            ).one_or_none()
            zone = zone_or_none(timezone.timezone if timezone else None, profile)
            advance_reminder(
                conn,
                reminder_id=reminder_id,
                occurrence_utc=run_time,
                zone=zone,
                after=max([run_time, *chosen]),
                sent=False,
                error=error,
                now=now,
                config=self.schedule_config,
            )
        if failed or chosen:
            log.error(
                "occurrence %s/%s failed: %s",
                reminder_id,
                run_time.isoformat(),
                error,
                extra={**fields, "error": error},
            )
        else:
            log.info(
                "dead letter %s: %s/%s already ended; nothing to record",
                letter.message_id,
                reminder_id,
                run_time.isoformat(),
                extra=fields,
            )
        return True
