"""Delivery state changes shared by the sender and the maintenance workload: recording a
terminal state for an occurrence and moving a reminder past it (DESIGN §4)."""

from __future__ import annotations

import logging
import uuid
from datetime import datetime
from typing import Any
from zoneinfo import ZoneInfo

from sqlalchemy import Connection, Row

from reminder_core.db.queries import query
from reminder_core.domain.recurrence import Schedule, next_occurrence
from reminder_core.domain.states import DeliveryStatus, ReminderStatus
from reminder_core.errors import InvalidSchedule
from reminder_core.profiles import Profile
from reminder_core.scheduling import ScheduleConfig, build_schedule, zone_for

log = logging.getLogger(__name__)


def schedule_of_row(row: Row[Any], config: ScheduleConfig) -> Schedule:
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


def record_terminal(
    conn: Connection,
    *,
    reminder_id: uuid.UUID,
    user_id: str,
    run_time_utc: datetime,
    status: DeliveryStatus,
    error: str,
    now: datetime,
) -> bool:
    """Insert a terminal row for an occurrence that has none; False if one exists.

    Side effects: one INSERT in the caller's transaction.
    """
    result = conn.execute(
        query("delivery_record_terminal"),
        {
            "reminder_id": reminder_id,
            "user_id": user_id,
            "run_time_utc": run_time_utc,
            "status": status.value,
            "error": error,
            "now": now,
        },
    )
    return bool(result.rowcount)


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
    reminder: a newer version is never overwritten (DESIGN §4.5).

    Returns:
        The new status, or None when nothing changed.
    """
    current = conn.execute(query("reminder_lock_for_advance"), {"id": reminder_id}).one_or_none()
    if (
        current is None
        or current.next_run_utc != occurrence_utc
        or current.status not in (ReminderStatus.CLAIMED, ReminderStatus.PENDING)
    ):
        return None
    next_run: datetime | None = None
    broken: str | None = None  # the schedule itself cannot be computed any more
    if current.rrule is not None:
        if zone is None:
            broken = "cannot compute the next occurrence: no time zone is known"
        else:
            try:
                next_run = next_occurrence(
                    schedule_of_row(current, config), zone, after, limits=config.limits
                )
            except InvalidSchedule as exc:
                broken = f"cannot compute the next occurrence: {exc}"
    if next_run is not None:
        status = ReminderStatus.PENDING
    elif broken is not None or (current.rrule is None and not sent):
        status = ReminderStatus.FAILED
    else:
        status = ReminderStatus.COMPLETED  # one-time sent, or the rule has ended
    conn.execute(
        query("reminder_finish_occurrence"),
        {
            "id": reminder_id,
            "run_time_utc": occurrence_utc,
            "status": status.value,
            "next_run_utc": next_run,
            "last_error": broken or error,
            "now": now,
        },
    )
    return status
