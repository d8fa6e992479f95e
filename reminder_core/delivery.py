"""Delivery state changes shared by the sender and the maintenance workload: recording a
terminal state for an occurrence and moving a reminder past it (docs/design.md,
"Delivery guarantees")."""

from __future__ import annotations

import dataclasses
import logging
import uuid
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime
from zoneinfo import ZoneInfo

from sqlalchemy import Connection

from reminder_core.domain.recurrence import Schedule, next_occurrence
from reminder_core.domain.states import ReminderStatus
from reminder_core.errors import InvalidSchedule
from reminder_core.profiles import Profile
from reminder_core.scheduling import ScheduleColumns, ScheduleConfig, build_schedule, zone_for
from reminder_core.store import reminders
from reminder_core.store.reminders import ReminderAdvance, ReminderToAdvance

log = logging.getLogger(__name__)


def schedule_of_row(row: ScheduleColumns, config: ScheduleConfig) -> Schedule:
    """The Schedule of a reminders row (needs start_local, all_day, rrule, exdates,
    dst_nonexistent, dst_ambiguous). Raises InvalidSchedule for a rule that the current
    limits refuse."""
    return build_schedule(
        start_local=row.start_local,
        all_day=row.all_day,
        rrule=row.rrule,
        exdates=row.exdates or (),
        nonexistent=row.dst_nonexistent,
        ambiguous=row.dst_ambiguous,
        config=config,
    )


def zone_or_none(timezone: str | None, profile: Profile | None) -> ZoneInfo | None:
    """The reminder's zone, else the profile's; None when neither is usable."""
    try:
        return zone_for(timezone, profile)
    except InvalidSchedule:
        return None


@dataclass(frozen=True, slots=True)
class Advance:
    """A reminder to move past one occurrence (see `advance_reminder` for the rules).

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


def decide_advance(
    current: ReminderToAdvance, advance: Advance, config: ScheduleConfig
) -> tuple[ReminderStatus, datetime | None, str | None] | None:
    """Where a reminder goes after `advance`: (status, next_run_utc, last_error), or None
    when a user change (cancel, pause, reschedule) already moved it (docs/design.md,
    "A cancel or change wins").

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
    broken: str | None = None  # the schedule itself cannot be computed any more
    if current.rrule is not None:
        if advance.zone is None:
            broken = "cannot compute the next occurrence: no time zone is known"
        else:
            try:
                next_run = next_occurrence(
                    schedule_of_row(current, config),
                    advance.zone,
                    advance.after,
                    limits=config.limits,
                )
            except InvalidSchedule as exc:
                broken = f"cannot compute the next occurrence: {exc}"
    if next_run is not None:
        status = ReminderStatus.PENDING
    elif broken is not None or (current.rrule is None and not advance.sent):
        status = ReminderStatus.FAILED
    else:
        status = ReminderStatus.COMPLETED  # one-time sent, or the rule has ended
    return status, next_run, broken or advance.error


def advance_reminder(
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

    Side effects: `advance_reminders` with this one reminder (row-locked, then updated in
    the caller's transaction).

    Returns:
        The new status, or None when nothing changed.
    """
    advance = Advance(reminder_id, occurrence_utc, zone, after, sent, error)
    return advance_reminders(conn, [advance], now=now, config=config).get(reminder_id)


def advance_reminders(
    conn: Connection, advances: Sequence[Advance], *, now: datetime, config: ScheduleConfig
) -> dict[uuid.UUID, ReminderStatus]:
    """`advance_reminder` for many reminders: one locking read (in id order) and one
    update for the whole set, in the caller's transaction.

    A reminder named more than once is advanced once per entry, in order, each from the
    state the previous one left.

    Returns:
        reminder id -> new status, for the reminders that changed.
    """
    if not advances:
        return {}
    ids = sorted({a.reminder_id for a in advances})
    rows = {r.id: r for r in reminders.lock_many_for_advance(conn, ids)}
    final: dict[uuid.UUID, tuple[datetime, ReminderStatus, datetime | None, str | None]] = {}
    for advance in advances:
        current = rows.get(advance.reminder_id)
        if current is None:
            continue
        decided = decide_advance(current, advance, config)
        if decided is None:
            continue
        status, next_run, last_error = decided
        first = final.get(advance.reminder_id)
        final[advance.reminder_id] = (
            first[0] if first else advance.occurrence_utc,
            status,
            next_run,
            last_error,
        )
        if len(ids) < len(advances):  # maybe named again: the next entry sees this one
            rows[advance.reminder_id] = dataclasses.replace(
                current, status=status, next_run_utc=next_run
            )
    if final:
        reminders.advance_many(
            conn,
            [
                ReminderAdvance(
                    id=k, run_time_utc=v[0], status=v[1], next_run_utc=v[2], last_error=v[3]
                )
                for k, v in final.items()
            ],
            now=now,
        )
    return {k: v[1] for k, v in final.items()}
