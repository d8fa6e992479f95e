"""Request schedule fields ⇄ stored columns ⇄ `Schedule`; next_run_utc and previews."""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import UTC, date, datetime
from zoneinfo import ZoneInfo

from reminder_api.schemas import DstPolicy, OccurrenceList, OccurrenceOut
from reminder_core.db.models import Reminder
from reminder_core.domain.localtime import MAX_YEAR, MIN_YEAR, parse_start_local
from reminder_core.domain.recurrence import Schedule, next_occurrence, preview
from reminder_core.domain.rrule import normalize_rrule_text
from reminder_core.domain.schedule import first_run_utc
from reminder_core.errors import InvalidSchedule
from reminder_core.scheduling import ScheduleConfig, build_schedule

_DATE_RE = re.compile(r"^\d{4}-\d{2}-\d{2}$", re.ASCII)


@dataclass(frozen=True, slots=True)
class StoredSchedule:
    """Schedule columns as stored in `reminders` (naive local values)."""

    start_local: datetime
    all_day: bool
    rrule: str | None
    exdates: tuple[datetime, ...]
    nonexistent: str
    ambiguous: str


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


def stored_of(r: Reminder) -> StoredSchedule:
    return StoredSchedule(
        start_local=r.start_local,
        all_day=r.all_day,
        rrule=r.rrule,
        exdates=tuple(r.exdates or ()),
        nonexistent=r.dst_nonexistent,
        ambiguous=r.dst_ambiguous,
    )


def schedule_of(stored: StoredSchedule, config: ScheduleConfig) -> Schedule:
    """Raises InvalidSchedule (rrule, exdates) when the rule cannot be accepted."""
    return build_schedule(
        start_local=stored.start_local,
        all_day=stored.all_day,
        rrule=stored.rrule,
        exdates=stored.exdates,
        nonexistent=stored.nonexistent,
        ambiguous=stored.ambiguous,
        config=config,
    )


def first_run(
    schedule: Schedule, zone: ZoneInfo, now: datetime, config: ScheduleConfig
) -> datetime:
    """next_run_utc at creation or after a schedule change: the first occurrence at or
    after `now` (docs/design.md, "next_run_utc"), aware UTC.

    Raises:
        InvalidSchedule: one-time in the past or dropped by DST 'skip' ("start_local"); a
            rule with no occurrence left ("rrule").
    """
    if schedule.rule is None:
        return first_run_utc(
            schedule.start_local,
            zone,
            now=now,
            nonexistent=schedule.nonexistent,
            ambiguous=schedule.ambiguous,
        )
    found = next_occurrence(
        schedule, zone, now.replace(microsecond=0), inclusive=True, limits=config.limits
    )
    if found is None:
        raise InvalidSchedule(
            "rrule",
            f"has no occurrence at or after now in {zone.key} (it ended, every occurrence is "
            "excluded, or none falls within the next 100 years)",
        )
    return found


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
