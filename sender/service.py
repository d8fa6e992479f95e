"""Deliver queued occurrences: one `delivery_log` row per occurrence, sent once."""

from __future__ import annotations

import logging
import threading
import uuid
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import datetime, timedelta
from enum import StrEnum
from typing import Any
from zoneinfo import ZoneInfo

from sqlalchemy import Connection, Engine, Row
from tenacity import Retrying, retry_if_exception_type

from reminder_core.clock import utcnow
from reminder_core.db.queries import query
from reminder_core.delivery import (
    advance_reminder,
    record_terminal,
    schedule_of_row,
    zone_or_none,
)
from reminder_core.domain.localtime import idempotency_key
from reminder_core.domain.misfire import MisfirePlan, plan_misfire
from reminder_core.domain.recurrence import occurrences_between
from reminder_core.domain.retry import RetryPolicy, next_wait_s, requeue_delay_s, should_stop
from reminder_core.domain.states import DeliveryStatus, ReminderStatus
from reminder_core.errors import (
    InfrastructureError,
    InvalidSchedule,
    PermanentDeliveryError,
    TransientDeliveryError,
)
from reminder_core.metrics import DELIVERY_LAG, SENDS
from reminder_core.profiles import Profile, ProfileSource
from reminder_core.queue import Message, Queue
from reminder_core.scheduling import ScheduleConfig
from reminder_core.worker.loop import TickResult
from sender.providers.base import OutgoingEmail, Provider
from sender.render import Renderer

log = logging.getLogger(__name__)


class ShutdownRequested(Exception):
    """The process is stopping: abandon the wait and hand the message back."""


class Outcome(StrEnum):
    """What handling one message led to."""

    SENT = "sent"  # delivered now
    DUPLICATE = "duplicate"  # the occurrence was already terminal; message dropped
    CANCELLED = "cancelled"  # reminder cancelled or rescheduled since the claim
    FAILED = "failed"  # permanent error, recorded
    RETRY = "retry"  # transient error; the message comes back after a backoff
    MISSED = "missed"  # too late under the misfire policy; recorded, not sent
    BUSY = "busy"  # another worker holds a live lease on the occurrence
    DROPPED = "dropped"  # malformed message or unknown reminder


@dataclass(frozen=True, slots=True)
class Occurrence:
    """The message body: which occurrence of which reminder is due."""

    reminder_id: uuid.UUID
    run_time_utc: datetime
    user_id: str
    version: int
    replay: bool = False  # redriven from the dead-letter queue by `reminders dlq replay`

    @classmethod
    def from_body(cls, body: dict[str, Any]) -> Occurrence:
        """Parse a queue message body.

        Raises:
            ValueError: a field is missing or malformed (the message is poison).
        """
        try:
            run_time = datetime.fromisoformat(str(body["run_time_utc"]))
            if run_time.tzinfo is None:
                raise ValueError("run_time_utc has no offset")
            return cls(
                reminder_id=uuid.UUID(str(body["reminder_id"])),
                run_time_utc=run_time,
                user_id=str(body["user_id"]),
                version=int(body["version"]),
                replay=body.get("replay") is True,
            )
        except (KeyError, TypeError) as exc:
            raise ValueError(f"malformed message body: {exc!r}") from exc


class Sender:
    """Receives occurrences and delivers each at most once per idempotency key.

    Per message (DESIGN §4): re-read the reminder (a cancel, pause or reschedule wins);
    apply the misfire policy to what is already due (record older occurrences `missed`);
    insert the unique delivery row as `sending` with a lease, or take over an expired one;
    render at send time; call the provider outside any transaction; complete the row
    (fenced by the lease token) and move the reminder to its next occurrence, computed in
    the zone in force now, in one transaction; then delete the message.

    Args:
        engine: database engine.
        queue: where occurrences arrive.
        profiles: the user's address and timezone, read for every send.
        renderer: email templates.
        provider: where emails go.
        mail_from: From header.
        visibility_timeout_s: how long a received message stays hidden.
        lease_s: a `sending` row older than this is taken over by the next receiver.
        schedule_config: recurrence limits and the all-day fire time.
        retry: in-process retries of transient provider errors (DESIGN §4.6).
        stop: set on shutdown: messages not started are handed back, retry waits end.
        batch_size: messages per receive (<= 10, as SQS).
        clock: current time for instants taken after a send (sent_at); aware UTC.

    While a message is being worked on, a heartbeat thread extends its visibility timeout
    and the lease of its delivery row every `visibility_timeout_s / 3` seconds, so a slow
    send is neither taken over nor dead-lettered (DESIGN §4.3). The messages of the batch
    still waiting behind it are extended too: otherwise they would be received again by
    other senders and burn receives toward the dead-letter queue without being attempted.
    """

    name = "sender"

    def __init__(
        self,
        engine: Engine,
        queue: Queue,
        profiles: ProfileSource,
        renderer: Renderer,
        provider: Provider,
        *,
        mail_from: str,
        visibility_timeout_s: float,
        lease_s: float,
        schedule_config: ScheduleConfig,
        retry: RetryPolicy | None = None,
        stop: threading.Event | None = None,
        batch_size: int = 10,
        clock: Callable[[], datetime] = utcnow,
    ) -> None:
        self._engine = engine
        self._queue = queue
        self._profiles = profiles
        self._renderer = renderer
        self._provider = provider
        self.mail_from = mail_from
        self.visibility_timeout_s = visibility_timeout_s
        self.lease_s = lease_s
        self.schedule_config = schedule_config
        self.batch_size = batch_size
        self.retry = retry or RetryPolicy()
        self._stop = stop or threading.Event()
        self._clock = clock
        self._inflight: dict[str, tuple[uuid.UUID, uuid.UUID] | None] = {}
        self._inflight_lock = threading.Lock()
        self._heartbeat: threading.Thread | None = None
        self._heartbeat_stop = threading.Event()

    def run_once(self, now: datetime) -> TickResult:
        """Receive one batch and handle each message; returns counts per outcome.

        On shutdown (the stop event), messages not yet started are handed back to the
        queue at once (visibility 0) instead of waiting out their visibility timeout.
        """
        self._ensure_heartbeat()
        messages = self._queue.receive(
            now=now, max_messages=self.batch_size, visibility_timeout_s=self.visibility_timeout_s
        )
        counts: dict[str, int] = {}
        # The whole batch is held from the receive on: the heartbeat extends the messages
        # waiting behind a slow send too, so they are not received again (by this or
        # another sender) and do not burn receives toward the dead-letter queue.
        with self._tracking(messages):
            for i, message in enumerate(messages):
                if self._stop.is_set():
                    self._untrack(messages[i:])
                    for left in messages[i:]:
                        self._queue.change_visibility(
                            left.receipt_handle, now=self._clock(), timeout_s=0
                        )
                    counts["released"] = len(messages) - i
                    break
                try:
                    outcome = self.handle(message, self._clock())
                finally:
                    self._untrack([message])
                counts[outcome.value] = counts.get(outcome.value, 0) + 1
        return TickResult(
            processed=len(messages), more=len(messages) >= self.batch_size, counts=counts
        )

    # --- heartbeat -----------------------------------------------------------------

    @contextmanager
    def _tracking(self, messages: list[Message]) -> Iterator[None]:
        """Hold `messages` (heartbeat extends them) until each is untracked or the block
        ends (an error mid-batch: the rest come back after their visibility timeout)."""
        with self._inflight_lock:
            for message in messages:
                self._inflight[message.receipt_handle] = None
        try:
            yield
        finally:
            self._untrack(messages)

    def _untrack(self, messages: list[Message]) -> None:
        with self._inflight_lock:
            for message in messages:
                self._inflight.pop(message.receipt_handle, None)

    def _hold(self, message: Message, delivery_id: uuid.UUID, lease_token: uuid.UUID) -> None:
        with self._inflight_lock:
            if message.receipt_handle in self._inflight:
                self._inflight[message.receipt_handle] = (delivery_id, lease_token)

    def _ensure_heartbeat(self) -> None:
        if self._heartbeat is None or not self._heartbeat.is_alive():
            self._heartbeat = threading.Thread(
                target=self._beat, name=f"{self.name}-heartbeat", daemon=True
            )
            self._heartbeat.start()

    def _beat(self) -> None:
        interval = self.visibility_timeout_s / 3
        while not self._heartbeat_stop.wait(interval):
            try:
                self.heartbeat(self._clock())
            except Exception:
                log.exception("heartbeat failed; will retry")

    def heartbeat(self, now: datetime) -> int:
        """Extend the visibility timeout of every message in flight and the lease of its
        delivery row; returns how many messages were extended."""
        with self._inflight_lock:
            held = list(self._inflight.items())
        for handle, lease in held:
            self._queue.change_visibility(handle, now=now, timeout_s=self.visibility_timeout_s)
            if lease is not None:
                with self._engine.begin() as conn:
                    conn.execute(
                        query("delivery_heartbeat"),
                        {"id": lease[0], "lease_token": lease[1], "now": now},
                    )
        return len(held)

    def close(self) -> None:
        """Stop the heartbeat thread."""
        self._heartbeat_stop.set()

    def handle(self, message: Message, now: datetime) -> Outcome:
        """Handle one received message; see the class docstring for the steps.

        Side effects: delivery_log and reminders rows, the provider call, the message's
        deletion or visibility change. Never raises for a per-message problem; an
        infrastructure error (database down) propagates and the message comes back after
        its visibility timeout.
        """
        try:
            occ = Occurrence.from_body(message.body)
        except ValueError:
            log.error("dropping malformed message %s: %r", message.message_id, message.body)
            self._queue.delete([message.receipt_handle])
            return Outcome.DROPPED
        try:
            profile = self._profiles.get(occ.user_id)
        except InfrastructureError as exc:
            return self._retry_later(message, None, None, exc)

        lease_token = uuid.uuid4()
        busy_for: float | None = None
        chosen: datetime | None = None
        delivery_id: uuid.UUID | None = None
        with self._engine.begin() as conn:
            reminder = conn.execute(
                query("reminder_for_send"), {"reminder_id": occ.reminder_id}
            ).one_or_none()
            if reminder is None:
                log.error("dropping message for unknown reminder %s", occ.reminder_id)
                outcome = Outcome.DROPPED
            elif occ.replay and reminder.status in (
                ReminderStatus.CANCELLED,
                ReminderStatus.PAUSED,
            ):
                conn.execute(
                    query("delivery_cancel_replay"),
                    {
                        "reminder_id": occ.reminder_id,
                        "run_time_utc": occ.run_time_utc,
                        "error": f"replay skipped: reminder is {reminder.status}",
                        "now": now,
                    },
                )
                outcome = Outcome.CANCELLED
            elif not occ.replay and not _still_due(reminder, occ):
                recorded = record_terminal(
                    conn,
                    reminder_id=occ.reminder_id,
                    user_id=occ.user_id,
                    run_time_utc=occ.run_time_utc,
                    status=DeliveryStatus.CANCELLED,
                    error=f"superseded: reminder is {reminder.status}",
                    now=now,
                )
                # No row recorded: the occurrence already has one (e.g. `sent`, and this
                # message is a duplicate of the one that sent it).
                outcome = Outcome.CANCELLED if recorded else Outcome.DUPLICATE
            else:
                zone = zone_or_none(reminder.timezone, profile)
                plan = (
                    MisfirePlan(send=occ.run_time_utc, missed=())
                    if occ.replay  # a replay sends exactly the occurrence it names
                    else self._plan(conn, reminder, occ, zone, now)
                )
                for missed in plan.missed:
                    record_terminal(
                        conn,
                        reminder_id=occ.reminder_id,
                        user_id=occ.user_id,
                        run_time_utc=missed,
                        status=DeliveryStatus.MISSED,
                        error=f"missed: {(now - missed).total_seconds():.0f} s late, "
                        f"misfire policy {reminder.misfire_policy}",
                        now=now,
                    )
                chosen = plan.send
                if chosen is None:
                    self._advance(conn, occ, zone, after=now, sent=True, error=None, now=now)
                    outcome = Outcome.MISSED
                else:
                    taken = conn.execute(
                        query("delivery_begin"),
                        {
                            "reminder_id": occ.reminder_id,
                            "user_id": reminder.user_id,
                            "run_time_utc": chosen,
                            "now": now,
                            "lease_token": lease_token,
                            "lease_expired_before": now - timedelta(seconds=self.lease_s),
                        },
                    ).one_or_none()
                    if taken is None:
                        status = conn.execute(
                            query("delivery_status"),
                            {"reminder_id": occ.reminder_id, "run_time_utc": chosen},
                        ).scalar_one_or_none()
                        if status == DeliveryStatus.SENDING:
                            outcome = Outcome.BUSY
                            busy_for = conn.execute(
                                query("delivery_lease_left"),
                                {
                                    "reminder_id": occ.reminder_id,
                                    "run_time_utc": chosen,
                                    "lease_s": self.lease_s,
                                    "now": now,
                                },
                            ).scalar_one_or_none()
                        else:
                            # Already terminal, yet the reminder still points here (e.g.
                            # re-driven after a crash): move it on instead of looping.
                            outcome = Outcome.DUPLICATE
                            self._advance(
                                conn, occ, zone, after=chosen, error=None, now=now,
                                sent=status in (DeliveryStatus.SENT, DeliveryStatus.BOUNCED,
                                                DeliveryStatus.COMPLAINED),
                            )  # fmt: skip
                    else:
                        delivery_id = taken.id
                        outcome = Outcome.SENT  # provisional: we hold the lease
        if outcome is not Outcome.SENT:
            if outcome is Outcome.BUSY:
                # Another worker holds the occurrence: come back when its lease ends (not
                # at every visibility timeout, which would burn receives toward the DLQ).
                if busy_for is not None:
                    self._queue.change_visibility(
                        message.receipt_handle, now=now, timeout_s=float(busy_for) + 1
                    )
            else:
                self._queue.delete([message.receipt_handle])
            SENDS.labels(provider=self._provider.name, outcome=outcome.value).inc()
            return outcome
        assert reminder is not None
        assert chosen is not None
        assert delivery_id is not None
        return self._deliver(message, occ, reminder, profile, chosen, delivery_id, lease_token)

    def _plan(
        self,
        conn: Connection,
        reminder: Row[Any],
        occ: Occurrence,
        zone: ZoneInfo | None,
        now: datetime,
    ) -> MisfirePlan:
        """Which due occurrence to send now, and which to record as missed."""
        in_flight = conn.execute(
            query("delivery_in_flight"),
            {"reminder_id": occ.reminder_id, "from_utc": occ.run_time_utc},
        ).scalar_one_or_none()
        due = [occ.run_time_utc]
        if reminder.rrule is not None and zone is not None and now > occ.run_time_utc:
            try:
                due += occurrences_between(
                    schedule_of_row(reminder, self.schedule_config),
                    zone,
                    occ.run_time_utc,
                    now,
                    limits=self.schedule_config.limits,
                )
            except InvalidSchedule as exc:
                log.warning("cannot list due occurrences of %s: %s", occ.reminder_id, exc)
        if in_flight is not None and in_flight in due:
            # An earlier attempt already chose this one: keep it (its row is `sending`).
            return MisfirePlan(send=in_flight, missed=tuple(d for d in due if d < in_flight))
        return plan_misfire(
            reminder.misfire_policy, due, now=now, max_lateness_s=reminder.max_lateness_s
        )

    def _deliver(
        self,
        message: Message,
        occ: Occurrence,
        reminder: Row[Any],
        profile: Profile | None,
        chosen: datetime,
        delivery_id: uuid.UUID,
        lease_token: uuid.UUID,
    ) -> Outcome:
        key = idempotency_key(occ.reminder_id, chosen)
        recipient: str | None = None
        zone = zone_or_none(reminder.timezone, profile)
        self._hold(message, delivery_id, lease_token)
        attempts = 0
        try:
            if profile is None:
                raise PermanentDeliveryError(f"no profile for user {reminder.user_id!r}")
            if zone is None:
                raise PermanentDeliveryError(f"unknown time zone {reminder.timezone!r}")
            recipient = profile.email
            rendered = self._renderer.render(
                reminder.template,
                reminder_id=str(reminder.id),
                title=reminder.title,
                body=reminder.body,
                run_time_utc=chosen,
                timezone=zone.key,
            )
            email = OutgoingEmail(
                to=profile.email,
                sender=self.mail_from,
                subject=rendered.subject,
                text=rendered.text,
                html=rendered.html,
            )
            policy = self.retry
            retrying = Retrying(
                retry=retry_if_exception_type(TransientDeliveryError),
                stop=lambda state: should_stop(policy, state),
                wait=lambda state: next_wait_s(policy, state),
                sleep=self._sleep,
                reraise=True,
            )
            for attempt in retrying:
                with attempt:
                    attempts += 1
                    receipt = self._provider.send(email, idempotency_key=key)
        except (TransientDeliveryError, InfrastructureError) as exc:
            return self._retry_later(message, delivery_id, lease_token, exc, attempts)
        except ShutdownRequested:
            return self._retry_later(
                message, delivery_id, lease_token, RuntimeError("shutting down"), attempts,
                delay_s=0,
            )  # fmt: skip
        except PermanentDeliveryError as exc:
            self._complete(
                occ, chosen, zone, delivery_id, lease_token, attempts=attempts,
                status=DeliveryStatus.FAILED, recipient=recipient, error=str(exc),
            )  # fmt: skip
            self._queue.delete([message.receipt_handle])
            log.error("permanent failure for %s: %s", key, exc)
            SENDS.labels(provider=self._provider.name, outcome=Outcome.FAILED.value).inc()
            return Outcome.FAILED

        sent_at = self._clock()
        recorded = self._complete(
            occ, chosen, zone, delivery_id, lease_token, attempts=attempts,
            status=DeliveryStatus.SENT, recipient=recipient, sent_at=sent_at,
            provider=receipt.provider, provider_message_id=receipt.provider_message_id,
        )  # fmt: skip
        self._queue.delete([message.receipt_handle])
        if not recorded:
            # The provider took it (same key as the holder's), but the row belongs to
            # another worker now: that worker records the outcome.
            SENDS.labels(provider=receipt.provider, outcome=Outcome.BUSY.value).inc()
            return Outcome.BUSY
        DELIVERY_LAG.observe(max(0.0, (sent_at - chosen).total_seconds()))
        SENDS.labels(provider=receipt.provider, outcome=Outcome.SENT.value).inc()
        log.info("sent %s to %s via %s", key, recipient, receipt.provider)
        return Outcome.SENT

    def _sleep(self, seconds: float) -> None:
        """Wait between retries; a shutdown ends the wait (ShutdownRequested)."""
        if self._stop.wait(seconds):
            raise ShutdownRequested

    def _retry_later(
        self,
        message: Message,
        delivery_id: uuid.UUID | None,
        lease_token: uuid.UUID | None,
        exc: Exception,
        attempts: int = 0,
        *,
        delay_s: float | None = None,
    ) -> Outcome:
        """Give the lease back and hide the message for a backoff (Retry-After wins); the
        next receive retries it, up to the queue's maximum receive count (then the DLQ)."""
        retry_after = getattr(exc, "retry_after_s", None)
        delay = (
            delay_s
            if delay_s is not None
            else requeue_delay_s(self.retry, message.receive_count, retry_after)
        )
        now = self._clock()
        if delivery_id is not None:
            with self._engine.begin() as conn:
                conn.execute(
                    query("delivery_release"),
                    {
                        "id": delivery_id,
                        "lease_token": lease_token,
                        "error": str(exc),
                        "attempts": attempts,
                        "now": now,
                    },
                )
        self._queue.change_visibility(message.receipt_handle, now=now, timeout_s=delay)
        log.warning("transient failure for %s, retry in %.0fs: %s", message.body, delay, exc)
        SENDS.labels(provider=self._provider.name, outcome=Outcome.RETRY.value).inc()
        return Outcome.RETRY

    def _complete(
        self,
        occ: Occurrence,
        chosen: datetime,
        zone: ZoneInfo | None,
        delivery_id: uuid.UUID,
        lease_token: uuid.UUID,
        *,
        attempts: int,
        status: DeliveryStatus,
        recipient: str | None,
        error: str | None = None,
        sent_at: datetime | None = None,
        provider: str | None = None,
        provider_message_id: str | None = None,
    ) -> bool:
        """Complete the delivery row and move the reminder on, in one transaction; False
        when the row is no longer ours (fenced out: nothing changed)."""
        now = self._clock()
        with self._engine.begin() as conn:
            done = conn.execute(
                query("delivery_complete"),
                {
                    "id": delivery_id,
                    "lease_token": lease_token,
                    "status": status.value,
                    "sent_at": sent_at,
                    "provider": provider,
                    "provider_message_id": provider_message_id,
                    "recipient": recipient,
                    "error": error,
                    "attempts": attempts,
                    "now": now,
                },
            ).rowcount
            if not done:
                log.warning(
                    "%s/%s is no longer ours (lease taken over, or the row was ended); "
                    "its current holder records the outcome",
                    occ.reminder_id,
                    chosen.isoformat(),
                )
                return False
            self._advance(
                conn, occ, zone, after=chosen, sent=status is DeliveryStatus.SENT,
                error=error, now=now,
            )  # fmt: skip
            if occ.replay and status is DeliveryStatus.SENT:
                conn.execute(query("reminder_replayed_sent"), {"id": occ.reminder_id, "now": now})
        return True

    def _advance(
        self,
        conn: Connection,
        occ: Occurrence,
        zone: ZoneInfo | None,
        *,
        after: datetime,
        sent: bool,
        error: str | None,
        now: datetime,
    ) -> None:
        advance_reminder(
            conn,
            reminder_id=occ.reminder_id,
            occurrence_utc=occ.run_time_utc,
            zone=zone,
            after=after,
            sent=sent,
            error=error,
            now=now,
            config=self.schedule_config,
        )


def _still_due(reminder: Row[Any], occ: Occurrence) -> bool:
    """True when the reminder still wants this occurrence (no cancel, pause or reschedule)."""
    return (
        reminder.status in (ReminderStatus.CLAIMED, ReminderStatus.PENDING)
        and reminder.next_run_utc == occ.run_time_utc
    )
