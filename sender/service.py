"""Deliver queued occurrences: one `delivery_log` row per occurrence, sent once."""

from __future__ import annotations

import logging
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from enum import StrEnum
from typing import Any
from zoneinfo import ZoneInfo

from sqlalchemy import Connection, Engine, Row
from sqlalchemy.exc import DBAPIError
from structlog.contextvars import bind_contextvars, reset_contextvars
from tenacity import RetryCallState, Retrying, retry_if_exception_type

from reminder_core.clock import utcnow
from reminder_core.db.queries import id_array, json_rows, query
from reminder_core.delivery import (
    Advance,
    advance_reminder,
    advance_reminders,
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
from reminder_core.logging import delivery_fields
from reminder_core.metrics import DELIVERY_LAG, SEND_FAILURES, SENDS, error_class
from reminder_core.profiles import Profile, ProfileSource
from reminder_core.queue import Message, Queue
from reminder_core.scheduling import ScheduleConfig
from reminder_core.suppression import (
    Refusal,
    paused_refusal,
    record_refusals,
    refusals,
    suppress_replay,
)
from reminder_core.worker.loop import TickResult
from sender.providers.base import OutgoingEmail, Provider, SendReceipt, close_provider
from sender.providers.failover import FailoverProvider
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
    RELEASED = "released"  # shutting down: handed back to the queue unattempted
    SUPPRESSED = "suppressed"  # recipient on the suppression list; recorded, not sent


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


@dataclass(slots=True)
class _Work:
    """One received message on its way through a batch (see `Sender.run_once`)."""

    message: Message
    occ: Occurrence | None = None
    outcome: Outcome | None = None  # decided; None while still in play
    profile: Profile | None = None
    reminder: Row[Any] | None = None
    zone: ZoneInfo | None = None
    chosen: datetime | None = None  # the occurrence to send (misfire plan)
    lease_token: uuid.UUID | None = None
    delivery_id: uuid.UUID | None = None
    pinned: str | None = None  # provider an earlier ambiguous attempt may have reached
    # visibility change instead of a delete (BUSY, RETRY, released), seconds from now
    hide_for_s: float | None = None
    # outcome of the send
    attempts: int = 0
    receipt: SendReceipt | None = None
    recipient: str | None = None
    sent_at: datetime | None = None
    error: Exception | None = None
    # the reminder stopped wanting this occurrence during the batch (see Sender._withdrawn)
    withdrawn: bool = False
    started: bool = False  # past that check: its provider call is under way or done

    _key: str | None = None

    @property
    def key(self) -> str:
        """The provider idempotency key of the chosen occurrence (computed once)."""
        if self._key is None:
            assert self.occ is not None
            assert self.chosen is not None
            self._key = idempotency_key(self.occ.reminder_id, self.chosen)
        return self._key


@dataclass(slots=True)
class _Recheck:
    """A batch's reminders as last read, while its sends go on (see `Sender._withdrawn`).

    Attributes:
        works: the batch's occurrences being sent.
        read_at: when the reminders were last read (time.monotonic()).
        withdrawn: (reminder_id, run_time_utc) of the occurrences their reminder no longer
            wants (cancelled, paused or rescheduled since the batch began).
    """

    works: list[_Work]
    read_at: float
    withdrawn: set[tuple[uuid.UUID, datetime]] = field(default_factory=set)
    lock: threading.Lock = field(default_factory=threading.Lock)


class Sender:
    """Receives occurrences and delivers each at most once per idempotency key.

    A received batch goes through three set-based steps (DESIGN §4), so the database work
    per message is a few array elements, not a few round trips:

    1. **Begin** (one transaction): re-read the batch's reminders (a cancel, pause or
       reschedule wins and is recorded `cancelled`); apply the misfire policy to what is
       already due (older occurrences recorded `missed`); insert each occurrence's unique
       delivery row as `sending` with a lease, or take over an expired one. An occurrence
       that is already terminal is a duplicate; one under another worker's live lease is
       busy and comes back when that lease ends. An occurrence whose recipient is on the
       suppression list (one query for the batch) is recorded `suppressed` without a
       provider call; its recurring reminder is paused, a one-time one fails (DESIGN §4.8).
    2. **Send**, outside any transaction: render at send time and call the provider, with
       in-process retries of transient errors (tenacity: full-jitter backoff, Retry-After
       honoured, bounded by the delivery budget). Up to `concurrency` sends run at once.
       A send that starts more than `recheck_interval_s` after the batch's reminders were
       read reads them again first (one query, for the sends not started yet, at most
       once per interval):
       an occurrence whose reminder was cancelled, paused or rescheduled meanwhile is not
       sent; its delivery row is withdrawn (deleted when no provider call ever touched it,
       else its lease released) and its message handed back at once, so that the next
       receive decides it as step 1 does. A slow provider and a large batch therefore do
       not widen the window in which a cancel is missed.
    3. **Complete** (one transaction): complete every delivery row, each fenced by its
       own lease token, move each reminder to its next occurrence (computed in the zone in
       force now), give back the leases of transient failures; then delete the finished
       messages and hide the retried ones for their backoff, one call each.

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
        stop: set on shutdown: sends not started are handed back, retry waits end.
        batch_size: messages per receive.
        concurrency: provider calls in flight at once (threads); 1 sends one by one.
        clock: current time for instants taken after a send (sent_at); aware UTC.
        recheck_interval_s: seconds after which a send re-reads the batch's reminders
            before calling the provider (see step 2 above).
        owns_provider: `close()` closes the provider too (its connections and threads);
            False when the caller shares the provider and closes it itself.

    While a batch is being worked on, a heartbeat thread extends the visibility timeout of
    every message of the batch and the lease of every delivery row held, every
    `visibility_timeout_s / 3` seconds, so a slow send is neither taken over nor
    dead-lettered, and the messages waiting behind it are not received again by other
    senders (DESIGN §4.3).
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
        concurrency: int = 1,
        clock: Callable[[], datetime] = utcnow,
        recheck_interval_s: float = 0.1,
        owns_provider: bool = False,
    ) -> None:
        self._engine = engine
        self._owns_provider = owns_provider
        self._queue = queue
        self._profiles = profiles
        self._renderer = renderer
        self._provider = provider
        self.mail_from = mail_from
        self.visibility_timeout_s = visibility_timeout_s
        self.lease_s = lease_s
        self.schedule_config = schedule_config
        self.batch_size = batch_size
        self.concurrency = max(1, concurrency)
        self.retry = retry or RetryPolicy()
        self._stop = stop or threading.Event()
        self._clock = clock
        self.recheck_interval_s = recheck_interval_s
        # receipt handle -> the delivery row held: (id, run_time_utc, lease token)
        self._inflight: dict[str, tuple[uuid.UUID, datetime, uuid.UUID] | None] = {}
        self._inflight_lock = threading.Lock()
        self._heartbeat: threading.Thread | None = None
        self._heartbeat_stop = threading.Event()
        self._pool: ThreadPoolExecutor | None = None

    # --- the batch -------------------------------------------------------------------

    def run_once(self, now: datetime) -> TickResult:
        """Receive one batch and handle it; returns counts per outcome.

        On shutdown (the stop event), messages whose send has not started are handed back
        to the queue at once (visibility 0, counted `released`) instead of waiting out
        their visibility timeout.

        Raises:
            sqlalchemy.exc.DBAPIError / InfrastructureError: the database or queue failed;
                the batch's messages come back after their visibility timeout (a send that
                already happened is repeated with the same idempotency key).
        """
        self._ensure_heartbeat()
        max_messages = self.batch_size
        gate = self._provider if isinstance(self._provider, FailoverProvider) else None
        if gate is not None:
            if not gate.ready():
                # Every provider's breaker is open: receiving now would only burn the
                # messages' receives toward the dead-letter queue.
                return TickResult(processed=0, more=False, counts={"providers_unavailable": 1})
            if "closed" not in gate.breaker_states().values():
                max_messages = 1  # only a half-open probe may pass: risk one message
        messages = self._queue.receive(
            now=now, max_messages=max_messages, visibility_timeout_s=self.visibility_timeout_s
        )
        counts: dict[str, int] = {}
        if messages:
            for work in self._process(messages, now):
                assert work.outcome is not None
                counts[work.outcome.value] = counts.get(work.outcome.value, 0) + 1
        return TickResult(
            processed=len(messages), more=len(messages) >= self.batch_size, counts=counts
        )

    def handle(self, message: Message, now: datetime) -> Outcome:
        """Handle one received message as a batch of one; returns its outcome."""
        (work,) = self._process([message], now)
        assert work.outcome is not None
        return work.outcome

    def _process(self, messages: list[Message], now: datetime) -> list[_Work]:
        works = [_Work(message=m) for m in messages]
        with self._tracking(messages):
            if self._stop.is_set():
                for w in works:
                    w.outcome, w.hide_for_s = Outcome.RELEASED, 0.0
            else:
                self._parse(works)
                self._load_profiles(works)
                self._begin(works, now)
                self._send_all([w for w in works if w.outcome is None])
                self._complete(works)
            self._settle(works)
        return works

    def _parse(self, works: list[_Work]) -> None:
        seen: dict[tuple[uuid.UUID, datetime], _Work] = {}
        for w in works:
            try:
                w.occ = Occurrence.from_body(w.message.body)
            except ValueError as exc:
                log.error(
                    "delivery dropped: malformed message",
                    extra=_fields(w, None, message_id=w.message.message_id, error=exc),
                )
                w.outcome = Outcome.DROPPED
                continue
            key = (w.occ.reminder_id, w.occ.run_time_utc)
            first = seen.get(key)
            if first is not None:
                # The same occurrence twice in one batch (a republished outbox row, or a
                # replay beside a plain copy): one copy carries it to the end, retries
                # included; a replay wins, since only it is sent whatever the reminder's
                # state (a plain copy of an occurrence that is no longer due is dropped).
                assert first.occ is not None
                if w.occ.replay and not first.occ.replay:
                    first.outcome, seen[key] = Outcome.DUPLICATE, w
                else:
                    w.outcome = Outcome.DUPLICATE
                continue
            seen[key] = w

    def _load_profiles(self, works: list[_Work]) -> None:
        cache: dict[str, Profile | InfrastructureError | None] = {}
        for w in works:
            if w.outcome is not None:
                continue
            assert w.occ is not None
            user_id = w.occ.user_id
            if user_id not in cache:
                try:
                    cache[user_id] = self._profiles.get(user_id)
                except InfrastructureError as exc:
                    cache[user_id] = exc
            found = cache[user_id]
            if isinstance(found, InfrastructureError):
                self._to_retry(w, found)
            else:
                w.profile = found

    # --- step 1: begin -----------------------------------------------------------------

    def _begin(self, works: list[_Work], now: datetime) -> None:
        live = [w for w in works if w.outcome is None]
        if not live:
            return
        terminal: list[tuple[_Work | None, uuid.UUID, str, datetime, DeliveryStatus, str]] = []
        begin: list[_Work] = []
        with self._engine.begin() as conn:
            ids = id_array({w.occ.reminder_id for w in live if w.occ is not None})
            reminders = {r.id: r for r in conn.execute(query("reminders_for_send"), {"ids": ids})}
            # Suppressed recipients are refused (DESIGN §4.8): one query for the batch.
            blocked = refusals(conn, {w.profile.email for w in live if w.profile is not None})
            refused: list[tuple[uuid.UUID, datetime, Refusal]] = []
            for w in live:
                occ = w.occ
                assert occ is not None
                reminder = w.reminder = reminders.get(occ.reminder_id)
                refusal = blocked.get(w.profile.email) if w.profile is not None else None
                if reminder is None:
                    log.error("delivery dropped: unknown reminder", extra=_fields(w, None))
                    w.outcome = Outcome.DROPPED
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
                    w.outcome = Outcome.CANCELLED
                elif occ.replay and refusal is not None:
                    assert w.profile is not None
                    suppress_replay(
                        conn, reminder_id=occ.reminder_id, run_time_utc=occ.run_time_utc,
                        recipient=w.profile.email, refusal=refusal, now=now,
                    )  # fmt: skip
                    w.outcome = Outcome.SUPPRESSED
                elif (
                    not occ.replay
                    and reminder.status == ReminderStatus.PAUSED
                    and reminder.next_run_utc == occ.run_time_utc
                    and paused_refusal(reminder, occ.run_time_utc) is None
                ):
                    # Paused by its user while this message was on its way: the occurrence
                    # is still the reminder's next one and is claimed again on resume (same
                    # key), so nothing is recorded for it (a `cancelled` row would make the
                    # resumed reminder fail as a duplicate).
                    w.outcome = Outcome.CANCELLED
                elif not occ.replay and not _still_due(reminder, occ):
                    # Outcome decided below: CANCELLED (SUPPRESSED when a suppression
                    # paused the reminder) when this records the occurrence, DUPLICATE
                    # when it already has a row (e.g. `sent` by the first copy).
                    status = DeliveryStatus.CANCELLED
                    error = f"superseded: reminder is {reminder.status}"
                    if (held := paused_refusal(reminder, occ.run_time_utc)) is not None:
                        status, error = DeliveryStatus.SUPPRESSED, held.error
                        refused.append((occ.reminder_id, occ.run_time_utc, held))
                    terminal.append(
                        (w, occ.reminder_id, occ.user_id, occ.run_time_utc, status, error)
                    )
                elif refusal is not None:
                    terminal.append(
                        (w, occ.reminder_id, occ.user_id, occ.run_time_utc,
                         DeliveryStatus.SUPPRESSED, refusal.error)
                    )  # fmt: skip
                    refused.append((occ.reminder_id, occ.run_time_utc, refusal))
                else:
                    w.zone = zone_or_none(reminder.timezone, w.profile)
                    plan = (
                        MisfirePlan(send=occ.run_time_utc, missed=())
                        if occ.replay  # a replay sends exactly the occurrence it names
                        else self._plan(conn, reminder, occ, w.zone, now)
                    )
                    for missed in plan.missed:
                        log.info(
                            "delivery missed",
                            extra=delivery_fields(occ.reminder_id, missed, None, None),
                        )
                        terminal.append(
                            (None, occ.reminder_id, occ.user_id, missed, DeliveryStatus.MISSED,
                             f"missed: {(now - missed).total_seconds():.0f} s late, "
                             f"misfire policy {reminder.misfire_policy}")
                        )  # fmt: skip
                    w.chosen = plan.send
                    if w.chosen is None:
                        advance_reminder(
                            conn, reminder_id=occ.reminder_id, occurrence_utc=occ.run_time_utc,
                            zone=w.zone, after=now, sent=True, error=None, now=now,
                            config=self.schedule_config,
                        )  # fmt: skip
                        w.outcome = Outcome.MISSED
                    else:
                        begin.append(w)
            if terminal:
                terminal.sort(key=lambda t: (t[1], t[3]))
                # One row per key (the first, as with a plain insert): an upsert may not
                # touch a row twice.
                distinct: dict[tuple[uuid.UUID, datetime], tuple[Any, ...]] = {}
                for t in terminal:
                    distinct.setdefault((t[1], t[3]), t)
                recorded = {
                    (r.reminder_id, r.run_time_utc)
                    for r in conn.execute(
                        query("delivery_record_terminal_batch"),
                        {
                            "rows": json_rows(
                                {
                                    "reminder_id": t[1],
                                    "user_id": t[2],
                                    "run_time_utc": t[3],
                                    "status": t[4].value,
                                    "error": t[5],
                                }
                                for t in distinct.values()  # in key order
                            ),
                            "now": now,
                            "lease_expired_before": now - timedelta(seconds=self.lease_s),
                        },
                    )
                }
                for w_or_none, reminder_id, _, run_time, status, _ in terminal:
                    if w_or_none is not None:
                        w_or_none.outcome = (
                            (
                                Outcome.SUPPRESSED
                                if status is DeliveryStatus.SUPPRESSED
                                else Outcome.CANCELLED
                            )
                            if (reminder_id, run_time) in recorded
                            else Outcome.DUPLICATE
                        )
            record_refusals(conn, refused, now=now)  # pause (recurring) or fail (one-time)
            if begin:
                self._take(conn, begin, now)
        for w in begin:
            if w.delivery_id is not None:
                assert w.lease_token is not None
                assert w.chosen is not None
                self._hold(w.message, w.delivery_id, w.chosen, w.lease_token)

    def _take(self, conn: Connection, begin: list[_Work], now: datetime) -> None:
        """Insert (or take over) the delivery rows of `begin` as `sending` under fresh
        lease tokens; decide BUSY / DUPLICATE for the ones that could not be taken."""
        begin.sort(key=lambda w: (w.occ.reminder_id, w.chosen))  # type: ignore[union-attr]
        seen: set[tuple[uuid.UUID, datetime]] = set()
        batch: list[_Work] = []
        for w in begin:
            assert w.occ is not None
            assert w.chosen is not None
            key = (w.occ.reminder_id, w.chosen)
            if key in seen:  # two messages chose one occurrence: the first carries it
                w.outcome = Outcome.DUPLICATE
                continue
            seen.add(key)
            w.lease_token = uuid.uuid4()
            batch.append(w)
        taken = {
            r.lease_token: (r.id, r.provider)
            for r in conn.execute(
                query("delivery_begin_batch"),
                {
                    "rows": json_rows(
                        {
                            "reminder_id": w.occ.reminder_id,  # type: ignore[union-attr]
                            "user_id": w.reminder.user_id,  # type: ignore[union-attr]
                            "run_time_utc": w.chosen,
                            "lease_token": w.lease_token,
                        }
                        for w in batch
                    ),
                    "now": now,
                    "lease_expired_before": now - timedelta(seconds=self.lease_s),
                },
            )
        }
        for w in batch:
            row = taken.get(w.lease_token)
            if row is None:
                self._not_taken(conn, w, now)
            else:
                w.delivery_id, w.pinned = row

    def _not_taken(self, conn: Connection, w: _Work, now: datetime) -> None:
        """The occurrence is held by another worker (BUSY) or already terminal."""
        assert w.occ is not None
        assert w.chosen is not None
        params = {"reminder_id": w.occ.reminder_id, "run_time_utc": w.chosen}
        status = conn.execute(query("delivery_status"), params).scalar_one_or_none()
        if status == DeliveryStatus.SENDING:
            # Come back when the holder's lease ends (not at every visibility timeout,
            # which would burn receives toward the dead-letter queue).
            left = conn.execute(
                query("delivery_lease_left"), {**params, "lease_s": self.lease_s, "now": now}
            ).scalar_one_or_none()
            w.outcome = Outcome.BUSY
            w.hide_for_s = float(left) + 1 if left is not None else None
            return
        # Already terminal, yet the reminder still points here (e.g. re-driven after a
        # crash): move it on instead of looping.
        w.outcome = Outcome.DUPLICATE
        advance_reminder(
            conn, reminder_id=w.occ.reminder_id, occurrence_utc=w.occ.run_time_utc,
            zone=w.zone, after=w.chosen, error=None, now=now, config=self.schedule_config,
            sent=status in (DeliveryStatus.SENT, DeliveryStatus.BOUNCED,
                            DeliveryStatus.COMPLAINED),
        )  # fmt: skip

    def _plan(
        self,
        conn: Connection,
        reminder: Row[Any],
        occ: Occurrence,
        zone: ZoneInfo | None,
        now: datetime,
    ) -> MisfirePlan:
        """Which due occurrence to send now, and which to record as missed."""
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
                log.warning(
                    "cannot list due occurrences",
                    extra=delivery_fields(occ.reminder_id, occ.run_time_utc, None, None, error=exc),
                )
        if len(due) > 1:
            in_flight = conn.execute(
                query("delivery_in_flight"),
                {"reminder_id": occ.reminder_id, "from_utc": occ.run_time_utc},
            ).scalar_one_or_none()
            if in_flight is not None and in_flight in due:
                # An earlier attempt already chose this one: keep it (its row is `sending`).
                return MisfirePlan(send=in_flight, missed=tuple(d for d in due if d < in_flight))
        return plan_misfire(
            reminder.misfire_policy, due, now=now, max_lateness_s=reminder.max_lateness_s
        )

    # --- step 2: send ------------------------------------------------------------------

    def _send_all(self, works: list[_Work]) -> None:
        recheck = _Recheck(works, read_at=time.monotonic())  # just read by _begin
        if self.concurrency == 1 or len(works) <= 1:
            for w in works:
                self._send(w, recheck)
            return
        if self._pool is None:
            self._pool = ThreadPoolExecutor(
                max_workers=self.concurrency, thread_name_prefix=f"{self.name}-send"
            )
        for future in [self._pool.submit(self._send, w, recheck) for w in works]:
            future.result()

    def _withdrawn(self, w: _Work, recheck: _Recheck) -> bool:
        """True when `w`'s reminder no longer wants its occurrence, as last read; the
        batch's reminders are read again first when that read is older than
        `recheck_interval_s` (by one of the send threads, the others wait for it)."""
        assert w.occ is not None
        if time.monotonic() - recheck.read_at >= self.recheck_interval_s:
            with recheck.lock:
                if time.monotonic() - recheck.read_at >= self.recheck_interval_s:
                    self._reread(recheck)
        withdrawn = (w.occ.reminder_id, w.occ.run_time_utc) in recheck.withdrawn
        w.started = not withdrawn
        return withdrawn

    def _reread(self, recheck: _Recheck) -> None:
        """Read again the reminders of the batch's sends not started yet and record the
        occurrences they no longer want (the rules of `_begin`: a replay is withdrawn
        when its reminder is cancelled or paused, any other occurrence when it is no
        longer the reminder's due one). A database error leaves the batch on its earlier
        read (the send goes ahead: the begin transaction checked it, and the outcome is
        recorded or retried as usual)."""
        waiting = [w for w in recheck.works if not w.started and w.occ is not None]
        ids = id_array({w.occ.reminder_id for w in waiting})  # type: ignore[union-attr]
        try:
            with self._engine.connect() as conn:
                reminders = {
                    r.id: r for r in conn.execute(query("reminders_send_state"), {"ids": ids})
                }
        except DBAPIError as exc:
            log.warning(
                "could not read the batch's reminders again; sending on the earlier read: %s",
                exc.orig if exc.orig is not None else exc,
            )
        else:
            for w in waiting:
                occ = w.occ
                assert occ is not None
                reminder = reminders.get(occ.reminder_id)
                if (
                    reminder is None
                    or (
                        occ.replay
                        and reminder.status in (ReminderStatus.CANCELLED, ReminderStatus.PAUSED)
                    )
                    or (not occ.replay and not _still_due(reminder, occ))
                ):
                    recheck.withdrawn.add((occ.reminder_id, occ.run_time_utc))
        recheck.read_at = time.monotonic()

    def _send(self, w: _Work, recheck: _Recheck) -> None:
        """`_send_bound` with the occurrence bound to every record logged meanwhile (by
        the providers and the failover too): reminder_id, run_time_utc, attempt."""
        assert w.occ is not None
        tokens = bind_contextvars(
            reminder_id=w.occ.reminder_id,
            run_time_utc=w.chosen,
            attempt=w.message.receive_count,
        )
        try:
            self._send_bound(w, recheck)
        finally:
            reset_contextvars(**tokens)

    def _send_bound(self, w: _Work, recheck: _Recheck) -> None:
        """Render and send one occurrence, retrying transient errors in process. Records
        the result on `w`; never raises."""
        assert w.occ is not None
        assert w.reminder is not None
        assert w.chosen is not None
        if self._stop.is_set():
            w.outcome, w.hide_for_s = Outcome.RELEASED, 0.0
            return
        if self._withdrawn(w, recheck):
            w.outcome, w.hide_for_s, w.withdrawn = Outcome.RELEASED, 0.0, True
            log.info(
                "delivery withdrawn: the reminder changed during its batch; handed back to"
                " be decided again",
                extra=_fields(w, None),
            )
            return
        reminder = w.reminder
        try:
            if w.profile is None:
                raise PermanentDeliveryError(f"no profile for user {reminder.user_id!r}")
            if w.zone is None:
                raise PermanentDeliveryError(f"unknown time zone {reminder.timezone!r}")
            w.recipient = w.profile.email
            rendered = self._renderer.render(
                reminder.template,
                reminder_id=str(reminder.id),
                title=reminder.title,
                body=reminder.body,
                run_time_utc=w.chosen,
                timezone=w.zone.key,
                recipient=w.profile.email,
            )
            email = OutgoingEmail(
                to=w.profile.email,
                sender=self.mail_from,
                subject=rendered.subject,
                text=rendered.text,
                html=rendered.html,
            )
            key = w.key
            if w.pinned is not None and isinstance(self._provider, FailoverProvider):
                # An earlier attempt (maybe another worker's) may have reached this
                # provider: only it can deduplicate the key.
                self._provider.pin(key, w.pinned)
            started = time.monotonic()
            failed: list[TransientDeliveryError] = []
            try:
                w.attempts += 1
                w.receipt = self._provider.send(email, idempotency_key=key)
            except TransientDeliveryError as first:
                failed.append(first)
            if failed:
                # The retry loop starts only after a failure (building it costs more than
                # an in-process send); its first attempt re-raises that failure, so
                # tenacity sees the same attempts, waits and stop as for a plain loop.
                for attempt in self._retrying(started, w):
                    with attempt:
                        if failed:
                            raise failed.pop()
                        w.attempts += 1
                        w.receipt = self._provider.send(email, idempotency_key=key)
            w.sent_at = self._clock()
            w.outcome = Outcome.SENT
        except (TransientDeliveryError, InfrastructureError) as exc:
            self._to_retry(w, exc)
        except ShutdownRequested:
            w.outcome, w.hide_for_s = Outcome.RETRY, 0.0
            w.error = ShutdownRequested("shutting down")  # not a failure (see _settle)
        except PermanentDeliveryError as exc:
            w.outcome, w.error = Outcome.FAILED, exc
            log.error(
                "delivery failed",
                extra=_fields(w, self._pinned_now(w) or self._provider.name, error=exc,
                              provider_calls=w.attempts),
            )  # fmt: skip
        except Exception as exc:
            # A defect, not a provider answer: treat it as transient so that the message
            # comes back (and ends in the dead-letter queue if it keeps failing) while the
            # rest of the batch is completed.
            log.exception(
                "delivery error",
                extra=_fields(w, self._pinned_now(w) or self._provider.name),
            )
            self._to_retry(w, exc)

    def _retrying(self, started: float, w: _Work) -> Retrying:
        """tenacity's loop for one send whose first call started at `started`
        (time.monotonic()): the delivery budget counts from there. Before each wait, an
        ambiguous failure's provider is recorded on the delivery row (see `_pin`)."""
        policy = self.retry

        def from_first_call(state: RetryCallState) -> None:
            state.start_time = started

        def before_sleep(state: RetryCallState) -> None:
            del state
            self._pin(w)

        return Retrying(
            before=from_first_call,
            before_sleep=before_sleep,
            retry=retry_if_exception_type(TransientDeliveryError),
            stop=lambda state: should_stop(policy, state),
            wait=lambda state: next_wait_s(policy, state),
            sleep=self._sleep,
            reraise=True,
        )

    def _pinned_now(self, w: _Work) -> str | None:
        if isinstance(self._provider, FailoverProvider):
            return self._provider.pinned_provider(w.key)
        return None

    def _pin(self, w: _Work) -> None:
        """Record on the delivery row the provider that an ambiguous attempt may have
        reached, so a worker taking the row over after a crash sends there, not to a
        backup that cannot deduplicate the key (issue 5's failover rule)."""
        pinned = self._pinned_now(w)
        if pinned is None or pinned == w.pinned:
            return
        with self._engine.begin() as conn:
            conn.execute(
                query("delivery_pin_provider"),
                {
                    "id": w.delivery_id,
                    "run_time_utc": w.chosen,
                    "lease_token": w.lease_token,
                    "provider": pinned,
                },
            )
        w.pinned = pinned

    def _sleep(self, seconds: float) -> None:
        """Wait between retries; a shutdown ends the wait (ShutdownRequested)."""
        if self._stop.wait(seconds):
            raise ShutdownRequested

    def _to_retry(self, w: _Work, exc: Exception) -> None:
        """Hide the message for a backoff (Retry-After wins); the next receive retries it,
        up to the queue's maximum receive count (then the DLQ)."""
        retry_after = getattr(exc, "retry_after_s", None)
        w.outcome, w.error = Outcome.RETRY, exc
        w.hide_for_s = requeue_delay_s(self.retry, w.message.receive_count, retry_after)
        log.warning(
            "delivery retry",
            extra=_fields(
                w, self._pinned_now(w) or self._provider.name, retry_in_s=w.hide_for_s,
                error=exc, provider_calls=w.attempts,
            ),
        )  # fmt: skip

    # --- step 3: complete ----------------------------------------------------------------

    def _complete(self, works: list[_Work]) -> None:
        """Complete the delivery rows (fenced) and move the reminders on, in one
        transaction; give back the leases of the retried ones."""
        held = [w for w in works if w.delivery_id is not None]
        if not held:
            return
        done = [w for w in held if w.outcome in (Outcome.SENT, Outcome.FAILED)]
        back = [w for w in held if w.outcome in (Outcome.RETRY, Outcome.RELEASED)]
        now = self._clock()
        with self._engine.begin() as conn:
            if done:
                completed = set(
                    conn.execute(
                        query("delivery_complete_batch"),
                        {"rows": json_rows(_completion(w) for w in done), "now": now},
                    ).scalars()
                )
                advances: list[Advance] = []
                for w in done:
                    assert w.occ is not None
                    assert w.chosen is not None
                    if w.delivery_id not in completed:
                        # The provider took it (same key as the holder's), but the row
                        # belongs to another worker now: that worker records the outcome.
                        log.warning(
                            "delivery lease lost: taken over, or the row was ended; its"
                            " current holder records the outcome",
                            extra=_fields(w, w.receipt.provider if w.receipt else None),
                        )
                        w.outcome = Outcome.BUSY
                        continue
                    advances.append(
                        Advance(
                            reminder_id=w.occ.reminder_id,
                            occurrence_utc=w.occ.run_time_utc,
                            zone=w.zone,
                            after=w.chosen,
                            sent=w.outcome is Outcome.SENT,
                            error=str(w.error) if w.error else None,
                        )
                    )
                    if w.occ.replay and w.outcome is Outcome.SENT:
                        conn.execute(
                            query("reminder_replayed_sent"), {"id": w.occ.reminder_id, "now": now}
                        )
                advance_reminders(conn, advances, now=now, config=self.schedule_config)
            if withdrawn := [w for w in back if w.withdrawn]:
                # Never sent: the row goes, so the next receive decides the occurrence as
                # if this batch had not begun it (a row an earlier attempt touched stays,
                # released below).
                conn.execute(
                    query("delivery_withdraw_batch"),
                    {
                        "rows": json_rows(
                            {
                                "id": w.delivery_id,
                                "run_time_utc": w.chosen,
                                "lease_token": w.lease_token,
                            }
                            for w in withdrawn
                        )
                    },
                )
            if back:
                conn.execute(
                    query("delivery_release_batch"),
                    {
                        "rows": json_rows(
                            {
                                "id": w.delivery_id,
                                "run_time_utc": w.chosen,
                                "lease_token": w.lease_token,
                                "error": _release_error(w),
                                "attempts": w.attempts,
                                "provider": self._pinned_now(w),
                            }
                            for w in back
                        ),
                        "now": now,
                    },
                )

    def _settle(self, works: list[_Work]) -> None:
        """Delete the finished messages, hide the others for their backoff; metrics."""
        now = self._clock()
        delete: list[str] = []
        hide: list[tuple[str, float]] = []
        outcomes: dict[tuple[str, str], int] = {}
        levels = {o: lvl for o, lvl in _OUTCOME_LOG_LEVELS.items() if log.isEnabledFor(lvl)}
        for w in works:
            assert w.outcome is not None
            handle = w.message.receipt_handle
            if w.outcome in (Outcome.RETRY, Outcome.RELEASED, Outcome.BUSY) and (
                w.outcome is not Outcome.BUSY or w.receipt is None
            ):
                if w.hide_for_s is not None:
                    hide.append((handle, w.hide_for_s))
            else:
                delete.append(handle)
            provider = w.receipt.provider if w.receipt else self._provider.name
            outcomes[(provider, w.outcome.value)] = outcomes.get((provider, w.outcome.value), 0) + 1
            if (
                w.outcome in (Outcome.FAILED, Outcome.RETRY)
                and w.error is not None
                and not isinstance(w.error, ShutdownRequested)
            ):
                SEND_FAILURES.labels(provider=provider, error_class=error_class(w.error)).inc()
            if w.outcome is Outcome.SENT:
                assert w.sent_at is not None
                assert w.chosen is not None
                DELIVERY_LAG.observe(max(0.0, (w.sent_at - w.chosen).total_seconds()))
            if w.outcome in levels:  # the others were logged where they were decided
                log.log(
                    levels[w.outcome],
                    "delivery %s",
                    w.outcome.value,
                    extra=_fields(
                        w, provider, outcome=w.outcome.value, provider_calls=w.attempts,
                        recipient=w.recipient, sent_at=w.sent_at,
                    ),
                )  # fmt: skip
        self._untrack([w.message for w in works])
        self._queue.delete(delete)
        if hide:
            self._queue.change_visibility_batch(hide, now=now)
        for (provider, outcome), n in outcomes.items():
            SENDS.labels(provider=provider, outcome=outcome).inc(n)
        if log.isEnabledFor(logging.INFO):
            totals: dict[str, int] = {}
            sent_by: dict[str, int] = {}
            for (provider, outcome), n in outcomes.items():
                totals[outcome] = totals.get(outcome, 0) + n
                if outcome == Outcome.SENT:
                    sent_by[provider] = sent_by.get(provider, 0) + n
            log.info(
                "deliveries settled",
                extra={"messages": len(works), "outcomes": totals, "sent_by_provider": sent_by},
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

    def _hold(
        self, message: Message, delivery_id: uuid.UUID, run_time: datetime, lease: uuid.UUID
    ) -> None:
        with self._inflight_lock:
            if message.receipt_handle in self._inflight:
                self._inflight[message.receipt_handle] = (delivery_id, run_time, lease)

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
        delivery row (one call and one statement for all); returns how many messages were
        extended."""
        with self._inflight_lock:
            held = list(self._inflight.items())
        if not held:
            return 0
        self._queue.change_visibility_batch(
            [(handle, self.visibility_timeout_s) for handle, _ in held], now=now
        )
        leases = [lease for _, lease in held if lease is not None]
        if leases:
            with self._engine.begin() as conn:
                conn.execute(
                    query("delivery_heartbeat_batch"),
                    {
                        "rows": json_rows(
                            {"id": i, "run_time_utc": r, "lease_token": t} for i, r, t in leases
                        ),
                        "now": now,
                    },
                )
        return len(held)

    def close(self) -> None:
        """Stop the heartbeat thread and the send threads; close the provider when this
        sender owns it (`owns_provider`)."""
        self._heartbeat_stop.set()
        if self._pool is not None:
            self._pool.shutdown(wait=True)
        if self._owns_provider:
            close_provider(self._provider)


#: Outcomes logged one line per message when a batch settles, and at which level; RETRY,
#: FAILED and DROPPED are logged where they are decided, with their error. SENT is DEBUG:
#: a JSON line per sent message adds some 40% to the CPU of an in-process send (README
#: "Logs"); each batch logs one INFO summary ("deliveries settled") instead.
_OUTCOME_LOG_LEVELS = {
    Outcome.SENT: logging.DEBUG,
    Outcome.CANCELLED: logging.INFO,
    Outcome.MISSED: logging.INFO,
    Outcome.SUPPRESSED: logging.INFO,
    Outcome.DUPLICATE: logging.DEBUG,
    Outcome.BUSY: logging.DEBUG,
    Outcome.RELEASED: logging.DEBUG,
}


def _fields(w: _Work, provider: str | None, **more: object) -> dict[str, object]:
    """`delivery_fields` of the occurrence `w` carries (the one chosen to send, else the
    one the message names); `attempt` is the message's receive count."""
    occ = w.occ
    return delivery_fields(
        occ.reminder_id if occ is not None else None,
        w.chosen or (occ.run_time_utc if occ is not None else None),
        w.message.receive_count,
        provider,
        **more,
    )


def _release_error(w: _Work) -> str:
    """Why a held delivery row is handed back unfinished (recorded on the row)."""
    if w.error is not None:
        return str(w.error)
    return "withdrawn: the reminder changed during its batch" if w.withdrawn else "shutting down"


def _completion(w: _Work) -> dict[str, object]:
    """The delivery_complete_batch row of a sent or failed occurrence."""
    return {
        "id": w.delivery_id,
        "run_time_utc": w.chosen,
        "lease_token": w.lease_token,
        "status": (
            DeliveryStatus.SENT if w.outcome is Outcome.SENT else DeliveryStatus.FAILED
        ).value,
        "sent_at": w.sent_at,
        "provider": w.receipt.provider if w.receipt else None,
        "provider_message_id": w.receipt.provider_message_id if w.receipt else None,
        "recipient": w.recipient,
        "error": str(w.error) if w.error else None,
        "attempts": w.attempts,
    }


def _still_due(reminder: Row[Any], occ: Occurrence) -> bool:
    """True when the reminder still wants this occurrence (no cancel, pause or reschedule)."""
    return (
        reminder.status in (ReminderStatus.CLAIMED, ReminderStatus.PENDING)
        and reminder.next_run_utc == occ.run_time_utc
    )
