"""Begin stage: decide each received occurrence and lease the ones to send (one
transaction per batch, before any provider call)."""

from __future__ import annotations

import dataclasses
import uuid
from collections.abc import Sequence
from datetime import datetime, timedelta
from zoneinfo import ZoneInfo

from sqlalchemy import Connection, Engine

from reminder_core.domain.misfire import MisfirePlan, plan_misfire
from reminder_core.domain.quiet_hours import quiet_until
from reminder_core.domain.recurrence import occurrences_between
from reminder_core.domain.retry import RetryPolicy, requeue_delay_s
from reminder_core.domain.states import DeliveryStatus, ReminderStatus
from reminder_core.errors import InfrastructureError, InvalidSchedule
from reminder_core.logging import delivery_fields
from reminder_core.messages import OccurrenceMessage
from reminder_core.profiles import Profile, ProfileSource
from reminder_core.record import record
from reminder_core.scheduling import ScheduleConfig, schedule_of, stored_of, zone_or_none
from reminder_core.services import reminders as reminder_services
from reminder_core.store import delivery_log, reminders
from reminder_core.store.delivery_log import DeliveryToBegin, TerminalDelivery
from reminder_core.store.reminders import Hold, ReminderForSend, ReminderSendState
from reminder_core.suppression import (
    Refusal,
    listed_form,
    paused_refusal,
    record_refusals,
    refusal_for,
    suppress_replay,
)
from sender.providers.base import SendReceipt
from sender.work import Begun, Decided, Outcome, Received, held_for, log


@record
class _Terminal:
    """An occurrence to record terminal without a provider call; `received` is None for
    an older occurrence the misfire policy records `missed`."""

    received: Received | None
    delivery: TerminalDelivery

    @classmethod
    def of(
        cls,
        received: Received | None,
        occ: OccurrenceMessage,
        run_time_utc: datetime,
        status: DeliveryStatus,
        error: str,
    ) -> _Terminal:
        """The terminal record of occurrence `run_time_utc` (aware UTC) of `occ`'s reminder."""
        return cls(
            received, TerminalDelivery(occ.reminder_id, occ.user_id, run_time_utc, status, error)
        )


def _refusal(reminder: ReminderForSend | None, recipients: dict[uuid.UUID, str]) -> Refusal | None:
    """The suppression list's refusal of `reminder`'s recipient, None when not listed.
    The list is of email addresses: a webhook delivery has none."""
    if (
        reminder is None
        or reminder.recipient_suppressed is None
        or reminder.webhook_url is not None
    ):
        return None
    return refusal_for(recipients[reminder.id], reminder.recipient_suppressed)


def _terminal_key(t: _Terminal) -> tuple[uuid.UUID, datetime]:
    return (t.delivery.reminder_id, t.delivery.run_time_utc)


@record
class _ToTake:
    """An occurrence to lease: the misfire plan chose `chosen`."""

    received: Received
    reminder: ReminderForSend
    profile: Profile | None
    zone: ZoneInfo | None
    chosen: datetime


class _Batch:
    """One begin transaction (its connection, and `now`: aware UTC) and what it decides,
    in the order it was decided."""

    def __init__(self, conn: Connection, now: datetime, decided: list[Decided]) -> None:
        self.conn = conn
        self.now = now
        self.decided = decided
        self.terminal: list[_Terminal] = []
        self.refused: list[tuple[uuid.UUID, datetime, Refusal]] = []
        self.to_take: list[_ToTake] = []
        self.begun: list[Begun] = []
        self.paused: list[Received] = []  # paused by their users while on their way
        self.holds: list[Hold] = []  # due in their users' quiet hours


class Begin:
    """Re-reads the batch's reminders, records what will not be sent, leases the rest.

    Rules (docs/design.md, "Delivery guarantees"): a cancel, pause or reschedule wins and
    is recorded `cancelled` (nothing is recorded for a reminder its user paused while the
    message was on its way: it is claimed again on resume); a recipient on the suppression
    list is recorded `suppressed` (read with the reminders, in the same statement; docs/design.md,
    "Suppression list"); the misfire policy picks what to send of what is already due and
    records older occurrences `missed`; an occurrence due while its user's quiet hours
    are on (read in the profile's zone as it is now) is handed back until they end and
    recorded on its reminder (`held_until`; docs/design.md, "Quiet hours"); each
    occurrence to send gets its unique delivery
    row as `sending` under a fresh lease token, or takes over a row whose lease ended. An
    occurrence already terminal is a DUPLICATE; one under another worker's live lease is
    BUSY and comes back when that lease ends.

    Args:
        engine: database engine.
        profiles: the users' addresses and zones, read for every batch.
        lease_s: a `sending` row whose lease is older than this is taken over.
        schedule_config: recurrence limits and the all-day fire time.
        retry: for the backoff of a message whose profile could not be read.
        leaseless: the queue's first receive of an occurrence is exclusive and the
            provider delivers each key once: a first send that needs no lease
            (`_leaseless`) gets none, and its delivery row is written once, with its
            outcome (docs/design.md, "First sends without a lease").
    """

    def __init__(
        self,
        engine: Engine,
        profiles: ProfileSource,
        *,
        lease_s: float,
        schedule_config: ScheduleConfig,
        retry: RetryPolicy,
        leaseless: bool = False,
    ) -> None:
        self._engine = engine
        self._profiles = profiles
        self.lease_s = lease_s
        self.schedule_config = schedule_config
        self.retry = retry
        self.leaseless = leaseless

    def run(self, received: Sequence[Received], now: datetime) -> tuple[list[Begun], list[Decided]]:
        """Begin `received` at `now` (aware UTC).

        Returns:
            (begun, decided): the occurrences leased to this sender, sorted by key, and
            the messages decided without a provider call.

        Side effects: one read (the reminders, with their recipients' place on the
        suppression list), a statement of its own, then one committed
        transaction when there is something to write (delivery rows inserted or taken
        over, terminal rows, reminders moved on or paused).

        Raises:
            sqlalchemy.exc.DBAPIError: the database failed; nothing was committed.
        """
        decided: list[Decided] = []
        live = self._with_profiles(received, decided)
        if not live:
            return [], decided
        with self._engine.connect() as conn:
            batch = _Batch(conn, now, decided)
            # The read is a statement of its own (autocommit: no BEGIN and COMMIT round
            # trips). It takes no locks, and reads the reminders and the suppression list
            # in one snapshot. The transaction begins with the first statement after it
            # (autobegin) and is committed below; a batch of first sends without a lease
            # needs none.
            # Reminders by UUID.int: a C hash (UUID.__hash__ runs in Python); the same
            # reminder twice in `ids` is read once.
            ids = [r.occurrence.reminder_id for r, _ in live]
            # Each reminder's recipient is looked up on the suppression list by the same
            # statement (one user, so one profile and one address, per reminder).
            recipients = {
                r.occurrence.reminder_id: address
                for r, p in live
                if p is not None and (address := listed_form(p.email)) is not None
            }
            found = {
                r.id.int: r
                for r in reminders.get_many_for_send(
                    conn, ids, recipients=recipients, autocommit=True
                )
            }
            for r, profile in live:
                reminder = found.get(r.occurrence.reminder_id.int)
                self._decide(batch, r, reminder, profile, _refusal(reminder, recipients))
            self._record_terminal(batch)
            self._record_paused(batch)
            reminders.hold_many(conn, batch.holds)
            record_refusals(conn, batch.refused, now=now)  # pause (recurring) or fail
            if batch.to_take:
                self._take(batch)
            if conn.in_transaction():
                conn.commit()
        return batch.begun, batch.decided

    def _with_profiles(
        self, received: Sequence[Received], decided: list[Decided]
    ) -> list[tuple[Received, Profile | None]]:
        """Each occurrence with its user's profile (one read per user); a profile service
        that cannot answer hands the message back for a backoff."""
        cache: dict[str, Profile | InfrastructureError | None] = {}
        live: list[tuple[Received, Profile | None]] = []
        for r in received:
            user_id = r.occurrence.user_id
            if user_id not in cache:
                try:
                    cache[user_id] = self._profiles.get(user_id)
                except InfrastructureError as exc:
                    cache[user_id] = exc
            found = cache[user_id]
            if isinstance(found, InfrastructureError):
                decided.append(retry_decision(self.retry, r, found, provider=None))
            else:
                live.append((r, found))
        return live

    def _decide(
        self,
        batch: _Batch,
        r: Received,
        reminder: ReminderForSend | None,
        profile: Profile | None,
        refusal: Refusal | None,
    ) -> None:
        """Decide one occurrence against its reminder as read now (rules: class doc)."""
        occ = r.occurrence
        if reminder is None:
            log.error("delivery dropped: unknown reminder", extra=_fields(r))
            batch.decided.append(Decided.of(r, Outcome.DROPPED))
        elif occ.replay:
            self._decide_replay(batch, r, reminder, profile, refusal)
        elif (
            reminder.status == ReminderStatus.PAUSED
            and reminder.next_run_utc == occ.run_time_utc
            and paused_refusal(reminder, occ.run_time_utc) is None
        ):
            # Paused by its user while this message was on its way: the occurrence is
            # still the reminder's next one and is claimed again on resume (same key), so
            # nothing is recorded (a `cancelled` row would make the resumed reminder fail
            # as a duplicate), unless the provider reported its send (`_record_paused`).
            batch.paused.append(r)
        elif not still_due(reminder, occ.run_time_utc):
            status, error = DeliveryStatus.CANCELLED, f"superseded: reminder is {reminder.status}"
            if (held := paused_refusal(reminder, occ.run_time_utc)) is not None:
                status, error = DeliveryStatus.SUPPRESSED, held.error
                batch.refused.append((occ.reminder_id, occ.run_time_utc, held))
            batch.terminal.append(_Terminal.of(r, occ, occ.run_time_utc, status, error))
        elif refusal is not None:
            batch.terminal.append(
                _Terminal.of(r, occ, occ.run_time_utc, DeliveryStatus.SUPPRESSED, refusal.error)
            )
            batch.refused.append((occ.reminder_id, occ.run_time_utc, refusal))
        elif not self._held(batch, r, profile):
            self._apply_misfire(batch, r, reminder, profile)

    def _held(self, batch: _Batch, r: Received, profile: Profile | None) -> bool:
        """Hand `r` back until its user's quiet hours end, if they are on now; True if so."""
        if profile is None or not profile.quiet_hours:
            return False
        until = quiet_until(batch.now, profile.quiet_hours, ZoneInfo(profile.timezone))
        if until is None:
            return False
        occ = r.occurrence
        batch.holds.append(Hold(occ.reminder_id, occ.run_time_utc, until))
        hide = (until - batch.now).total_seconds()
        batch.decided.append(Decided.of(r, Outcome.HELD, hide_for_s=hide))
        log.info("delivery held by quiet hours", extra=_fields(r, held_until=until))
        return True

    def _decide_replay(
        self,
        batch: _Batch,
        r: Received,
        reminder: ReminderForSend,
        profile: Profile | None,
        refusal: Refusal | None,
    ) -> None:
        """A replay sends exactly the occurrence it names, unless its reminder was
        cancelled or paused meanwhile, or its recipient is suppressed; quiet hours hold it
        like any occurrence."""
        occ, conn, now = r.occurrence, batch.conn, batch.now
        if reminder.status in (ReminderStatus.CANCELLED, ReminderStatus.PAUSED):
            delivery_log.cancel_replay(
                conn, reminder_id=occ.reminder_id, run_time_utc=occ.run_time_utc,
                error=f"replay skipped: reminder is {reminder.status}", now=now,
            )  # fmt: skip
            batch.decided.append(Decided.of(r, Outcome.CANCELLED))
        elif refusal is not None:
            assert profile is not None  # a refusal is found by the profile's address
            suppress_replay(
                conn, reminder_id=occ.reminder_id, run_time_utc=occ.run_time_utc,
                recipient=profile.email, refusal=refusal, now=now,
            )  # fmt: skip
            batch.decided.append(Decided.of(r, Outcome.SUPPRESSED))
        elif not self._held(batch, r, profile):
            zone = zone_or_none(reminder.timezone, profile)
            batch.to_take.append(_ToTake(r, reminder, profile, zone, occ.run_time_utc))

    def _apply_misfire(
        self, batch: _Batch, r: Received, reminder: ReminderForSend, profile: Profile | None
    ) -> None:
        """Pick what to send of what is already due (misfire policy, docs/design.md,
        "Missed runs"); record the older occurrences `missed`; a reminder with nothing
        left to send moves on."""
        occ, conn, now = r.occurrence, batch.conn, batch.now
        zone = zone_or_none(reminder.timezone, profile)
        plan = self._plan(batch, reminder, r, zone)
        for missed in plan.missed:
            log.info("delivery missed", extra=delivery_fields(occ.reminder_id, missed, None, None))
            batch.terminal.append(
                _Terminal.of(None, occ, missed, DeliveryStatus.MISSED,
                             f"missed: {(now - missed).total_seconds():.0f} s late, "
                             f"misfire policy {reminder.misfire_policy}")
            )  # fmt: skip
        if plan.send is None:
            reminder_services.advance(
                conn, reminder_id=occ.reminder_id, occurrence_utc=occ.run_time_utc, zone=zone,
                after=now, sent=True, error=None, now=now, config=self.schedule_config,
            )  # fmt: skip
            batch.decided.append(Decided.of(r, Outcome.MISSED))
        else:
            batch.to_take.append(_ToTake(r, reminder, profile, zone, plan.send))

    def _plan(
        self, batch: _Batch, reminder: ReminderForSend, r: Received, zone: ZoneInfo | None
    ) -> MisfirePlan:
        """Which due occurrence to send now, and which to record as missed."""
        occ, conn, now = r.occurrence, batch.conn, batch.now
        due = [occ.run_time_utc]
        if reminder.rrule is not None and zone is not None and now > occ.run_time_utc:
            try:
                due += occurrences_between(
                    schedule_of(stored_of(reminder), self.schedule_config), zone, occ.run_time_utc,
                    now, limits=self.schedule_config.limits,
                )  # fmt: skip
            except InvalidSchedule as exc:
                log.warning("cannot list due occurrences", extra=_fields(r, error=exc))
        if len(due) > 1:
            in_flight = delivery_log.get_in_flight(
                conn, reminder_id=occ.reminder_id, from_utc=occ.run_time_utc
            )
            if in_flight is not None and in_flight in due:
                # An earlier attempt already chose this one: keep it (its row is `sending`).
                return MisfirePlan(send=in_flight, missed=tuple(d for d in due if d < in_flight))
        return plan_misfire(
            reminder.misfire_policy, due, now=now, max_lateness_s=reminder.max_lateness_s,
            held_until=held_for(reminder, occ.run_time_utc),
        )  # fmt: skip

    def _record_terminal(self, batch: _Batch) -> None:
        """Record the terminal occurrences (one statement, in key order, one row per key:
        an upsert may not touch a row twice); an occurrence that already has a row is a
        DUPLICATE (e.g. `sent` by the first copy)."""
        if not batch.terminal:
            return
        conn, now = batch.conn, batch.now
        distinct: dict[tuple[uuid.UUID, datetime], TerminalDelivery] = {}
        for t in sorted(batch.terminal, key=_terminal_key):
            distinct.setdefault(_terminal_key(t), t.delivery)
        recorded = delivery_log.record_terminal_many(
            conn,
            list(distinct.values()),
            now=now,
            lease_expired_before=now - timedelta(seconds=self.lease_s),
        )
        # A row the provider reported sent (its sender died) was recorded `sent`: the
        # email went out, so no refusal fails or pauses its reminder for it.
        sent = {key for key, status in recorded.items() if status == DeliveryStatus.SENT}
        batch.refused = [f for f in batch.refused if (f[0], f[1]) not in sent]
        for t in batch.terminal:
            if t.received is None:
                continue
            key = _terminal_key(t)
            if key not in recorded:
                outcome = Outcome.DUPLICATE
            elif key in sent:
                log.info(
                    "send recovered from provider feedback: recorded sent though its"
                    " reminder no longer wants it (the email went out)",
                    extra=_fields(t.received),
                )
                outcome = Outcome.SENT
            elif t.delivery.status is DeliveryStatus.SUPPRESSED:
                outcome = Outcome.SUPPRESSED
            else:
                outcome = Outcome.CANCELLED
            batch.decided.append(Decided.of(t.received, outcome))

    def _record_paused(self, batch: _Batch) -> None:
        """Decide the occurrences of reminders paused while on their way: CANCELLED
        (nothing recorded; claimed again on resume), or SENT when their `sending` row
        carries the provider's evidence of the send (one statement for the batch)."""
        if not batch.paused:
            return
        sent = delivery_log.record_evidenced_sent_many(
            batch.conn,
            [r.occurrence.key for r in batch.paused],
            now=batch.now,
            lease_expired_before=batch.now - timedelta(seconds=self.lease_s),
        )
        for r in batch.paused:
            occ = r.occurrence
            outcome = Outcome.SENT if (occ.reminder_id, occ.run_time_utc) in sent else None
            batch.decided.append(Decided.of(r, outcome or Outcome.CANCELLED))

    def _take(self, batch: _Batch) -> None:
        """Insert (or take over) the delivery rows of `batch.to_take` as `sending` under
        fresh lease tokens, in key order (two senders lock the same rows in the same
        order); decide BUSY / DUPLICATE for those that could not be taken. A first send
        that needs no lease (`_leaseless`) gets none: no row is written for it here."""
        conn, now = batch.conn, batch.now
        # Keys by UUID.int (the UUIDs' own order; int hashes and compares in C, a UUID's
        # __hash__ and __lt__ run in Python).
        batch.to_take.sort(key=lambda t: (t.received.occurrence.reminder_id.int, t.chosen))
        tokens: list[tuple[uuid.UUID, _ToTake]] = []
        order: list[tuple[uuid.UUID | None, _ToTake]] = []  # None: leaseless
        seen: set[tuple[int, datetime]] = set()
        for t in batch.to_take:
            key = (t.received.occurrence.reminder_id.int, t.chosen)
            if key in seen:  # two messages chose one occurrence: the first carries it
                batch.decided.append(Decided.of(t.received, Outcome.DUPLICATE))
            elif self._leaseless(t):
                seen.add(key)
                order.append((None, t))
            else:
                seen.add(key)
                token = uuid.uuid4()
                tokens.append((token, t))
                order.append((token, t))
        rows = []
        if tokens:
            rows = delivery_log.begin_many(
                conn,
                [
                    DeliveryToBegin(reminder_id=t.received.occurrence.reminder_id,
                                    user_id=t.reminder.user_id, run_time_utc=t.chosen,
                                    lease_token=token, held_until=held_for(t.reminder, t.chosen))
                    for token, t in tokens
                ],
                now=now,
                lease_expired_before=now - timedelta(seconds=self.lease_s),
            )  # fmt: skip
        taken = {row.lease_token.int: row for row in rows}
        for maybe_token, t in order:
            if maybe_token is None:
                batch.begun.append(
                    Begun(received=t.received, reminder=t.reminder, profile=t.profile,
                          zone=t.zone, chosen=t.chosen, delivery_id=uuid.uuid4(),
                          lease_token=None, pinned=None, taken_over=False)
                )  # fmt: skip
                continue
            row = taken.get(maybe_token.int)
            if row is None:
                batch.decided.append(self._not_taken(batch, t))
                continue
            accepted = (
                SendReceipt(provider=row.provider, provider_message_id=row.provider_message_id)
                if row.provider_message_id is not None and row.provider is not None
                else None
            )
            batch.begun.append(
                Begun(received=t.received, reminder=t.reminder, profile=t.profile, zone=t.zone,
                      chosen=t.chosen, delivery_id=row.id, lease_token=maybe_token,
                      pinned=row.provider, taken_over=row.taken_over, accepted=accepted,
                      accepted_at=row.sent_at if accepted else None,
                      accepted_to=row.recipient if accepted else None)
            )  # fmt: skip

    def lease(self, begun: Begun, now: datetime) -> Begun | None:
        """Lease a first send without a lease (its first provider call failed and will be
        retried): its delivery row inserted `sending` under a fresh lease token, in a
        transaction of its own, as `_take` would have. Returns the leased occurrence, or
        None when the occurrence has a row another copy holds or ended (its holder
        records it; this send is handed back).

        Raises:
            sqlalchemy.exc.DBAPIError: the database failed; nothing was committed.
        """
        token = uuid.uuid4()
        occ = begun.occurrence
        with self._engine.begin() as conn:
            rows = delivery_log.begin_many(
                conn,
                [DeliveryToBegin(reminder_id=occ.reminder_id, user_id=begun.reminder.user_id,
                                 run_time_utc=begun.chosen, lease_token=token,
                                 held_until=begun.held_until)],
                now=now,
                lease_expired_before=now - timedelta(seconds=self.lease_s),
            )  # fmt: skip
        if not rows:
            return None
        (row,) = rows
        return dataclasses.replace(
            begun, delivery_id=row.id, lease_token=token, pinned=row.provider,
            taken_over=row.taken_over,
        )  # fmt: skip

    def _leaseless(self, t: _ToTake) -> bool:
        """Whether `t` is sent without a `sending` row (docs/design.md, "First sends
        without a lease"): this sender may (`leaseless`), the message is received for the
        first time and is no replay (so, on a queue whose first receive is exclusive, it
        is the only copy of its occurrence in flight), its reminder is a one-time email
        (no misfire choice to keep for a retry, no webhook receiver that may not
        deduplicate) of the version the message was claimed at (a change since may have
        made another copy: a pause and resume), and no delivery row of the occurrence
        exists (no pin of an earlier attempt, no provider evidence, nothing ended)."""
        occ, reminder = t.received.occurrence, t.reminder
        return (
            self.leaseless
            and t.received.message.receive_count == 1
            and not occ.replay
            and reminder.rrule is None
            and reminder.webhook_url is None
            and reminder.version == occ.version
            and not reminder.delivery_recorded
            and t.chosen == occ.run_time_utc == reminder.next_run_utc
        )

    def _not_taken(self, batch: _Batch, t: _ToTake) -> Decided:
        """The occurrence is held by another worker (BUSY) or already terminal."""
        occ, conn, now = t.received.occurrence, batch.conn, batch.now
        status = delivery_log.get_status(conn, reminder_id=occ.reminder_id, run_time_utc=t.chosen)
        if status is DeliveryStatus.SENDING:
            # Come back when the holder's lease ends (not at every visibility timeout,
            # which would burn receives toward the dead-letter queue).
            left = delivery_log.get_lease_left(
                conn, reminder_id=occ.reminder_id, run_time_utc=t.chosen, lease_s=self.lease_s,
                now=now,
            )  # fmt: skip
            hide = left + 1 if left is not None else None
            return Decided.of(t.received, Outcome.BUSY, run_time_utc=t.chosen, hide_for_s=hide)
        # Already terminal, yet the reminder still points here (e.g. re-driven after a
        # crash, or its sender died between recording the send and moving the reminder
        # on): move it on instead of looping.
        reminder_services.advance(
            conn, reminder_id=occ.reminder_id, occurrence_utc=occ.run_time_utc, zone=t.zone,
            after=t.chosen, error=None, now=now, config=self.schedule_config,
            sent=status in (DeliveryStatus.SENT, DeliveryStatus.BOUNCED,
                            DeliveryStatus.COMPLAINED),
        )  # fmt: skip
        return Decided.of(t.received, Outcome.DUPLICATE, run_time_utc=t.chosen)


def still_due(reminder: ReminderForSend | ReminderSendState, run_time_utc: datetime) -> bool:
    """True when the reminder still wants this occurrence (no cancel, pause or reschedule)."""
    return (
        reminder.status in (ReminderStatus.CLAIMED, ReminderStatus.PENDING)
        and reminder.next_run_utc == run_time_utc
    )


def retry_decision(
    policy: RetryPolicy, r: Received, exc: Exception, *, provider: str | None
) -> Decided:
    """Hand `r` back for a backoff (Retry-After wins); the next receive retries it, up to
    the queue's maximum receive count (then the DLQ). Logs "delivery retry"."""
    hide = requeue_delay_s(policy, r.message.receive_count, getattr(exc, "retry_after_s", None))
    log.warning("delivery retry", extra=_fields(r, provider, retry_in_s=hide, error=exc))
    return Decided.of(r, Outcome.RETRY, hide_for_s=hide, error=exc)


def _fields(r: Received, provider: str | None = None, **more: object) -> dict[str, object]:
    occ = r.occurrence
    return delivery_fields(
        occ.reminder_id, occ.run_time_utc, r.message.receive_count, provider, **more
    )
