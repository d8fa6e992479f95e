"""The suppression list's state changes (docs/design.md, "Suppression list"): applying a
bounce or complaint to a delivery, the list and the user's reminders; finding suppressed
addresses for the sender; resuming reminders when the profile's address changes or an
entry is removed. The rules are the pure decisions of `reminder_core.domain.suppression`;
this module runs them in the caller's transaction (or, where it calls the profile source,
in short transactions of its own, never holding one open across a profile lookup)."""

from __future__ import annotations

import logging
import uuid
from collections.abc import Collection, Iterable, Mapping
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Protocol
from zoneinfo import ZoneInfo

from sqlalchemy import Connection, Engine

from reminder_core.domain.recurrence import next_occurrence
from reminder_core.domain.states import DeliveryStatus, ReminderStatus
from reminder_core.domain.suppression import (
    FeedbackDecision,
    FeedbackKind,
    ResumeAction,
    SuppressionReason,
    decide_feedback,
    decide_resume,
    normalize_address,
    pause_reason,
)
from reminder_core.errors import InfrastructureError, InvalidSchedule
from reminder_core.profiles import Profile, ProfileSource
from reminder_core.scheduling import ScheduleConfig, schedule_of, stored_of, zone_or_none
from reminder_core.services import reminders as reminder_services
from reminder_core.store import delivery_log, reminders, suppressions, webhook_events
from reminder_core.store.delivery_log import DeliveryRef
from reminder_core.store.reminders import (
    SendRefusal,
    SuppressedForResume,
    SuppressionRepoint,
    SuppressionResume,
)
from reminder_core.store.suppressions import SuppressionEntry
from reminder_core.text import storable, storable_message_id

log = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class Effects:
    """What applying one event changed.

    Attributes:
        delivery_status: the delivery's new status; None when it kept its own (a soft
            bounce, or a delivery that was not `sent` any more).
        suppressed_address: the case-folded address now on the list (None: soft bounce).
        newly_suppressed: False when the address was already on the list (its first
            entry and reason stay).
        paused_reminder_ids: the user's reminders this event paused, ascending.
    """

    delivery_status: DeliveryStatus | None = None
    suppressed_address: str | None = None
    newly_suppressed: bool = False
    paused_reminder_ids: tuple[uuid.UUID, ...] = ()


def find_delivery(
    conn: Connection, provider: str, provider_message_id: str | None
) -> DeliveryRef | None:
    """The delivery row whose (provider, provider_message_id) is this, or None. The id
    is looked up as the sender stored it (`reminder_core.text.storable_message_id`: as
    it is when PostgreSQL can hold it within MAX_MESSAGE_ID characters, else a storable
    prefix and the SHA-256 of the whole id), so an event's id matches its send, and none
    can fail the statement."""
    if not provider_message_id:
        return None
    return delivery_log.get_by_provider_message(
        conn,
        provider=storable(provider),
        provider_message_id=storable_message_id(provider_message_id),
    )


def apply_decision(
    conn: Connection,
    decision: FeedbackDecision,
    delivery: DeliveryRef,
    *,
    kind: FeedbackKind,
    recipient: str,
    reason: str,
    provider: str,
    event_id: str,
    now: datetime,
) -> Effects:
    """Carry out `decision` for an event about `delivery`, in the caller's transaction.

    Side effects (none for a soft bounce): the delivery, if still `sent`, becomes
    `bounced` / `complained` with `error` "<kind>: <reason>"; `recipient` (case-folded)
    is added to `suppressions` unless already there; the delivery's user's `pending` and
    `claimed` reminders become `paused` with `paused_reason` and `suppressed_address` (a
    user's reminders all go to the user's one address). Reminders are locked in id order.

    Raises:
        ValueError: `recipient` is empty (nothing can be suppressed).
    """
    if decision.suppress is None and decision.delivery_status is None:
        return Effects()
    status: DeliveryStatus | None = None
    if decision.delivery_status is not None:
        changed = delivery_log.record_feedback(
            conn,
            delivery_id=delivery.id,
            run_time_utc=delivery.run_time_utc,
            status=decision.delivery_status,
            error=f"{kind.value.replace('_', ' ')}: {reason}",
            now=now,
        )
        status = decision.delivery_status if changed else None
    if decision.suppress is None:
        return Effects(delivery_status=status)
    address = normalize_address(recipient)
    added = suppressions.add(
        conn,
        email=address,
        reason=decision.suppress,
        provider=provider,
        source_event_id=event_id,
        detail=reason,
        now=now,
    )
    paused = reminder_services.pause_for_suppression(
        conn,
        user_id=delivery.user_id,
        address=address,
        paused_reason=pause_reason(decision.suppress),
        now=now,
    )
    return Effects(
        delivery_status=status,
        suppressed_address=address,
        newly_suppressed=added,
        paused_reminder_ids=tuple(paused),
    )


def suppressed_among(
    conn: Connection, addresses: Iterable[str], *, autocommit: bool = False
) -> dict[str, SuppressionReason]:
    """{case-folded address: reason} for those of `addresses` (case-folded already) that
    are on the suppression list; one statement (with `autocommit`, outside any
    transaction: `conn` must have none)."""
    return suppressions.list_among(conn, addresses, autocommit=autocommit)


@dataclass(frozen=True, slots=True)
class Refusal:
    """Why the sender does not send to an address (docs/design.md, "Suppression list").

    Attributes:
        address: the case-folded address on the suppression list.
        error: for the occurrence's `delivery_log.error` (and a one-time reminder's
            `last_error`).
        paused_reason: for the reminder's `paused_reason`.
    """

    address: str
    error: str
    paused_reason: str


def listed_form(email: str) -> str | None:
    """The form `email` (a profile's address) takes on the suppression list
    (`normalize_address`: stripped, case-folded), None for an empty one: the key the
    sender looks its recipients up by (`store.reminders.get_many_for_send`)."""
    return _normalized(email)


def refusal_for(address: str, reason: SuppressionReason) -> Refusal:
    """The Refusal of a send to `address` (case-folded), on the list for `reason`."""
    return _refusal(address, reason)


class PausedState(Protocol):
    """The columns of a reminder that `paused_refusal` reads (a reminder as the sender
    read it for sending)."""

    @property
    def status(self) -> str: ...
    @property
    def next_run_utc(self) -> datetime | None: ...
    @property
    def paused_reason(self) -> str | None: ...
    @property
    def suppressed_address(self) -> str | None: ...


def paused_refusal(reminder: PausedState, run_time_utc: datetime) -> Refusal | None:
    """The Refusal of an occurrence whose reminder a suppression paused after it was
    claimed (`run_time_utc` aware UTC), None when it was not paused that way."""
    if (
        reminder.status != ReminderStatus.PAUSED
        or reminder.suppressed_address is None
        or reminder.next_run_utc != run_time_utc
    ):
        return None
    return Refusal(
        address=reminder.suppressed_address,
        error=f"not sent: {reminder.suppressed_address} is on the suppression list",
        paused_reason=reminder.paused_reason or pause_reason(SuppressionReason.BOUNCE),
    )


def _refusal(address: str, reason: SuppressionReason) -> Refusal:
    return Refusal(
        address=address,
        error=f"not sent: {address} is on the suppression list ({reason})",
        paused_reason=pause_reason(reason),
    )


def record_refusals(
    conn: Connection,
    refused: Iterable[tuple[uuid.UUID, datetime, Refusal]],
    *,
    now: datetime,
) -> dict[uuid.UUID, ReminderStatus]:
    """After the sender recorded occurrences `suppressed` ((reminder id, run_time_utc,
    refusal) each): a recurring reminder still at that occurrence is `paused` (reason
    and address recorded, so it resumes like one paused by a bounce); a one-time one has
    nothing left to send and is `failed` with the refusal as `last_error`. In the
    caller's transaction; one statement, reminders locked in id order.

    Returns:
        reminder id -> new status, for the reminders that changed.
    """
    rows = [
        SendRefusal(
            id=rid,
            run_time_utc=run_time,
            address=r.address,
            paused_reason=r.paused_reason,
            error=r.error,
        )
        for rid, run_time, r in refused
    ]
    return reminder_services.suppress_at_send_many(conn, rows, now=now)


def suppress_replay(
    conn: Connection,
    *,
    reminder_id: uuid.UUID,
    run_time_utc: datetime,
    recipient: str,
    refusal: Refusal,
    now: datetime,
) -> None:
    """Record a replayed (dead-letter redriven) occurrence `suppressed` instead of sending
    it; its unleased `sending` row ends. In the caller's transaction."""
    delivery_log.suppress_replay(
        conn,
        reminder_id=reminder_id,
        run_time_utc=run_time_utc,
        recipient=recipient,
        error=refusal.error,
        now=now,
    )


# --- resuming ------------------------------------------------------------------------


def resume_plan(
    row: SuppressedForResume, zone: ZoneInfo | None, now: datetime, config: ScheduleConfig
) -> tuple[ReminderStatus, datetime | None, str | None] | None:
    """Where a paused reminder goes when its suppression ends: (status, next_run_utc,
    last_error), or None when that cannot be decided now (a recurring reminder with no
    known zone: it stays paused until a later check).

    The same rule as `POST /v1/reminders/{id}/resume`: a recurring reminder continues at
    its first occurrence at or after `now` (occurrences during the pause are not sent;
    `completed` when the rule has ended); a one-time reminder keeps its time and, if that
    passed during the pause, is sent at once subject to its misfire policy.
    """
    if row.rrule is None:
        if row.next_run_utc is None:
            return None
        return ReminderStatus.PENDING, row.next_run_utc, None
    if zone is None:
        return None
    try:
        found = next_occurrence(
            schedule_of(stored_of(row), config), zone, now, inclusive=True, limits=config.limits
        )
    except InvalidSchedule as exc:
        return ReminderStatus.FAILED, None, f"cannot compute the next occurrence: {exc}"
    if found is None:
        return ReminderStatus.COMPLETED, None, None
    return ReminderStatus.PENDING, found, None


def resume_reminders(
    conn: Connection,
    reminder_ids: Collection[uuid.UUID],
    profiles: Mapping[str, Profile | None],
    *,
    now: datetime,
    config: ScheduleConfig,
) -> list[uuid.UUID]:
    """Resume reminders paused by a suppression (see `resume_plan`), in the caller's
    transaction; those no longer paused by a suppression are left alone.

    Args:
        reminder_ids: the reminders to resume.
        profiles: user id -> profile, for the zone of reminders that follow it.

    Returns:
        The ids resumed (now `pending`, or `completed` / `failed` when the rule ended or
        broke), ascending. Side effects: one locking read, one update.
    """
    updates: list[SuppressionResume] = []
    for row in reminders.lock_many_suppressed(conn, reminder_ids):
        planned = resume_plan(
            row, zone_or_none(row.timezone, profiles.get(row.user_id)), now, config
        )
        if planned is None:
            log.warning("cannot resume %s yet: no time zone is known", row.id)
            continue
        status, next_run, error = planned
        updates.append(
            SuppressionResume(id=row.id, status=status, next_run_utc=next_run, last_error=error)
        )
    return reminder_services.resume_many_from_suppression(conn, updates, now=now)


@dataclass(frozen=True, slots=True)
class RecheckResult:
    """Counts of one recheck pass: checked (rows looked at), resumed, repointed (now
    waiting on the profile's new, also suppressed, address), unknown (profile lookup
    failed: checked again after the interval)."""

    checked: int = 0
    resumed: int = 0
    repointed: int = 0
    unknown: int = 0


def recheck_paused(
    engine: Engine,
    profiles: ProfileSource,
    *,
    now: datetime,
    recheck_interval_s: float,
    limit: int,
    config: ScheduleConfig,
) -> RecheckResult:
    """One pass of the maintenance workload over reminders paused by a suppression: each
    not checked for `recheck_interval_s` (just paused ones first) is resumed when its
    entry was removed or its user's profile address changed to one not suppressed.

    Profiles are read between two short transactions (one read, one write), so no
    transaction stays open across a profile-service call. At most `limit` reminders
    per pass.

    Side effects: see `resume_reminders`; the others get `suppression_checked_at = now`.
    """
    with engine.begin() as conn:
        rows = reminders.list_suppressed_to_check(
            conn, checked_before=now - timedelta(seconds=recheck_interval_s), limit=limit
        )
    if not rows:
        return RecheckResult()
    found: dict[str, Profile | None] = {}
    failed: set[str] = set()
    for user_id in sorted({r.user_id for r in rows}):
        try:
            found[user_id] = profiles.get(user_id)
        except InfrastructureError as exc:
            log.warning("cannot read the profile of %s to recheck a suppression: %s", user_id, exc)
            failed.add(user_id)
    resume: list[uuid.UUID] = []
    repoint: list[SuppressionRepoint] = []
    checked: list[uuid.UUID] = []
    with engine.begin() as conn:
        new_addresses = {_normalized(p.email) for p in found.values() if p is not None}
        listed = suppressed_among(
            conn, {r.suppressed_address for r in rows} | {a for a in new_addresses if a}
        )
        for r in rows:
            profile = found.get(r.user_id)
            decision = decide_resume(
                r.suppressed_address,
                None if r.user_id in failed or profile is None else profile.email,
                listed,
            )
            if decision.action is ResumeAction.RESUME:
                resume.append(r.id)
                continue
            checked.append(r.id)
            if decision.action is ResumeAction.REPOINT:
                assert decision.address is not None
                repoint.append(
                    SuppressionRepoint(
                        id=r.id,
                        address=decision.address,
                        paused_reason=pause_reason(listed[decision.address]),
                    )
                )
        resumed = resume_reminders(conn, resume, found, now=now, config=config)
        checked += sorted(set(resume) - set(resumed))  # no zone yet: try after the interval
        reminder_services.repoint_many_suppression(conn, repoint, now=now)
        reminder_services.mark_many_suppression_checked(conn, checked, now=now)
    if resumed:
        log.info("resumed %d reminders paused by a suppression", len(resumed))
    return RecheckResult(
        checked=len(rows),
        resumed=len(resumed),
        repointed=len(repoint),
        unknown=sum(1 for r in rows if r.user_id in failed),
    )


def _normalized(address: str) -> str | None:
    try:
        return normalize_address(address)
    except ValueError:
        return None


# --- the operator's view: list and remove ---------------------------------------------


def list_suppressions(conn: Connection, *, limit: int) -> list[SuppressionEntry]:
    """Up to `limit` entries, newest first."""
    return suppressions.list_newest(conn, limit=limit)


@dataclass(frozen=True, slots=True)
class RemoveResult:
    """removed: the entry existed; resumed: reminders resumed now; left_paused: those
    that could not be resumed now (no zone known: the maintenance workload resumes them
    at a later check, since their entry is gone)."""

    removed: bool
    resumed: int
    left_paused: int


def remove_suppression(
    engine: Engine,
    email: str,
    profiles: ProfileSource,
    *,
    now: datetime,
    config: ScheduleConfig,
) -> RemoveResult:
    """Take `email` (any case) off the suppression list and resume the reminders paused
    by it, in one transaction after the profile lookups.

    A profile that cannot be read leaves its user's reminders paused for the maintenance
    workload's next check, which resumes them (the entry is gone).

    Raises:
        ValueError: `email` is empty.
    """
    address = normalize_address(email)
    with engine.begin() as conn:
        paused = reminders.list_suppressed_by_address(conn, email=address)
    found: dict[str, Profile | None] = {}
    for user_id in sorted({r.user_id for r in paused}):
        try:
            found[user_id] = profiles.get(user_id)
        except InfrastructureError as exc:
            log.warning("cannot read the profile of %s: %s", user_id, exc)
    with engine.begin() as conn:
        removed = suppressions.remove(conn, email=address)
        resumed = resume_reminders(
            conn,
            [r.id for r in paused if r.user_id in found],
            found,
            now=now,
            config=config,
        )
    return RemoveResult(
        removed=removed, resumed=len(resumed), left_paused=len(paused) - len(resumed)
    )


# --- events that beat the sender ---------------------------------------------------------


def rematch_unmatched(conn: Connection, *, now: datetime, since: datetime, limit: int) -> int:
    """Apply stored `unmatched` events received at or after `since` whose provider message
    id now has a delivery row: a webhook may arrive before the sender commits the id it
    got from the provider. In the caller's transaction; rows locked SKIP LOCKED.

    Returns:
        How many events were applied (their outcome is now `recorded` or `suppressed`).
    """
    rows = webhook_events.lock_rematchable(conn, since=since, limit=limit)
    for r in rows:
        decision = decide_feedback(r.kind, delivery_found=True)
        apply_decision(
            conn,
            decision,
            DeliveryRef(r.delivery_id, r.delivery_run_time_utc, r.user_id, r.delivery_status, None),
            kind=r.kind,
            recipient=r.recipient,
            reason=r.reason,
            provider=r.provider,
            event_id=r.event_id,
            now=now,
        )
        webhook_events.mark_matched(
            conn,
            event_row_id=r.id,
            outcome=decision.outcome,
            delivery_id=r.delivery_id,
            now=now,
        )
    if rows:
        log.info("applied %d provider events that arrived before their delivery", len(rows))
    return len(rows)


__all__ = [
    "DeliveryRef",
    "Effects",
    "PausedState",
    "RecheckResult",
    "Refusal",
    "RemoveResult",
    "SuppressionEntry",
    "apply_decision",
    "find_delivery",
    "list_suppressions",
    "listed_form",
    "paused_refusal",
    "recheck_paused",
    "record_refusals",
    "refusal_for",
    "rematch_unmatched",
    "remove_suppression",
    "resume_plan",
    "resume_reminders",
    "suppress_replay",
    "suppressed_among",
]
