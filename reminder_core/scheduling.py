"""From stored or requested reminder fields to a `Schedule` and its zone; shared by the
API (validation, next_run_utc, previews) and the sender (advancing after a send)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime, time
from typing import Protocol, cast
from zoneinfo import ZoneInfo

from reminder_core.domain.localtime import Ambiguous, Nonexistent, load_zone
from reminder_core.domain.recurrence import (
    Limits,
    Schedule,
    compile_schedule,
    next_occurrence,
    unmatched_exdates,
)
from reminder_core.domain.schedule import first_run_utc
from reminder_core.errors import InvalidSchedule
from reminder_core.profiles import Profile
from reminder_core.settings import Settings


@dataclass(frozen=True, slots=True)
class ScheduleConfig:
    """Operator settings that shape every schedule."""

    limits: Limits
    all_day_local_time: time

    @classmethod
    def from_settings(cls, settings: Settings) -> ScheduleConfig:
        return cls(
            limits=Limits(
                max_iterations=settings.expansion_max_iterations,
                max_count=settings.max_rrule_count,
                max_exdates=settings.max_exdates,
                min_spacing_s=settings.min_recurrence_spacing_s,
            ),
            all_day_local_time=settings.all_day_local_time,
        )


def build_schedule(
    *,
    start_local: datetime,
    all_day: bool,
    rrule: str | None,
    exdates: Sequence[datetime],
    nonexistent: str,
    ambiguous: str,
    config: ScheduleConfig,
    accept: bool,
) -> Schedule:
    """The schedule of a reminder from its stored fields.

    Args:
        start_local: naive start as stored (for all-day reminders: the date at 00:00).
        exdates: naive local date-times as stored (all-day: dates at 00:00).
        accept: a schedule being submitted (every check) rather than one read back.

    Raises:
        InvalidSchedule: a field cannot be accepted (see `compile_schedule`).
    """
    fire_at = config.all_day_local_time
    if all_day:
        start_local = datetime.combine(start_local.date(), fire_at)
        exdates = [datetime.combine(d.date(), fire_at) for d in exdates]
    return compile_schedule(
        start_local,
        rrule=rrule,
        exdates=tuple(exdates),
        all_day=all_day,
        nonexistent=cast(Nonexistent, _literal(nonexistent, ("shift", "skip"), "dst.nonexistent")),
        ambiguous=cast(Ambiguous, _literal(ambiguous, ("first", "last", "both"), "dst.ambiguous")),
        limits=config.limits,
        accept=accept,
    )


def _literal(value: str, allowed: tuple[str, ...], field: str) -> str:
    if value not in allowed:
        raise InvalidSchedule(field, f"must be one of {', '.join(allowed)}")
    return value


def zone_for(timezone: str | None, profile: Profile | None) -> ZoneInfo | None:
    """The reminder's fixed zone, else the profile's, else None (no zone known).

    Raises:
        InvalidSchedule: ("timezone") the name is not an IANA zone.
    """
    if timezone is not None:
        return load_zone(timezone)
    if profile is not None:
        return load_zone(profile.timezone)
    return None


@dataclass(frozen=True, slots=True)
class StoredSchedule:
    """The schedule columns of a reminder as stored in `reminders`: naive local
    `start_local` and `exdates` (all-day: dates at 00:00), the RRULE text (None:
    one-time) and the DST policies (docs/design.md, "Recurrence and time")."""

    start_local: datetime
    all_day: bool
    rrule: str | None
    exdates: tuple[datetime, ...]
    nonexistent: str
    ambiguous: str


class ScheduleColumns(Protocol):
    """A reminders row read with its schedule columns (a store record)."""

    @property
    def start_local(self) -> datetime: ...
    @property
    def all_day(self) -> bool: ...
    @property
    def rrule(self) -> str | None: ...
    @property
    def exdates(self) -> Sequence[datetime]: ...
    @property
    def dst_nonexistent(self) -> str: ...
    @property
    def dst_ambiguous(self) -> str: ...


def stored_of(row: ScheduleColumns) -> StoredSchedule:
    """The stored schedule of a reminders row: the one row → schedule conversion."""
    return StoredSchedule(
        start_local=row.start_local,
        all_day=row.all_day,
        rrule=row.rrule,
        exdates=tuple(row.exdates or ()),
        nonexistent=row.dst_nonexistent,
        ambiguous=row.dst_ambiguous,
    )


def schedule_of(stored: StoredSchedule, config: ScheduleConfig) -> Schedule:
    """The schedule of a reminder as stored, accepted earlier: parsed, not re-checked
    against today's limits (docs/design.md, "Occurrences").

    Raises:
        InvalidSchedule: the stored text cannot be parsed at all (not expected: it was
            accepted and stored in canonical form).
    """
    return _compiled(stored, config, accept=False)


def accepted_schedule(
    stored: StoredSchedule,
    zone: ZoneInfo,
    now: datetime,
    config: ScheduleConfig,
    *,
    exdates_carried: bool = False,
) -> tuple[Schedule, datetime]:
    """Accept a schedule a user submits (create, update, preview): every limit, the
    spacing check, every exclusion an occurrence of the rule in `zone`, and an occurrence
    left at or after `now` (aware UTC).

    Args:
        exdates_carried: the exclusions were kept from before a change of start or rule
            (PATCH without `exdates`), so the refusal says to send them.

    Returns:
        (the schedule, its next_run_utc: aware UTC).

    Raises:
        InvalidSchedule: naming the field ("rrule", "exdates[i]", "exdates",
            "start_local", "dst.*") and the reason.
    """
    schedule = _compiled(stored, config, accept=True)
    unmatched = unmatched_exdates(schedule, zone, limits=config.limits)
    if unmatched:
        _refuse_exdates(stored, config, unmatched, carried=exdates_carried)
    return schedule, first_run(schedule, zone, now, config)


def _compiled(stored: StoredSchedule, config: ScheduleConfig, *, accept: bool) -> Schedule:
    return build_schedule(
        start_local=stored.start_local,
        all_day=stored.all_day,
        rrule=stored.rrule,
        exdates=stored.exdates,
        nonexistent=stored.nonexistent,
        ambiguous=stored.ambiguous,
        config=config,
        accept=accept,
    )


def _refuse_exdates(
    stored: StoredSchedule,
    config: ScheduleConfig,
    unmatched: dict[datetime, tuple[datetime, ...]],
    *,
    carried: bool,
) -> None:
    """Raise InvalidSchedule for the first exclusion (in request order) that matches no
    occurrence, naming it and the rule's times on that date."""

    def shown(value: datetime) -> str:
        return value.date().isoformat() if stored.all_day else value.isoformat(timespec="minutes")

    fire_at = config.all_day_local_time
    for index, value in enumerate(stored.exdates):
        key = datetime.combine(value.date(), fire_at) if stored.all_day else value
        if key not in unmatched:
            continue
        that_day = unmatched[key]
        where = (
            f"on {value.date().isoformat()} it fires at "
            + ", ".join(t.strftime("%H:%M") for t in that_day)
            if that_day and not stored.all_day
            else f"it does not fire on {value.date().isoformat()}"
        )
        if carried:
            raise InvalidSchedule(
                "exdates",
                f"{shown(value)}, kept from before this change, is not an occurrence of the "
                f"new schedule ({where}); send 'exdates' with the change",
            )
        raise InvalidSchedule(
            f"exdates[{index}]",
            f"{shown(value)} is not an occurrence of the rule, so it would exclude nothing "
            f"({where})",
        )


def first_run(
    schedule: Schedule, zone: ZoneInfo, now: datetime, config: ScheduleConfig
) -> datetime:
    """next_run_utc at creation or after a schedule change: the first occurrence at or
    after `now` (aware UTC) (docs/design.md, "next_run_utc"), aware UTC.

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
            f"has no occurrence at or after {now:%Y-%m-%dT%H:%M:%SZ} in {zone.key} (it ended, "
            "every occurrence is excluded, or none falls within the search window of at "
            f"least {config.limits.window_years} years)",
        )
    return found


def zone_or_none(timezone: str | None, profile: Profile | None) -> ZoneInfo | None:
    """The reminder's zone, else the profile's; None when neither is usable."""
    try:
        return zone_for(timezone, profile)
    except InvalidSchedule:
        return None
