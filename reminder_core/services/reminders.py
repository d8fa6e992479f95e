"""The state changes of a reminder (docs/design.md, "Reminder states"), written through
`reminder_core.store.reminders`: the user's create, update, pause, resume and cancel (API
routes); the coordinator's claim and the maintenance workload's claim rescue; the
sender's advance past an occurrence; the suppression list's pause, refusal at send time
and resume; the completion of a replayed dead letter. No other module writes a
reminder's row (tests/unit/test_store_rules.py checks it); the one transition made
elsewhere is a one-time reminder finished by `store.delivery_log.complete_many`,
atomically with its delivery row (docs/design.md, "Streaming completer").

Every function runs on the caller's `Connection` and never commits; a function that
takes a `locked` record expects it read with `lock` in the same transaction. Errors are
the domain errors of `reminder_core.errors` (the API answers them as problem+json).
"""

from __future__ import annotations

import dataclasses
import uuid
from collections.abc import Callable, Collection, Sequence
from dataclasses import dataclass
from datetime import datetime
from zoneinfo import ZoneInfo

from sqlalchemy import Connection

from reminder_core.domain.recurrence import (
    CountProgress,
    next_occurrence_and_progress,
)
from reminder_core.domain.states import CANCELLABLE, ReminderStatus
from reminder_core.errors import Conflict, InvalidSchedule, NotFound, QuotaExceeded, RateRefused
from reminder_core.quotas import Quotas, check_occurrences_per_day, check_one_more_live
from reminder_core.scheduling import (
    ScheduleConfig,
    StoredSchedule,
    accepted_schedule,
    schedule_of,
    stored_of,
)
from reminder_core.store import queue_messages
from reminder_core.store import reminders as store
from reminder_core.store.outbox import OutboxRow
from reminder_core.store.rate_limits import RateTake
from reminder_core.store.reminders import (
    NewReminder,
    ReminderAdvance,
    ReminderRecord,
    ReminderToAdvance,
    RescuedClaim,
    SendRefusal,
    SuppressionRepoint,
    SuppressionResume,
)

#: The states in which a reminder will still send: its next occurrence is kept.
LIVE = CANCELLABLE


@dataclass(frozen=True, slots=True)
class ReminderContent:
    """What a user writes of a reminder, validated by the caller except for its rule.

    Attributes:
        schedule: the stored schedule columns (parsed; the rule is compiled here).
        timezone: the reminder's fixed IANA zone, None to follow the user's profile.
        misfire_policy: "latest", "skip" or "all"; max_lateness_s: seconds.
    """

    title: str
    body: str | None
    schedule: StoredSchedule
    timezone: str | None
    misfire_policy: str
    max_lateness_s: int


@dataclass(frozen=True, slots=True)
class ReminderDraft:
    """A reminder to create: its content, its owner, and its idempotency key
    (`client_request_id`, None when none was given) with the hash of the request body
    it came with (same key + other body → Conflict; None without a key)."""

    user_id: str
    content: ReminderContent
    client_request_id: str | None
    request_fingerprint: str | None
    snoozed_from: uuid.UUID | None = None  # a snooze link of that reminder made it
    webhook_endpoint_id: uuid.UUID | None = None  # the webhook channel (None: email)


@dataclass(frozen=True, slots=True)
class ReminderEdit:
    """The content a reminder should have after a change (the caller merged the request
    with the locked record); `schedule_changed` says whether the schedule or the zone
    were given, so that next_run_utc is computed again; `exdates_carried` that the
    exclusions were kept from before the change rather than given with it."""

    content: ReminderContent
    schedule_changed: bool
    exdates_carried: bool = False


@dataclass(frozen=True, slots=True)
class Created:
    """The reminder a create answered with; `replayed` is True when it was created
    earlier with the same idempotency key and body (nothing was written now)."""

    reminder: ReminderRecord
    replayed: bool


def find_replay(
    conn: Connection,
    *,
    user_id: str,
    client_request_id: str,
    request_fingerprint: str,
    alone: bool = False,
) -> ReminderRecord | None:
    """The reminder created earlier with this idempotency key, if any. With `alone` and
    no transaction on `conn`, read outside any (one round trip, and `conn` stays free of a
    transaction for `create(alone=True)`, issue 15); else in the caller's.

    Raises:
        Conflict: the key was used with another request body.
    """
    existing = store.get_by_request_id(
        conn,
        user_id=user_id,
        client_request_id=client_request_id,
        autocommit=alone and not conn.in_transaction(),
    )
    if existing is not None and existing.request_fingerprint != request_fingerprint:
        raise Conflict("this idempotency key was already used with a different request body")
    return existing


def _replay_after_lock(conn: Connection, draft: ReminderDraft) -> ReminderRecord | None:
    """The reminder an earlier request with `draft`'s idempotency key created, read after
    the quota's lock was taken (so a concurrent one that committed is seen), or None
    (also without a key).

    Raises:
        Conflict: the key was used with another request body.
    """
    if draft.client_request_id is None or draft.request_fingerprint is None:
        return None
    return find_replay(
        conn,
        user_id=draft.user_id,
        client_request_id=draft.client_request_id,
        request_fingerprint=draft.request_fingerprint,
    )


def create(
    conn: Connection,
    draft: ReminderDraft,
    *,
    zone: ZoneInfo,
    now: datetime,
    config: ScheduleConfig,
    quotas: Quotas,
    alone: bool = False,
    take: RateTake | None = None,
) -> Created:
    """Create a reminder: `pending` at its first occurrence at or after `now` (aware
    UTC) in `zone` (docs/design.md, "next_run_utc"). Idempotent on
    `draft.client_request_id`: a concurrent create with the same key is waited for and
    answered as a replay (a replay is answered even at the quota).

    Side effects: takes the user's quota lock (until the transaction ends), one INSERT in
    the caller's transaction. With `alone` (the create is the caller's only write, and
    `conn` is outside a transaction: `POST /v1/reminders`), the common case (the user
    has a bound, within the quota) is one statement committed as it runs (the bound's
    raise and the INSERT together, or neither); a later `conn.commit()` commits only what
    follows it (the wake-up of a reminder due soon). The other cases, and every create
    without `alone` (an import's events, a snooze), run in the caller's transaction.

    `take` (with `alone` only): the request's rate-limit take, run in that same first
    statement at its own `take.clock()` (`store.reminders.take_and_insert_within_bound`),
    its outcome given to `take.record` as soon as it has run; refused, nothing is written.

    Raises:
        RateRefused: (`take` only) the request is past the user's rate budget.
        InvalidSchedule: the rule cannot be accepted, or the reminder has no occurrence
            at or after now (naming the field).
        Conflict: the idempotency key was used with another request body.
        QuotaExceeded: the user is at QUOTA_LIVE_REMINDERS, or the rule fires more than
            QUOTA_OCCURRENCES_PER_DAY times in a local day; nothing was written.
    """
    content = draft.content
    compiled, next_run = accepted_schedule(content.schedule, zone, now, config)
    check_occurrences_per_day(compiled, zone, next_run, quotas=quotas, limits=config.limits)
    new = NewReminder(
        user_id=draft.user_id,
        title=content.title,
        body=content.body,
        start_local=content.schedule.start_local,
        all_day=content.schedule.all_day,
        timezone=content.timezone,
        rrule=compiled.rule.text if compiled.rule is not None else None,
        exdates=content.schedule.exdates,
        dst_nonexistent=content.schedule.nonexistent,
        dst_ambiguous=content.schedule.ambiguous,
        misfire_policy=content.misfire_policy,
        max_lateness_s=content.max_lateness_s,
        next_run_utc=next_run,
        client_request_id=draft.client_request_id,
        request_fingerprint=draft.request_fingerprint,
        snoozed_from=draft.snoozed_from,
        webhook_endpoint_id=draft.webhook_endpoint_id,
    )
    # The fast path, one statement: below the quota, the bound raised and the insert
    # (check_one_more_live's rule without its own round trips; issue 15). Atomic by
    # itself, so a caller outside a transaction runs it as its own (no BEGIN, no COMMIT);
    # it writes nothing when it falls through.
    cap = quotas.live_reminders
    own = alone and not conn.in_transaction()
    if take is not None and not own:
        raise ValueError("a create takes the rate limit only alone, outside a transaction")
    if take is None:
        fast = store.insert_within_bound(conn, new, now=now, cap=cap, autocommit=own)
    else:
        fast = store.take_and_insert_within_bound(conn, new, now=now, cap=cap, take=take)
        assert fast.taken is not None
        take.record(fast.taken)
        if not fast.taken.taken:
            raise RateRefused(draft.user_id)
    if fast.created is not None:
        return Created(fast.created, replayed=False)
    if fast.live_bound is not None:
        # Raised and not inserted: the idempotency key was used before (the insert waited
        # for a concurrent request with it). The raise stays: an upper bound one too high
        # costs nothing, the exact count at the quota corrects it.
        return Created(_replay_of(conn, draft), replayed=True)
    # No bound yet (start it), or at the quota (count exactly), in the caller's
    # transaction, under the bound's lock.
    try:
        check_one_more_live(conn, user_id=draft.user_id, quotas=quotas)
    except QuotaExceeded:
        # A concurrent create with this key may have taken the last free place while
        # this request waited for the quota's lock: the retry is answered as its replay.
        earlier = _replay_after_lock(conn, draft)
        if earlier is None:
            raise
        return Created(earlier, replayed=True)
    earlier = _replay_after_lock(conn, draft)  # created while this request waited
    if earlier is not None:
        return Created(earlier, replayed=True)
    created = store.insert(conn, new, now=now)
    if created is not None:
        return Created(created, replayed=False)
    # A concurrent request with the same key won the race (the insert waited for it).
    return Created(_replay_of(conn, draft), replayed=True)


def _replay_of(conn: Connection, draft: ReminderDraft) -> ReminderRecord:
    """The reminder that made `draft`'s insert do nothing: created earlier (or by a
    concurrent request, which the insert waited for) with its idempotency key.

    Raises:
        Conflict: the key was used with another request body, or (never expected: the
            insert's conflict implies the row) no such reminder.
    """
    existing = find_replay(
        conn,
        user_id=draft.user_id,
        client_request_id=draft.client_request_id or "",
        request_fingerprint=draft.request_fingerprint or "",  # keyed: fingerprinted
    )
    if existing is None:  # pragma: no cover - the conflict implies the row exists
        raise Conflict("idempotency key in use; retry")
    return existing


def lock(conn: Connection, *, user_id: str, reminder_id: uuid.UUID) -> ReminderRecord:
    """The user's reminder, row-locked until the caller's transaction ends.

    Raises:
        NotFound: no such reminder for this user.
    """
    found = store.lock(conn, user_id=user_id, reminder_id=reminder_id)
    if found is None:
        raise NotFound(f"reminder {reminder_id} not found")
    return found


def update(
    conn: Connection,
    locked: ReminderRecord,
    edit: ReminderEdit,
    *,
    zone: Callable[[str | None], ZoneInfo],
    now: datetime,
    config: ScheduleConfig,
    quotas: Quotas,
) -> ReminderRecord:
    """Change title, body, schedule or policies; version + 1. A schedule change
    recomputes next_run_utc from `now` (aware UTC) in `zone(timezone)` and, unless
    the reminder is paused, makes it `pending` again: an occurrence claimed but not yet
    sent is then recorded `cancelled` by the sender (docs/design.md, "A cancel or change
    wins"). A finished (completed or failed) reminder given a schedule with occurrences
    left is live again.

    Raises:
        Conflict: the reminder is cancelled.
        InvalidSchedule: the new schedule cannot be accepted or has no occurrence left.
        QuotaExceeded: the new rule fires more than QUOTA_OCCURRENCES_PER_DAY times in a
            local day, or a finished reminder made live again would take the user past
            QUOTA_LIVE_REMINDERS; nothing was written.
    """
    if locked.status == ReminderStatus.CANCELLED:
        raise Conflict("reminder is cancelled; create a new one")
    content = edit.content
    changed = dataclasses.replace(
        locked,
        title=content.title,
        body=content.body,
        misfire_policy=content.misfire_policy,
        max_lateness_s=content.max_lateness_s,
    )
    if edit.schedule_changed:
        in_zone = zone(content.timezone)
        compiled, next_run = accepted_schedule(
            content.schedule, in_zone, now, config, exdates_carried=edit.exdates_carried
        )
        check_occurrences_per_day(compiled, in_zone, next_run, quotas=quotas, limits=config.limits)
        changed = dataclasses.replace(
            changed,
            start_local=content.schedule.start_local,
            all_day=content.schedule.all_day,
            rrule=compiled.rule.text if compiled.rule is not None else None,
            exdates=content.schedule.exdates,
            dst_nonexistent=content.schedule.nonexistent,
            dst_ambiguous=content.schedule.ambiguous,
            timezone=content.timezone,
            next_run_utc=next_run,
            count_progress=None,  # counted under the old schedule (and maybe zone)
        )
        if locked.status != ReminderStatus.PAUSED:
            changed = dataclasses.replace(
                changed,
                status=ReminderStatus.PENDING,
                claimed_by=None,
                claimed_at=None,
                last_error=None,
            )
        if locked.status not in LIVE:  # finished, live again: one more live reminder
            check_one_more_live(conn, user_id=locked.user_id, quotas=quotas)
    return _write(conn, changed, now)


def pause(conn: Connection, locked: ReminderRecord, *, now: datetime) -> ReminderRecord:
    """Stop sending until resumed (pending or claimed → paused; an occurrence claimed
    but not sent is not sent). A reminder paused by a suppression becomes the user's
    pause: it no longer resumes by itself when the address changes. Pausing a reminder
    the user paused changes nothing.

    Raises:
        Conflict: the reminder is completed, failed or cancelled.
    """
    if locked.status in (ReminderStatus.PENDING, ReminderStatus.CLAIMED) or (
        locked.status == ReminderStatus.PAUSED and locked.suppressed_address is not None
    ):
        paused = dataclasses.replace(
            locked, status=ReminderStatus.PAUSED, claimed_by=None, claimed_at=None
        )
        return _write(conn, _without_suppression(paused), now)
    if locked.status != ReminderStatus.PAUSED:
        raise Conflict(f"reminder is {locked.status}; only live reminders can be paused")
    return locked


def resume(
    conn: Connection,
    locked: ReminderRecord,
    *,
    zone: Callable[[str | None], ZoneInfo],
    now: datetime,
    config: ScheduleConfig,
) -> ReminderRecord:
    """Send again (paused → pending). A recurring reminder continues with its first
    occurrence at or after `now` (aware UTC) in `zone(timezone)` (occurrences during the
    pause are not sent; none left → completed); a one-time reminder whose time passed
    while paused is sent now, subject to its misfire policy. A reminder paused by a
    suppression resumes too. A reminder already pending or claimed is returned as it is.

    Raises:
        Conflict: the reminder is completed, failed or cancelled.
        InvalidSchedule: ("timezone") no zone is known for a recurring reminder.
    """
    if locked.status in (ReminderStatus.PENDING, ReminderStatus.CLAIMED):
        return locked
    if locked.status != ReminderStatus.PAUSED:
        raise Conflict(f"reminder is {locked.status}; only paused reminders can be resumed")
    resumed = dataclasses.replace(locked, status=ReminderStatus.PENDING)
    if locked.rrule is not None:
        in_zone = zone(locked.timezone)
        found, progress = next_occurrence_and_progress(
            schedule_of(stored_of(locked), config),
            in_zone,
            now,
            inclusive=True,
            limits=config.limits,
            progress=locked.count_progress,
        )
        resumed = dataclasses.replace(
            resumed,
            next_run_utc=found,
            count_progress=progress,
            status=ReminderStatus.PENDING if found else ReminderStatus.COMPLETED,
        )
    return _write(conn, _without_suppression(resumed), now)


def cancel(
    conn: Connection, *, user_id: str, reminder_id: uuid.UUID, now: datetime
) -> ReminderRecord:
    """Cancel the reminder (pending, claimed or paused → cancelled): nothing more is
    sent; an occurrence claimed but not yet sent is recorded `cancelled` by the sender.
    Cancelling a cancelled reminder returns it unchanged.

    Raises:
        NotFound: no such reminder for this user.
        Conflict: the reminder is completed or failed.
    """
    cancelled = store.cancel(conn, user_id=user_id, reminder_id=reminder_id, now=now)
    if cancelled is not None:
        return cancelled
    current = store.get(conn, user_id=user_id, reminder_id=reminder_id)
    if current is None:
        raise NotFound(f"reminder {reminder_id} not found")
    if current.status != ReminderStatus.CANCELLED:
        raise Conflict(f"reminder is {current.status}; only live reminders can be cancelled")
    return current


def _without_suppression(record: ReminderRecord) -> ReminderRecord:
    return dataclasses.replace(
        record, paused_reason=None, suppressed_address=None, suppression_checked_at=None
    )


def _write(conn: Connection, changed: ReminderRecord, now: datetime) -> ReminderRecord:
    written = store.update(conn, changed, now=now)
    if written is None:  # pragma: no cover - the row is locked at this version
        raise Conflict("the reminder changed meanwhile; re-read it and try again")
    return written


# --- Workers: claim, rescue, advance, replay ----------------------------------------------------


def next_due(conn: Connection) -> datetime | None:
    """When the next pending reminder is due (aware UTC), None when none is pending."""
    return store.next_due(conn)


def claim_due(
    conn: Connection, *, horizon: datetime, now: datetime, limit: int, worker: str
) -> list[OutboxRow]:
    """pending → claimed: up to `limit` reminders due by `horizon` (aware UTC), claimed by
    `worker` at `now`, each with its outbox row written in the same statement
    (docs/design.md, "Claim and outbox"). Returns the outbox rows."""
    return store.claim_due(conn, horizon=horizon, now=now, limit=limit, worker=worker)


def claim_due_to_queue(
    conn: Connection, *, horizon: datetime, now: datetime, limit: int, worker: str, queue: str
) -> int:
    """pending → claimed, as `claim_due`, with each occurrence written straight into the
    PostgreSQL queue `queue` (its `queue_messages` row is the outbox row: claim and
    message commit together) and the queue's receivers woken at commit (NOTIFY).
    Returns how many were claimed (docs/design.md, "Claim and outbox")."""
    claimed = store.claim_due_to_queue(
        conn, horizon=horizon, now=now, limit=limit, worker=worker, queue=queue
    )
    if claimed:
        queue_messages.notify(conn, queue=queue)
    return claimed


def rescue_claimed(
    conn: Connection,
    *,
    cutoff: datetime,
    now: datetime,
    limit: int,
    live_queue: str | None = None,
) -> list[RescuedClaim]:
    """claimed → pending: up to `limit` reminders claimed before `cutoff` (aware UTC; their
    message was lost or their sender died), at the same next_run_utc (docs/design.md,
    "Every occurrence ends"); with `live_queue` (the PostgreSQL queue's name) not those
    whose message is still live in it."""
    return store.rescue_claimed(conn, cutoff=cutoff, now=now, limit=limit, live_queue=live_queue)


def complete_replayed(conn: Connection, *, reminder_id: uuid.UUID, now: datetime) -> None:
    """failed → completed: a one-time reminder that failed through the dead-letter queue
    and whose replayed occurrence was then sent."""
    store.complete_replayed(conn, reminder_id=reminder_id, now=now)


@dataclass(frozen=True, slots=True)
class Advance:
    """A reminder to move past one occurrence (see `advance` for the rules).

    Attributes:
        reminder_id: the reminder.
        occurrence_utc: aware UTC; the occurrence the reminder currently points at.
        zone: zone to compute the next occurrence in (None: unknown).
        after: aware UTC; the next occurrence is the first strictly after this.
        sent: whether the occurrence was delivered.
        error: recorded as last_error (None clears it).
    """

    reminder_id: uuid.UUID
    occurrence_utc: datetime
    zone: ZoneInfo | None
    after: datetime
    sent: bool
    error: str | None


@dataclass(frozen=True, slots=True)
class Decided:
    """Where a reminder goes after an occurrence: its status, next_run_utc (aware UTC;
    None: none left), last_error, and for a COUNT rule the count progress to keep."""

    status: ReminderStatus
    next_run_utc: datetime | None
    last_error: str | None
    count_progress: CountProgress | None


def decide_advance(
    current: ReminderToAdvance, advance: Advance, config: ScheduleConfig
) -> Decided | None:
    """Where a reminder goes after `advance`, or None when a user change (cancel, pause,
    reschedule) already moved it (docs/design.md, "A cancel or change wins").

    Args:
        current: the reminder as locked now (`reminders.lock_many_for_advance`).
        advance: the occurrence just handled.
        config: recurrence limits.

    Pure: computes the next occurrence (RFC 5545 §3.3.10 via domain.recurrence), no I/O.
    """
    if current.next_run_utc != advance.occurrence_utc or current.status not in (
        ReminderStatus.CLAIMED,
        ReminderStatus.PENDING,
    ):
        return None
    next_run: datetime | None = None
    progress: CountProgress | None = None
    broken: str | None = None  # the schedule itself cannot be computed any more
    if current.rrule is not None:
        if advance.zone is None:
            broken = "cannot compute the next occurrence: no time zone is known"
        else:
            try:
                next_run, progress = next_occurrence_and_progress(
                    schedule_of(stored_of(current), config),
                    advance.zone,
                    advance.after,
                    limits=config.limits,
                    progress=current.count_progress,
                )
            except InvalidSchedule as exc:
                broken = f"cannot compute the next occurrence: {exc}"
    if next_run is not None:
        status = ReminderStatus.PENDING
    elif broken is not None or (current.rrule is None and not advance.sent):
        status = ReminderStatus.FAILED
    else:
        status = ReminderStatus.COMPLETED  # one-time sent, or the rule has ended
    return Decided(status, next_run, broken or advance.error, progress)


def advance(
    conn: Connection,
    *,
    reminder_id: uuid.UUID,
    occurrence_utc: datetime,
    zone: ZoneInfo | None,
    after: datetime,
    sent: bool,
    error: str | None,
    now: datetime,
    config: ScheduleConfig,
) -> ReminderStatus | None:
    """Move a reminder whose current occurrence is `occurrence_utc` to its first
    occurrence strictly after `after`, computed from its current schedule (row-locked) in
    `zone`.

    Outcome: `pending` with the next occurrence; `completed` when there is none (a sent
    one-time reminder, or a rule that ended); `failed` for a one-time reminder whose only
    occurrence was not sent (`sent` False) or a rule that can no longer be computed.
    Nothing changes when a user change (cancel, pause, reschedule) already moved the
    reminder: a newer version is never overwritten (docs/design.md,
    "A cancel or change wins").

    Side effects: `advance_many` with this one reminder (row-locked, then updated in
    the caller's transaction).

    Returns:
        The new status, or None when nothing changed.
    """
    entry = Advance(reminder_id, occurrence_utc, zone, after, sent, error)
    return advance_many(conn, [entry], now=now, config=config).get(reminder_id)


def advance_many(
    conn: Connection, advances: Sequence[Advance], *, now: datetime, config: ScheduleConfig
) -> dict[uuid.UUID, ReminderStatus]:
    """`advance` for many reminders: one locking read (in id order) and one
    update for the whole set, in the caller's transaction.

    A reminder named more than once is advanced once per entry, in order, each from the
    state the previous one left.

    Returns:
        reminder id -> new status, for the reminders that changed.
    """
    if not advances:
        return {}
    ids = sorted({a.reminder_id for a in advances})
    rows = {r.id: r for r in store.lock_many_for_advance(conn, ids)}
    final: dict[uuid.UUID, tuple[datetime, Decided]] = {}
    for advance in advances:
        current = rows.get(advance.reminder_id)
        if current is None:
            continue
        decided = decide_advance(current, advance, config)
        if decided is None:
            continue
        first = final.get(advance.reminder_id)
        final[advance.reminder_id] = (first[0] if first else advance.occurrence_utc, decided)
        if len(ids) < len(advances):  # maybe named again: the next entry sees this one
            rows[advance.reminder_id] = dataclasses.replace(
                current,
                status=decided.status,
                next_run_utc=decided.next_run_utc,
                count_progress=decided.count_progress,
            )
    if final:
        store.advance_many(
            conn,
            [
                ReminderAdvance(
                    id=k,
                    run_time_utc=run_time,
                    status=d.status,
                    next_run_utc=d.next_run_utc,
                    last_error=d.last_error,
                    count_progress=d.count_progress,
                )
                for k, (run_time, d) in final.items()
            ],
            now=now,
        )
    return {k: d.status for k, (_, d) in final.items()}


# --- Suppression list: pause, refuse at send, resume ---------------------------------------------


def pause_for_suppression(
    conn: Connection, *, user_id: str, address: str, paused_reason: str, now: datetime
) -> list[uuid.UUID]:
    """pending/claimed → paused: every live reminder of `user_id`, whose address was just
    suppressed (a bounce or complaint), waiting on `address` (case-folded) with
    `paused_reason` shown to the user. Returns the paused ids in ascending order."""
    return store.pause_user_for_suppression(
        conn, user_id=user_id, address=address, paused_reason=paused_reason, now=now
    )


def suppress_at_send_many(
    conn: Connection, refusals: Sequence[SendRefusal], *, now: datetime
) -> dict[uuid.UUID, ReminderStatus]:
    """The sender refused an occurrence for a suppressed recipient: a recurring reminder
    → paused (waiting on the address), a one-time one → failed. Returns id → new status
    for the reminders still at those occurrences."""
    return store.suppress_at_send_many(conn, refusals, now=now)


def resume_many_from_suppression(
    conn: Connection, resumes: Sequence[SuppressionResume], *, now: datetime
) -> list[uuid.UUID]:
    """paused (by a suppression) → pending, completed or failed, as each resume says (the
    address was removed from the list, or the profile's address changed). Returns the
    ids resumed."""
    return store.resume_many_from_suppression(conn, resumes, now=now)


def repoint_many_suppression(
    conn: Connection, repoints: Sequence[SuppressionRepoint], *, now: datetime
) -> None:
    """paused → paused: reminders whose user's address changed to another suppressed
    address now wait on that one."""
    store.repoint_many_suppression(conn, repoints, now=now)


def mark_many_suppression_checked(
    conn: Connection, ids: Collection[uuid.UUID], *, now: datetime
) -> None:
    """Record that the paused reminders `ids` had their user's address checked at `now`
    (no state change: the maintenance workload checks again later)."""
    store.mark_many_suppression_checked(conn, ids, now=now)
