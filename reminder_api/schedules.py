"""Request schedule fields → stored columns (`parse_schedule`), and previews of the
occurrences in the API's shapes."""

from __future__ import annotations

import re
from collections.abc import Sequence
from datetime import UTC, date, datetime
from zoneinfo import ZoneInfo

from reminder_api.schemas import DstPolicy, OccurrenceList, OccurrenceOut, ScheduleIn
from reminder_core.domain.localtime import MAX_YEAR, MIN_YEAR, parse_start_local
from reminder_core.domain.recurrence import Schedule, preview
from reminder_core.domain.rrule import normalize_rrule_text
from reminder_core.errors import InvalidSchedule
from reminder_core.scheduling import ScheduleConfig, StoredSchedule

_DATE_RE = re.compile(r"^\d{4}-\d{2}-\d{2}$", re.ASCII)


def parse_date(value: str, field: str) -> datetime:
    """A 'YYYY-MM-DD' date as a naive datetime at 00:00.

    Raises:
        InvalidSchedule: not a real date of that form.
    """
    if not _DATE_RE.match(value):
        raise InvalidSchedule(
            field, f"must be a date 'YYYY-MM-DD' for an all-day reminder; got {value!r}"
        )
    try:
        day = date.fromisoformat(value)
    except ValueError as exc:
        raise InvalidSchedule(field, f"is not a real date: {exc}") from None
    if not MIN_YEAR <= day.year <= MAX_YEAR:
        raise InvalidSchedule(field, f"must be within the years {MIN_YEAR} to {MAX_YEAR}")
    return datetime.combine(day, datetime.min.time())


def parse_schedule(
    *, start_local: str, all_day: bool, rrule: str | None, exdates: Sequence[str], dst: DstPolicy
) -> StoredSchedule:
    """Validate the textual schedule fields of a request.

    Raises:
        InvalidSchedule: naming the field (start_local, exdates[i]) and the reason.
    """
    if all_day:
        start = parse_date(start_local, "start_local")
        excluded = tuple(parse_date(v, f"exdates[{i}]") for i, v in enumerate(exdates))
    else:
        start = parse_start_local(start_local)
        excluded = tuple(parse_start_local(v, f"exdates[{i}]") for i, v in enumerate(exdates))
    return StoredSchedule(
        start_local=start,
        all_day=all_day,
        rrule=normalize_rrule_text(rrule) if rrule is not None else None,
        exdates=excluded,
        nonexistent=dst.nonexistent,
        ambiguous=dst.ambiguous,
    )


def parse_schedule_in(payload: ScheduleIn) -> StoredSchedule:
    """`parse_schedule` of a create's or a preview's body (its `ScheduleIn` fields).

    Raises:
        InvalidSchedule: naming the field and the reason.
    """
    return parse_schedule(
        start_local=payload.start_local,
        all_day=payload.all_day,
        rrule=payload.rrule,
        exdates=payload.exdates,
        dst=payload.dst,
    )


def occurrence_list(
    schedule: Schedule, zone: ZoneInfo, after: datetime, limit: int, config: ScheduleConfig
) -> OccurrenceList:
    """The next `limit` occurrences at or after `after`, DST shifts and skips flagged."""
    items = []
    for occ in preview(schedule, zone, after, limit, limits=config.limits):
        rule_local = occ.local.isoformat(timespec="seconds")
        if occ.utc is None:
            items.append(
                OccurrenceOut(
                    run_time_utc=None,
                    local=rule_local,
                    rule_local=rule_local,
                    shifted=False,
                    skipped=True,
                )
            )
        else:
            items.append(
                OccurrenceOut(
                    run_time_utc=occ.utc.astimezone(UTC),
                    local=occ.utc.astimezone(zone).isoformat(timespec="seconds"),
                    rule_local=rule_local,
                    shifted=occ.shifted,
                    skipped=False,
                )
            )
    return OccurrenceList(timezone=zone.key, items=items)


def format_local(value: datetime, all_day: bool) -> str:
    return value.date().isoformat() if all_day else value.isoformat(timespec="seconds")
