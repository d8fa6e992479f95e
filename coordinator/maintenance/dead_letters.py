"""Dead-letter recorder: a dead-lettered message's occurrence is recorded `failed`, a
recurring reminder moves to its next occurrence and a one-time one becomes `failed`. The
message stays in the dead-letter queue for `reminders dlq list|replay|purge`. A dead
letter whose occurrence a worker is still sending under a live lease is a duplicate of
the message that worker holds: it is recorded only once the lease has ended (by then
usually as a no-op, the occurrence being `sent`), never by overwriting the live row."""

from __future__ import annotations

import logging
from datetime import datetime, timedelta

from sqlalchemy import Connection, Engine

from coordinator.maintenance.base import counted
from reminder_core.errors import InfrastructureError
from reminder_core.logging import delivery_fields
from reminder_core.messages import MalformedMessage, OccurrenceMessage
from reminder_core.profiles import Profile, ProfileSource
from reminder_core.queue import DeadLetter, PostgresQueue, Queue
from reminder_core.scheduling import ScheduleConfig, zone_or_none
from reminder_core.services import reminders as reminder_services
from reminder_core.store import delivery_log, queue_messages, reminders
from reminder_core.worker.loop import TickResult

log = logging.getLogger(__name__)


class DeadLetterRecorder:
    """Records new dead letters' occurrences as failed.

    Args:
        engine: database engine.
        queue: the queue whose dead letters are recorded.
        profiles: for the zone of reminders that follow their user's profile.
        schedule_config: recurrence limits (a recurring reminder's next occurrence).
        lease_s: DELIVERY_LEASE_S; a `sending` row locked more recently is held by a live
            worker.
        batch_size: most letters per run.
        interval_s: seconds between runs.
    """

    name = "dead_letters"

    def __init__(
        self,
        engine: Engine,
        queue: Queue,
        profiles: ProfileSource,
        *,
        schedule_config: ScheduleConfig,
        lease_s: float,
        batch_size: int,
        interval_s: float,
    ) -> None:
        self._engine = engine
        self._queue = queue
        self._profiles = profiles
        self.schedule_config = schedule_config
        self.lease_s = lease_s
        self.batch_size = batch_size
        self.interval_s = interval_s

    def run_once(self, now: datetime) -> TickResult:
        """Record each new dead letter (`record`); counts {"dead_letters": n}."""
        return counted(self.name, self.record(now), self.batch_size)

    def record(self, now: datetime) -> int:
        """Record each new dead letter's occurrence as failed and move its reminder on,
        each in its own transaction, then mark the letters recorded in the queue; returns
        how many were recorded (those held by a live lease, or whose user's profile could
        not be read, wait for a later run)."""
        letters = self._queue.dead_letters(limit=self.batch_size, unrecorded_only=True)
        recorded = [d.message_id for d in letters if self._record(d, now)]
        self._queue.mark_dead_letters_recorded(recorded, now=now)
        return len(recorded)

    def _record(self, letter: DeadLetter, now: datetime) -> bool:
        """Record one dead letter; False when it must wait for a later run."""
        try:
            occurrence = OccurrenceMessage.decode(letter.body)
        except MalformedMessage:
            log.error(
                "dead letter %s has a malformed body: %r", letter.message_id, letter.body,
                extra=delivery_fields(
                    None, None, letter.receive_count, None, message_id=letter.message_id
                ),
            )  # fmt: skip
            return True
        reminder_id, run_time = occurrence.key
        fields = delivery_fields(
            reminder_id, run_time, letter.receive_count, None, message_id=letter.message_id
        )
        try:
            profile = self._profiles.get(occurrence.user_id)
        except InfrastructureError as exc:
            # Its zone is needed to move a recurring reminder on: try again next run,
            # without holding up the other letters.
            log.warning(
                "dead letter %s: profile of %r unavailable (%s); recorded at a later tick",
                letter.message_id, occurrence.user_id, exc, extra=fields,
            )  # fmt: skip
            return False
        with self._engine.begin() as conn:
            if self._held_live(conn, occurrence, now):
                log.info(
                    "dead letter %s: %s/%s is still on its way (lease or live copy); not recorded",
                    letter.message_id, reminder_id, run_time.isoformat(), extra=fields,
                )  # fmt: skip
                return False
            error = f"dead-lettered after {letter.receive_count} receives"
            ended = self._fail(conn, occurrence, profile, error, now)
        self._log_recorded(letter, occurrence, ended, error, fields)
        return True

    def _held_live(self, conn: Connection, occurrence: OccurrenceMessage, now: datetime) -> bool:
        """The occurrence is still on its way: a delivery row under a live lease, or, on
        the PostgreSQL queue, a live copy of its message (re-driven by the claim rescuer
        after this letter died: a first send without a lease has no row meanwhile)."""
        reminder_id, run_time = occurrence.key
        held = delivery_log.lock_held_live(
            conn,
            reminder_id=reminder_id,
            run_time_utc=run_time,
            lease_cutoff=now - timedelta(seconds=self.lease_s),
        )
        if held:
            return True
        if not isinstance(self._queue, PostgresQueue) or not self._queue.in_database_of(
            self._engine
        ):
            return False
        live = queue_messages.count_live_copies(
            conn, queue=self._queue.name, reminder_id=reminder_id, run_time_utc=run_time
        )
        return live > 0

    def _fail(
        self,
        conn: Connection,
        occurrence: OccurrenceMessage,
        profile: Profile | None,
        error: str,
        now: datetime,
    ) -> bool:
        """Record the occurrence (and any chosen after it) failed and move the reminder
        on; True when a delivery row was ended here."""
        reminder_id, run_time = occurrence.key
        written = delivery_log.fail_dead_letter(
            conn, reminder_id=reminder_id, user_id=occurrence.user_id, run_time_utc=run_time,
            error=error, now=now,
        )  # fmt: skip
        failed = written is not None
        # The reminder's last_error names the cause too, not only the receive count (a
        # read-only MAIL_DIR said "dead-lettered after 5 receives", trial helper-53).
        last = (written or "").removesuffix(f"; {error}")
        cause = f"{error}; last error: {last}" if last and last != written else error
        chosen = delivery_log.fail_chosen_after(
            conn, reminder_id=reminder_id, run_time_utc=run_time, error=error, now=now
        )
        timezone = reminders.get_timezone(conn, reminder_id=reminder_id)
        reminder_services.advance(
            conn,
            reminder_id=reminder_id,
            occurrence_utc=run_time,
            zone=zone_or_none(timezone, profile),
            after=max([run_time, *chosen]),
            sent=False,
            error=cause,
            now=now,
            config=self.schedule_config,
        )
        return bool(failed or chosen)

    @staticmethod
    def _log_recorded(
        letter: DeadLetter,
        occurrence: OccurrenceMessage,
        ended: bool,
        error: str,
        fields: dict[str, object],
    ) -> None:
        reminder_id, run_time = occurrence.key
        if ended:
            log.error(
                "occurrence %s/%s failed: %s", reminder_id, run_time.isoformat(), error,
                extra={**fields, "error": error},
            )  # fmt: skip
        else:
            log.info(
                "dead letter %s: %s/%s already ended; nothing to record",
                letter.message_id, reminder_id, run_time.isoformat(), extra=fields,
            )  # fmt: skip
