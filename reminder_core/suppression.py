"""The suppression list's state changes (docs/design.md, "Suppression list"): applying a
bounce or complaint to a delivery, the list and the user's reminders; finding suppressed
addresses for the sender; resuming reminders when the profile's address changes or an
entry is removed. The rules are the pure decisions of `reminder_core.domain.suppression`;
this module runs them in the caller's transaction (or, where it calls the profile source,
in short transactions of its own, never holding one open across a profile lookup)."""

from __future__ import annotations

import json
import logging
import uuid
from collections.abc import Collection, Iterable, Mapping
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any
from zoneinfo import ZoneInfo

from sqlalchemy import Connection, Engine, Row

from reminder_core.delivery import schedule_of_row, zone_or_none
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
from reminder_core.scheduling import ScheduleConfig
from reminder_core.store._statements import id_array, json_rows, query

log = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class DeliveryRef:
    """The delivery a provider event is about (columns of delivery_get_by_provider_message);
    (id, run_time_utc) is the row's primary key (delivery_log is partitioned by
    run_time_utc)."""

    id: uuid.UUID
    run_time_utc: datetime
    user_id: str
    status: str
    recipient: str | None


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
    """The delivery row whose (provider, provider_message_id) is this, or None."""
    if not provider_message_id:
        return None
    row = conn.execute(
        query("delivery_get_by_provider_message"),
        {"provider": provider, "provider_message_id": provider_message_id},
    ).one_or_none()
    if row is None:
        return None
    return DeliveryRef(
        id=row.id,
        run_time_utc=row.run_time_utc,
        user_id=row.user_id,
        status=row.status,
        recipient=row.recipient,
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
        changed = conn.execute(
            query("delivery_record_feedback"),
            {
                "id": delivery.id,
                "run_time_utc": delivery.run_time_utc,
                "status": decision.delivery_status.value,
                "error": f"{kind.value.replace('_', ' ')}: {reason}",
                "now": now,
            },
        ).first()
        status = decision.delivery_status if changed is not None else None
    if decision.suppress is None:
        return Effects(delivery_status=status)
    address = normalize_address(recipient)
    added = conn.execute(
        query("suppression_add"),
        {
            "email": address,
            "reason": decision.suppress.value,
            "provider": provider,
            "source_event_id": event_id,
            "detail": reason,
            "now": now,
        },
    ).first()
    paused = conn.execute(
        query("reminder_pause_user_for_suppression"),
        {
            "user_id": delivery.user_id,
            "address": address,
            "paused_reason": pause_reason(decision.suppress),
            "now": now,
        },
    ).scalars()
    return Effects(
        delivery_status=status,
        suppressed_address=address,
        newly_suppressed=added is not None,
        paused_reminder_ids=tuple(sorted(paused)),
    )


def suppressed_among(conn: Connection, addresses: Iterable[str]) -> dict[str, str]:
    """{case-folded address: reason} for those of `addresses` (case-folded already) that
    are on the suppression list; one statement."""
    wanted = sorted(set(addresses))
    if not wanted:
        return {}
    rows = conn.execute(query("suppression_list_among"), {"emails": json.dumps(wanted)})
    return {r.email: r.reason for r in rows}


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


def refusals(conn: Connection, emails: Iterable[str]) -> dict[str, Refusal]:
    """{email as given: Refusal} for the profile addresses of a sender batch that are on
    the suppression list (compared case-folded); one statement for the whole batch."""
    folded = {e: a for e in set(emails) if (a := _normalized(e))}
    listed = suppressed_among(conn, folded.values())
    return {
        email: _refusal(address, listed[address])
        for email, address in folded.items()
        if address in listed
    }


def paused_refusal(reminder: Row[Any], run_time_utc: datetime) -> Refusal | None:
    """The Refusal of an occurrence whose reminder a suppression paused after it was
    claimed (columns of reminder_get_many_for_send), None when it was not paused that way."""
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


def _refusal(address: str, reason: str) -> Refusal:
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
        {
            "id": rid,
            "run_time_utc": run_time,
            "address": r.address,
            "paused_reason": r.paused_reason,
            "error": r.error,
        }
        for rid, run_time, r in refused
    ]
    if not rows:
        return {}
    changed = conn.execute(
        query("reminder_suppress_at_send_many"), {"rows": json_rows(rows), "now": now}
    )
    return {r.id: ReminderStatus(r.status) for r in changed}


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
    conn.execute(
        query("delivery_suppress_replay"),
        {
            "reminder_id": reminder_id,
            "run_time_utc": run_time_utc,
            "recipient": recipient,
            "error": refusal.error,
            "now": now,
        },
    )


# --- resuming ------------------------------------------------------------------------


def resume_plan(
    row: Row[Any], zone: ZoneInfo | None, now: datetime, config: ScheduleConfig
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
            schedule_of_row(row, config), zone, now, inclusive=True, limits=config.limits
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
    if not reminder_ids:
        return []
    rows = conn.execute(
        query("reminder_lock_many_suppressed"), {"ids": id_array(sorted(reminder_ids))}
    ).all()
    updates = []
    for row in rows:
        planned = resume_plan(
            row, zone_or_none(row.timezone, profiles.get(row.user_id)), now, config
        )
        if planned is None:
            log.warning("cannot resume %s yet: no time zone is known", row.id)
            continue
        status, next_run, error = planned
        updates.append(
            {"id": row.id, "status": status.value, "next_run_utc": next_run, "last_error": error}
        )
    if not updates:
        return []
    resumed = conn.execute(
        query("reminder_resume_many_from_suppression"), {"rows": json_rows(updates), "now": now}
    ).scalars()
    return sorted(resumed)


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
        rows = conn.execute(
            query("reminder_list_suppressed_to_check"),
            {"checked_before": now - timedelta(seconds=recheck_interval_s), "limit": limit},
        ).all()
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
    repoint: list[dict[str, object]] = []
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
                    {
                        "id": r.id,
                        "address": decision.address,
                        "paused_reason": pause_reason(listed[decision.address]),
                    }
                )
        resumed = resume_reminders(conn, resume, found, now=now, config=config)
        checked += sorted(set(resume) - set(resumed))  # no zone yet: try after the interval
        if repoint:
            conn.execute(
                query("reminder_repoint_many_suppression"), {"rows": json_rows(repoint), "now": now}
            )
        if checked:
            conn.execute(
                query("reminder_mark_many_suppression_checked"),
                {"ids": id_array(checked), "now": now},
            )
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


@dataclass(frozen=True, slots=True)
class SuppressionEntry:
    """One row of the suppression list, with the reminders it holds paused."""

    email: str
    reason: SuppressionReason
    provider: str | None
    source_event_id: str | None
    detail: str | None
    created_at: datetime
    paused: int


def list_suppressions(conn: Connection, *, limit: int) -> list[SuppressionEntry]:
    """Up to `limit` entries, newest first."""
    return [
        SuppressionEntry(
            email=r.email,
            reason=SuppressionReason(r.reason),
            provider=r.provider,
            source_event_id=r.source_event_id,
            detail=r.detail,
            created_at=r.created_at,
            paused=r.paused,
        )
        for r in conn.execute(query("suppression_list"), {"limit": limit})
    ]


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
        paused = conn.execute(
            query("reminder_list_suppressed_by_address"), {"email": address}
        ).all()
    found: dict[str, Profile | None] = {}
    for user_id in sorted({r.user_id for r in paused}):
        try:
            found[user_id] = profiles.get(user_id)
        except InfrastructureError as exc:
            log.warning("cannot read the profile of %s: %s", user_id, exc)
    with engine.begin() as conn:
        removed = conn.execute(query("suppression_remove"), {"email": address}).first()
        resumed = resume_reminders(
            conn,
            [r.id for r in paused if r.user_id in found],
            found,
            now=now,
            config=config,
        )
    return RemoveResult(
        removed=removed is not None, resumed=len(resumed), left_paused=len(paused) - len(resumed)
    )


# --- events that beat the sender ---------------------------------------------------------


def rematch_unmatched(conn: Connection, *, now: datetime, since: datetime, limit: int) -> int:
    """Apply stored `unmatched` events received at or after `since` whose provider message
    id now has a delivery row: a webhook may arrive before the sender commits the id it
    got from the provider. In the caller's transaction; rows locked SKIP LOCKED.

    Returns:
        How many events were applied (their outcome is now `recorded` or `suppressed`).
    """
    rows = conn.execute(
        query("webhook_event_lock_rematchable"), {"since": since, "limit": limit}
    ).all()
    for r in rows:
        kind = FeedbackKind(r.kind)
        decision = decide_feedback(kind, delivery_found=True)
        apply_decision(
            conn,
            decision,
            DeliveryRef(r.delivery_id, r.delivery_run_time_utc, r.user_id, r.delivery_status, None),
            kind=kind,
            recipient=r.recipient,
            reason=r.reason,
            provider=r.provider,
            event_id=r.event_id,
            now=now,
        )
        conn.execute(
            query("webhook_event_mark_matched"),
            {
                "id": r.id,
                "outcome": decision.outcome.value,
                "delivery_id": r.delivery_id,
                "now": now,
            },
        )
    if rows:
        log.info("applied %d provider events that arrived before their delivery", len(rows))
    return len(rows)


__all__ = [
    "DeliveryRef",
    "Effects",
    "RecheckResult",
    "Refusal",
    "RemoveResult",
    "SuppressionEntry",
    "apply_decision",
    "find_delivery",
    "list_suppressions",
    "paused_refusal",
    "recheck_paused",
    "record_refusals",
    "refusals",
    "rematch_unmatched",
    "remove_suppression",
    "resume_plan",
    "resume_reminders",
    "suppress_replay",
    "suppressed_among",
]
