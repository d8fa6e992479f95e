"""Occurrences of a reminder: RRULE expansion in local wall time, then zone conversion.

Pure code; `now`/`after` are inputs. The rules (docs/design.md, "Occurrences"; RFC 5545):

1. Occurrences are expanded in local wall-clock time by python-dateutil and only then
   turned into UTC instants with zoneinfo, so 09:00 stays 09:00 across DST changes.
2. A local time in a spring-forward gap is `shift`ed (read with the offset before the
   gap, RFC 5545 §3.3.5) or `skip`ped (RFC 5545 §3.3.10: ignored and not counted toward
   COUNT). A local time in a fall-back overlap fires at the `first` reading, the `last`, or
   `both`. Two readings that land on one instant (a shifted gap time and a real one, e.g.
   Pacific/Apia's skipped 2011-12-30) fire once.
3. EXDATEs remove instances after COUNT is applied (RFC 5545 §3.8.5.1). UNTIL bounds the
   instance start inclusively: a DATE for all-day reminders, a UTC DATE-TIME otherwise.
4. A start that does not match the rule is not an occurrence (python-dateutil's reading;
   RFC 5545 leaves an unsynchronized DTSTART undefined).

Corrections around python-dateutil:
- It emits local times that do not exist; rule 2 turns each into a real instant or
  drops it.
- Its first WEEKLY period starts at DTSTART instead of at the week start (WKST), so
  BYSETPOS counts from the wrong day in the first week (dateutil issue #1398). We always
  hand it a DTSTART on a period boundary (the "anchor") with every default that RFC 5545
  derives from DTSTART written out explicitly, and drop what falls before the real start.
- It searches until year 9999 for a rule that never matches (seconds of CPU). We expand
  in an equivalent year near 9999: the Gregorian calendar repeats exactly every 400 years
  (146,097 days = 20,871 weeks), so shifting the anchor by a multiple of 400 years and
  back changes no occurrence, while dateutil's own MAXYEAR guard now ends any search after
  `window_years` to `window_years + 400` years. That horizon, not a clock, bounds the
  work of every search, so whether a rule is accepted, and whether its next occurrence
  can be computed, never depends on how busy the machine is (docs/design.md,
  "Occurrences").
- Where a rule leaves out a part RFC 5545 §3.3.10 derives from DTSTART, dateutil reads
  it otherwise in two cases: YEARLY with BYWEEKNO but no day part fires on every day of
  those weeks, and YEARLY with BYMONTHDAY but no BYMONTH on that day of every month. We
  write the day of the week (resp. the month) of the start into the rule (`_derived`).

Cost does not grow with age: for a rule without COUNT the anchor is the period boundary
just before the time asked about, with the rule's INTERVAL phase kept, so computing the
next occurrence of a ten-year-old reminder expands no more than a new one. A rule with
COUNT must know how many instances came before; given a `CountProgress` (how many were
counted before a local time, kept by the caller from its previous computation) it
expands from there instead of from the start, at the same cost at any age.

A schedule is accepted once (`compile_schedule`: syntax, limits, spacing, exclusions) and
only parsed afterwards (`compile_schedule(..., accept=False)`), so a stored rule keeps
working when an operator tightens the limits.
"""

from __future__ import annotations

import heapq
from collections.abc import Iterator
from dataclasses import dataclass, field, replace
from datetime import UTC, date, datetime, timedelta
from functools import lru_cache
from itertools import count as counter
from typing import Any, Literal
from zoneinfo import ZoneInfo

from dateutil import rrule as du

from reminder_core.domain.localtime import Ambiguous, Nonexistent, readings
from reminder_core.domain.rrule import RecurRule, WeekdaySpec, parse_rrule
from reminder_core.errors import InvalidSchedule

_DU_FREQ: dict[str, Literal[0, 1, 2, 3, 4, 5, 6]] = {
    "YEARLY": du.YEARLY,
    "MONTHLY": du.MONTHLY,
    "WEEKLY": du.WEEKLY,
    "DAILY": du.DAILY,
    "HOURLY": du.HOURLY,
    "MINUTELY": du.MINUTELY,
    "SECONDLY": du.SECONDLY,
}
_CYCLE_YEARS = 400  # the Gregorian calendar repeats exactly every 400 years
_MAX_YEAR = 9999  # datetime.MAXYEAR, where python-dateutil stops searching
# UTC offsets lie within [-12h, +14h]: an occurrence at local time L is at or after
# L - 14h in UTC, which bounds how far shifted or doubled readings can reorder.
_MAX_OFFSET = timedelta(hours=14)
_MAX_NEGATIVE_OFFSET = timedelta(hours=12)
# Largest re-anchoring margin: more than any offset change between two instants a day
# apart (Pacific/Apia skipped a whole day, +24h, in 2011). Each zone uses its own spread.
_ANCHOR_MARGIN = timedelta(hours=26)


@dataclass(frozen=True, slots=True)
class Limits:
    """Bounds on one expansion, so that no input can make a request spin.

    Every bound counts work (candidates, years), never wall time, so the same input gets
    the same answer on an idle and on an overloaded machine.

    Attributes:
        max_iterations: local candidates examined per call.
        window_years: shortest search window (the real one is up to 400 years longer).
        max_count: largest RRULE COUNT accepted.
        max_exdates: largest number of exdates accepted.
        min_spacing_s: smallest gap between occurrences accepted (seconds).
    """

    max_iterations: int = 100_000
    window_years: int = 100
    max_count: int = 1000
    max_exdates: int = 100
    min_spacing_s: float = 3600.0


DEFAULT_LIMITS = Limits()


@lru_cache(maxsize=1024)
def _anchor_margin(zone: ZoneInfo) -> timedelta:
    """How far before the local reading of `after` expansion must start: a local time L
    fires at L - offset(L), so any occurrence at or after `after` has L >= local(after) -
    (largest offset - smallest offset) of the zone. Offsets are sampled weekly over
    1900-2100 (and the margin never drops below one hour); zones with one fixed offset
    need just the hour, Pacific/Apia (which skipped a day) about 26 hours."""
    offsets = set()
    moment = datetime(1900, 1, 1, tzinfo=UTC)
    end = datetime(2100, 1, 1, tzinfo=UTC)
    while moment < end:
        offset = moment.astimezone(zone).utcoffset()
        if offset is not None:
            offsets.add(offset)
        moment += timedelta(days=7)
    spread = max(offsets) - min(offsets) if offsets else _ANCHOR_MARGIN
    return min(_ANCHOR_MARGIN, spread) + timedelta(hours=1)


class ExpansionLimitExceeded(InvalidSchedule):
    """Expanding the rule examined more candidates than `Limits.max_iterations`."""

    def __init__(self, what: str) -> None:
        super().__init__("rrule", f"is too expensive to expand ({what}); simplify the rule")


@dataclass(frozen=True, slots=True)
class Schedule:
    """A validated schedule, independent of any zone.

    Attributes:
        start_local: naive wall-clock start (for all-day reminders: the date at the
            configured all-day time).
        rule: the recurrence rule, or None for a one-time reminder.
        exdates: naive local date-times left out (compared with the rule's wall time).
        all_day: the start is a date.
        nonexistent / ambiguous: DST policies.
    """

    start_local: datetime
    rule: RecurRule | None = None
    exdates: frozenset[datetime] = field(default_factory=frozenset)
    all_day: bool = False
    nonexistent: Nonexistent = "shift"
    ambiguous: Ambiguous = "first"


@dataclass(frozen=True, slots=True)
class CountProgress:
    """How much of a COUNT rule is used up: `counted` instances (RFC 5545 §3.3.10 counting:
    a gap time dropped by `skip` is not one) have a local time before `local`, in the zone
    named `zone`. Valid for the schedule it was computed from only: a change of start,
    rule or DST policy invalidates it (the caller drops it).

    Attributes:
        local: naive local candidate time where the count resumes.
        counted: instances before it.
        zone: IANA key of the zone the instances were counted in.
    """

    local: datetime
    counted: int
    zone: str

    def to_json(self) -> dict[str, str | int]:
        """{"local": ISO 8601 naive, "counted": int, "zone": IANA key}."""
        return {"local": self.local.isoformat(), "counted": self.counted, "zone": self.zone}

    @classmethod
    def from_json(cls, value: object) -> CountProgress | None:
        """The progress `to_json` wrote; None for None or anything malformed (the count
        is then taken from the start, which is always right, only slower)."""
        if not isinstance(value, dict):
            return None
        try:
            return cls(
                local=datetime.fromisoformat(str(value["local"])),
                counted=int(value["counted"]),
                zone=str(value["zone"]),
            )
        except (KeyError, TypeError, ValueError):
            return None


class _ProgressOut:
    """Where `iter_occurrences` leaves the latest usable `CountProgress` it passed."""

    __slots__ = ("progress",)

    def __init__(self) -> None:
        self.progress: CountProgress | None = None


@dataclass(frozen=True, slots=True)
class Occurrence:
    """One occurrence.

    Attributes:
        local: the rule's wall-clock time (naive).
        utc: the instant it fires (aware UTC), or None when `skipped`.
        shifted: the wall time does not exist (DST gap) and was moved (policy `shift`).
        skipped: the wall time does not exist and the occurrence is dropped (`skip`).
    """

    local: datetime
    utc: datetime | None
    shifted: bool = False
    skipped: bool = False


def compile_schedule(
    start_local: datetime,
    *,
    rrule: str | None = None,
    exdates: tuple[datetime, ...] = (),
    all_day: bool = False,
    nonexistent: Nonexistent = "shift",
    ambiguous: Ambiguous = "first",
    limits: Limits = DEFAULT_LIMITS,
    accept: bool = True,
) -> Schedule:
    """Validate a schedule's parts and return it.

    Args:
        start_local: naive wall-clock start (all-day: date at the all-day fire time).
        rrule: RFC 5545 RRULE text, with or without "RRULE:", or None.
        exdates: naive local date-times to leave out.
        accept: True for a schedule a user is submitting: every limit and the spacing
            check apply. False for one accepted earlier and read back from storage: the
            rule is only parsed, so a stored schedule is never refused later because the
            operator changed a limit (its COUNT, exclusions or spacing).

    Raises:
        InvalidSchedule: naming the field ("rrule", "exdates") and the reason; also when
            the rule repeats more often than `limits.min_spacing_s` or has no occurrence
            within the search window from its start (`accept` only). The verdict depends
            on the input and `limits` alone (no clock).
    """
    if start_local.tzinfo is not None:
        raise ValueError("start_local must be naive")
    if accept and len(exdates) > limits.max_exdates:
        raise InvalidSchedule("exdates", f"at most {limits.max_exdates} are allowed")
    if exdates and rrule is None:
        raise InvalidSchedule(
            "exdates", "exclusions need an rrule: a one-time reminder has one time"
        )
    rule = None
    if rrule is not None:
        rule = parse_rrule(
            rrule, all_day=all_day, max_count=limits.max_count if accept else 2**31 - 1
        )
        if all_day and (
            rule.freq in ("HOURLY", "MINUTELY", "SECONDLY")
            or rule.byhour is not None
            or rule.byminute is not None
            or rule.bysecond is not None
        ):
            raise InvalidSchedule(
                "rrule",
                "an all-day reminder repeats by days or longer; BYHOUR, BYMINUTE, BYSECOND "
                "and sub-daily FREQ are not allowed (RFC 5545 §3.3.10)",
            )
    schedule = Schedule(
        start_local=start_local,
        rule=rule,
        exdates=frozenset(exdates),
        all_day=all_day,
        nonexistent=nonexistent,
        ambiguous=ambiguous,
    )
    if rule is not None and accept:
        _check_spacing(schedule, limits)
    return schedule


#: Consecutive candidates whose spacing `compile_schedule` checks (fewer with COUNT/UNTIL),
#: and the span past the first one after which it stops looking (two leap cycles: a rule
#: sparse enough to need more puts no load on anything).
SPACING_SAMPLE = 51
SPACING_SPAN = timedelta(days=8 * 366)


#: One local day, seconds.
DAY_S = 86400


def _whole_days_apart(rule: RecurRule) -> bool:
    """True when every occurrence of `rule` falls at the start's local time of day, each
    on a date of its own, so that consecutive ones are whole local days apart: FREQ=DAILY
    or coarser with no BYHOUR, BYMINUTE or BYSECOND (RFC 5545 §3.3.10: a time part the
    rule does not give is taken from DTSTART; a recurrence set holds no date-time twice).
    Candidates are local wall-clock times, before a DST gap or overlap is resolved, so a
    DST change does not shorten the gap between them. Pure."""
    return (
        rule.freq in ("DAILY", "WEEKLY", "MONTHLY", "YEARLY")
        and rule.byhour is None
        and rule.byminute is None
        and rule.bysecond is None
    )


def _check_spacing(schedule: Schedule, limits: Limits) -> None:
    """Refuse a rule whose first candidates come closer than `limits.min_spacing_s`, or
    that has no candidate at all within the search window from its start.

    Looks at the first SPACING_SAMPLE candidates, no more than COUNT of them, none past
    UNTIL and none more than SPACING_SPAN after the first (a rule's real occurrences are
    all there is to check: issue 14 found a COUNT=3 rule refused for the cost of 50
    candidates it never has). Work is bounded by the candidates and the search window.
    A rule whose occurrences are whole days apart (`_whole_days_apart`) with a minimum of
    at most a day has only its first candidate looked for (a weekly rule's 51 cost ~5% of
    a create's CPU in the API, issue 15).
    """
    rule = schedule.rule
    assert rule is not None
    minimum = limits.min_spacing_s
    if rule.nominal_spacing_s < minimum:
        raise InvalidSchedule(
            "rrule",
            f"FREQ={rule.freq};INTERVAL={rule.interval} repeats more often than the minimum "
            f"spacing of {minimum:g} s",
        )
    sample = min(SPACING_SAMPLE, rule.count) if rule.count is not None else SPACING_SAMPLE
    if minimum <= DAY_S and _whole_days_apart(rule):
        sample = 1  # no two can be closer than a day: only "has a first one" is left
    until = rule.until.value if rule.until is not None else None
    previous: datetime | None = None
    first: datetime | None = None
    seen = 0
    for local in _local_candidates(schedule, None, limits, _Budget(limits)):
        if first is not None and local - first > SPACING_SPAN:
            break
        if isinstance(until, datetime):
            if local - _MAX_OFFSET > until.replace(tzinfo=None):
                break  # fires at or after local - 14 h: past UNTIL in every zone
        elif until is not None and local.date() > until:
            break
        if previous is not None and (local - previous).total_seconds() < minimum:
            raise InvalidSchedule(
                "rrule",
                f"occurrences {previous:%Y-%m-%dT%H:%M:%S} and {local:%Y-%m-%dT%H:%M:%S} are "
                f"closer than the minimum spacing of {minimum:g} s",
            )
        previous = local
        first = first or local
        seen += 1
        if seen >= sample:
            break
    if seen == 0:
        raise InvalidSchedule(
            "rrule",
            f"has no occurrence from its start {schedule.start_local:%Y-%m-%dT%H:%M:%S} on "
            f"(none within the search window of at least {limits.window_years} years, or "
            "UNTIL is before the start)",
        )


class _Budget:
    """Counts the candidates one expansion examines (work, not time)."""

    __slots__ = ("iterations", "limit")

    def __init__(self, limits: Limits) -> None:
        self.limit = limits.max_iterations
        self.iterations = 0

    def tick(self) -> None:
        self.iterations += 1
        if self.iterations > self.limit:
            raise ExpansionLimitExceeded(f"over {self.limit} iterations")


def _anchor(rule: RecurRule, start: datetime, target: datetime) -> datetime:
    """The period boundary at or before `target` (not before `start`'s period) whose
    period index is a multiple of INTERVAL counted from `start`'s period."""
    n = rule.interval
    if rule.freq == "YEARLY":
        k = max(0, (target.year - start.year) // n)
        return datetime(start.year + k * n, 1, 1)
    if rule.freq == "MONTHLY":
        months = (target.year - start.year) * 12 + target.month - start.month
        total = start.month - 1 + max(0, months // n) * n
        return datetime(start.year + total // 12, total % 12 + 1, 1)
    if rule.freq == "WEEKLY":
        first = _week_start(start.date(), rule.wkst)
        weeks = (_week_start(target.date(), rule.wkst) - first).days // 7
        return _midnight(first + timedelta(weeks=max(0, weeks // n) * n))
    if rule.freq == "DAILY":
        days = (target.date() - start.date()).days
        return _midnight(start.date() + timedelta(days=max(0, days // n) * n))
    unit = {"HOURLY": 3600, "MINUTELY": 60, "SECONDLY": 1}[rule.freq]
    base = start.replace(microsecond=0)
    if rule.freq == "HOURLY":
        base = base.replace(minute=0, second=0)
    elif rule.freq == "MINUTELY":
        base = base.replace(second=0)
    steps = int((target - base).total_seconds() // (unit * n))
    return base + timedelta(seconds=max(0, steps) * unit * n)


@lru_cache(maxsize=4096)
def _derived(rule: RecurRule, start: datetime) -> RecurRule:
    """`rule` with the parts RFC 5545 §3.3.10 takes from DTSTART written out where
    python-dateutil would read their absence otherwise.

    RFC 5545 §3.3.10: "Information, not contained in the rule, necessary to determine the
    various recurrence instance start time and dates are derived from the Start Time
    ("DTSTART") component attribute." Two cases differ from dateutil:

    - FREQ=YEARLY with BYWEEKNO and no BYDAY, BYMONTHDAY or BYYEARDAY: the weekday is
      the start's (dateutil: every day of those weeks). E.g. from Tuesday 2013-01-08,
      BYWEEKNO=1,2 is the Tuesday of ISO weeks 1 and 2: 2013-01-08, 2013-12-31, 2014-01-07.
    - FREQ=YEARLY with BYMONTHDAY and no BYMONTH, BYWEEKNO or BYYEARDAY: the month is the
      start's (dateutil: that day of every month). E.g. from 2024-02-29, BYMONTHDAY=29 is
      February 29 of each leap year (invalid dates are skipped, §3.3.10).
    """
    if rule.freq != "YEARLY" or rule.byyearday is not None:
        return rule
    if rule.byweekno is not None:
        if rule.byday is None and rule.bymonthday is None:
            return replace(rule, byday=(WeekdaySpec(start.weekday()),))
        return rule
    if rule.bymonthday is not None and rule.bymonth is None:
        return replace(rule, bymonth=(start.month,))
    return rule


@lru_cache(maxsize=4096)
def _as_monthly(rule: RecurRule, start: datetime) -> tuple[RecurRule, datetime]:
    """An equivalent MONTHLY rule for a simple YEARLY one, and the start its phase counts
    from; other rules come back unchanged with `start`.

    python-dateutil walks every day of each year for FREQ=YEARLY (about 60 µs a year)
    but only the days of the chosen months for FREQ=MONTHLY. Without BYWEEKNO, BYYEARDAY,
    BYSETPOS or ordinal BYDAY (whose meaning depends on the period), a yearly rule is the
    same set as: one month every 12 x INTERVAL months, or (INTERVAL=1) several months
    every year (RFC 5545 §3.3.10 expands BYMONTHDAY and BYDAY within the month alike).
    """
    if (
        rule.freq != "YEARLY"
        or rule.byweekno is not None
        or rule.byyearday is not None
        or rule.bysetpos is not None
        or (rule.byday is not None and any(d.n is not None for d in rule.byday))
    ):
        return rule, start
    if rule.bymonth is not None:
        months = rule.bymonth
    elif rule.bymonthday is None and rule.byday is None:
        months = (start.month,)
    else:
        months = tuple(range(1, 13))
    if len(months) == 1:
        monthly = replace(rule, freq="MONTHLY", interval=12 * rule.interval, bymonth=None)
        return monthly, start.replace(month=months[0], day=1)
    if rule.interval == 1:
        return replace(rule, freq="MONTHLY", bymonth=months), start
    return rule, start


@lru_cache(maxsize=4096)
def _weeks_apart(rule: RecurRule) -> tuple[RecurRule, frozenset[int] | None]:
    """A BYWEEKNO rule as the rule python-dateutil is given, and the week numbers to keep
    (None: no BYWEEKNO, nothing to filter).

    python-dateutil 2.9 numbers the first days of some years wrongly: for the days before
    week 1 it takes the length of the previous year from the current one (dateutil PR
    #1537, open), so it calls them week 53 where the previous year has 52 weeks, or 52
    where it has 53 (January 1-2 of 2022 fell in a week 53 that 2021 does not have, and
    BYWEEKNO=52 missed them). It is given both 52 and 53 when the rule names either, and
    every day it yields is kept by its RFC 5545 week number (`_week_number`): at most one
    more week per year to look at, never a whole year (a week filter over every day would
    spend the candidate budget). BYSETPOS with BYWEEKNO is refused (rrule.py): it would
    pick among the days before this filter.
    """
    if rule.byweekno is None:
        return rule, None
    weeks = frozenset(rule.byweekno)
    if weeks & {52, 53}:
        rule = replace(rule, byweekno=tuple(sorted(weeks | {52, 53})))
    return rule, weeks


def _week_number(day: date, wkst: int) -> int:
    """RFC 5545 §3.3.10 week number of `day` for weeks starting on `wkst` (0 = Monday):
    week 1 is the first week with at least four days in the calendar year, so it is the
    week holding January 4; a week belongs to the year holding its fourth day (ISO 8601
    for WKST=MO). 1..53."""
    start = _week_start(day, wkst)
    year = (start + timedelta(days=3)).year
    return (start - _week_start(date(year, 1, 4), wkst)).days // 7 + 1


def _week_start(day: date, wkst: int) -> date:
    return day - timedelta(days=(day.weekday() - wkst) % 7)


def _midnight(day: date) -> datetime:
    return datetime(day.year, day.month, day.day)


def _dateutil_rule(rule: RecurRule, start: datetime, anchor: datetime) -> du.rrule:
    """dateutil rule at `anchor`, with every default RFC 5545 takes from DTSTART explicit."""
    return du.rrule(dtstart=anchor, cache=False, **_dateutil_arguments(rule, start))


@lru_cache(maxsize=4096)
def _dateutil_arguments(rule: RecurRule, start: datetime) -> dict[str, Any]:
    """The rrule() arguments of `rule` for a reminder starting at `start` (cached: a
    reminder's arguments are the same at every anchor)."""
    bymonth, bymonthday, byday = rule.bymonth, rule.bymonthday, rule.byday
    weekdays: tuple[du.weekday, ...] | None = (
        tuple(du.weekday(d.weekday, d.n) for d in byday) if byday is not None else None
    )
    if rule.byweekno is None and rule.byyearday is None and bymonthday is None and byday is None:
        if rule.freq == "YEARLY":
            bymonth = bymonth or (start.month,)
            bymonthday = (start.day,)
        elif rule.freq == "MONTHLY":
            bymonthday = (start.day,)
        elif rule.freq == "WEEKLY":
            weekdays = (du.weekday(start.weekday()),)
    sub_daily = rule.freq in ("HOURLY", "MINUTELY", "SECONDLY")
    byhour = rule.byhour if rule.byhour is not None or sub_daily else (start.hour,)
    byminute = (
        rule.byminute
        if rule.byminute is not None or rule.freq in ("MINUTELY", "SECONDLY")
        else (start.minute,)
    )
    bysecond = (
        rule.bysecond if rule.bysecond is not None or rule.freq == "SECONDLY" else (start.second,)
    )
    return {
        "freq": _DU_FREQ[rule.freq],
        "interval": rule.interval,
        "wkst": rule.wkst,
        "bymonth": bymonth,
        "bymonthday": bymonthday,
        "byyearday": rule.byyearday,
        "byweekno": rule.byweekno,
        "byweekday": weekdays,
        "byhour": byhour,
        "byminute": byminute,
        "bysecond": bysecond,
        "bysetpos": rule.bysetpos,
    }


def _local_candidates(
    schedule: Schedule,
    target: datetime | None,
    limits: Limits,
    budget: _Budget,
    resume: datetime | None = None,
) -> Iterator[datetime]:
    """Nominal local occurrences >= start (and from about `target`), ascending.

    COUNT, UNTIL, EXDATE and zones are applied by the caller; for a rule with COUNT the
    caller needs every candidate from the start, so `target` is ignored then, unless the
    caller knows the count up to `resume` (a local time): candidates then start there.
    """
    start, rule = schedule.start_local, schedule.rule
    if rule is None:
        yield start
        return
    if rule.count is not None:
        from_local = max(start, resume) if resume is not None else start
    else:
        from_local = start if target is None else max(start, target)
    rule, weeks = _weeks_apart(_derived(rule, start))
    wkst = rule.wkst
    rule, phase = _as_monthly(rule, start)
    anchor = _anchor(rule, phase, from_local)
    cycles = max(0, (_MAX_YEAR - limits.window_years - anchor.year) // _CYCLE_YEARS)
    shifted = anchor.replace(year=anchor.year + cycles * _CYCLE_YEARS)
    back = shifted - anchor  # an exact number of days: 146,097 per 400 years
    previous = None
    try:
        expansion = _expand(rule, start, shifted)
    except ValueError as exc:
        # dateutil refuses rules it can tell are empty, e.g. HOURLY;INTERVAL=2;BYHOUR=9
        # from an even hour ("byxxx generates an empty set").
        raise InvalidSchedule("rrule", f"has no occurrence ({exc})") from None
    while True:
        try:
            candidate = next(expansion)
        except StopIteration:
            return
        except (IndexError, ValueError, OverflowError) as exc:  # dateutil's own limits
            raise InvalidSchedule("rrule", f"cannot be expanded ({exc})") from None
        budget.tick()
        if candidate == previous:
            continue  # the same instant from both halves of a mixed BYDAY
        previous = candidate
        local = candidate - back
        if weeks is not None and _week_number(local.date(), wkst) not in weeks:
            continue
        if local >= from_local if rule.count is not None else local >= start:
            yield local


def _expand(rule: RecurRule, start: datetime, anchor: datetime) -> Iterator[datetime]:
    """dateutil's expansion; a BYDAY that mixes plain (MO) and numbered (-1WE) days is the
    union of the two (RFC 5545 §3.3.10: each BYDAY value selects days on its own), which
    dateutil would intersect, so the halves are expanded apart and merged."""
    if rule.byday is None or len({d.n is None for d in rule.byday}) == 1:
        return iter(_dateutil_rule(rule, start, anchor))
    plain = replace(rule, byday=tuple(d for d in rule.byday if d.n is None))
    numbered = replace(rule, byday=tuple(d for d in rule.byday if d.n is not None))
    return heapq.merge(
        _dateutil_rule(plain, start, anchor), _dateutil_rule(numbered, start, anchor)
    )


def iter_occurrences(
    schedule: Schedule,
    zone: ZoneInfo,
    *,
    after: datetime | None = None,
    inclusive: bool = True,
    include_skipped: bool = False,
    limits: Limits = DEFAULT_LIMITS,
    progress: CountProgress | None = None,
    progress_out: _ProgressOut | None = None,
) -> Iterator[Occurrence]:
    """Occurrences in `zone`, ascending by instant, each instant once.

    Args:
        after: aware datetime; only occurrences at (`inclusive`) or after it. None: from
            the start.
        include_skipped: also yield occurrences dropped by the `skip` policy (utc None),
            in their place, for previews.
        progress: for a COUNT rule, the count up to a local time (see `CountProgress`);
            used when it was counted in `zone` and lies before what `after` needs, else
            the count starts from the start (same answer, more work).
        progress_out: receives the latest progress a later call can resume from.

    Raises:
        ExpansionLimitExceeded: the rule needs more candidates than `limits` allow.
    """
    rule = schedule.rule
    after_utc = after.astimezone(UTC) if after is not None else None
    target = skip_below = None
    if after_utc is not None:
        target = after_utc.astimezone(zone).replace(tzinfo=None) - _anchor_margin(zone)
        # A local time L fires at or before L + 12h (UTC): below this it cannot reach `after`.
        skip_below = (after_utc - _MAX_NEGATIVE_OFFSET).replace(tzinfo=None)
    counting = rule is not None and rule.count is not None
    resume = None
    if (
        counting
        and progress is not None
        and target is not None
        and progress.zone == zone.key
        and progress.local <= target
    ):
        resume = progress  # every candidate before it fires before `after`
    until = rule.until.value if rule is not None and rule.until is not None else None
    until_date = until if until is not None and not isinstance(until, datetime) else None
    until_utc = until if isinstance(until, datetime) else None
    max_count = rule.count if rule is not None else None
    exdates = schedule.exdates
    policy = (schedule.nonexistent, schedule.ambiguous)
    heap: list[tuple[datetime, int, Occurrence]] = []
    order = counter()
    counted = resume.counted if resume is not None else 0
    last: datetime | None = None
    track = progress_out if counting and target is not None else None
    if track is not None:
        track.progress = resume  # still right if no candidate passes before `target`

    def release(bound: datetime | None) -> Iterator[Occurrence]:
        nonlocal last
        while heap and (bound is None or heap[0][0] < bound):
            key, _, occ = heapq.heappop(heap)
            if occ.utc is None:
                if include_skipped and (after_utc is None or key >= after_utc):
                    yield occ
                continue
            if occ.utc == last:
                continue  # two readings, one instant: fire once
            if after_utc is not None and (
                occ.utc < after_utc or (not inclusive and occ.utc == after_utc)
            ):
                continue
            last = occ.utc
            yield occ

    resume_local = resume.local if resume is not None else None
    for local in _local_candidates(schedule, target, limits, _Budget(limits), resume_local):
        if track is not None and target is not None and local <= target:
            # Nothing from here on fires before `after`' >= `after`, so a later call can
            # resume the count at this candidate.
            track.progress = CountProgress(local, counted, zone.key)
        if heap:
            # Whatever comes later fires at or after local - 14h (UTC): release what
            # cannot be overtaken any more.
            yield from release(local.replace(tzinfo=UTC) - _MAX_OFFSET)
        if until_date is not None and local.date() > until_date:
            break
        if max_count is None and skip_below is not None and local < skip_below:
            continue  # cannot reach `after`, and nothing to count
        instants, real = readings(local, zone, *policy)
        if until_utc is not None:
            if instants and instants[0] > until_utc:
                break
            instants = [i for i in instants if i <= until_utc]
        if instants or real:
            counted += 1  # a skipped gap time is not counted (RFC 5545 §3.3.10)
        if local not in exdates:
            if not instants:
                if include_skipped:
                    where = readings(local, zone)[0][0]  # where `shift` would put it
                    heapq.heappush(heap, (where, next(order), Occurrence(local, None, False, True)))
            elif real and len(instants) == 1 and not heap:
                # An instant that exists once is never overtaken by the reading of a later
                # local time (offsets jump ahead only across a gap the wall clock skips),
                # so with nothing pending it goes out at once.
                instant = instants[0]
                if instant != last and (
                    after_utc is None or instant > after_utc or (inclusive and instant == after_utc)
                ):
                    last = instant
                    yield Occurrence(local, instant)
            else:
                for instant in instants:
                    occ = Occurrence(local, instant, shifted=not real)
                    heapq.heappush(heap, (instant, next(order), occ))
        if max_count is not None and counted >= max_count:
            break
    yield from release(None)


def next_occurrence(
    schedule: Schedule,
    zone: ZoneInfo,
    after: datetime,
    *,
    inclusive: bool = False,
    limits: Limits = DEFAULT_LIMITS,
    progress: CountProgress | None = None,
) -> datetime | None:
    """The first instant strictly after `after` (or at it, `inclusive`), aware UTC; None
    when the schedule has no more occurrences (COUNT/UNTIL reached, one-time in the past,
    or none within the search window). `progress`: as `iter_occurrences`.

    Raises:
        ExpansionLimitExceeded: the rule needs more candidates than `limits` allow.
    """
    return next_occurrence_and_progress(
        schedule, zone, after, inclusive=inclusive, limits=limits, progress=progress
    )[0]


def next_occurrence_and_progress(
    schedule: Schedule,
    zone: ZoneInfo,
    after: datetime,
    *,
    inclusive: bool = False,
    limits: Limits = DEFAULT_LIMITS,
    progress: CountProgress | None = None,
) -> tuple[datetime | None, CountProgress | None]:
    """`next_occurrence`, and for a COUNT rule the progress to keep for the next call
    (None for other rules, or when nothing usable was passed): with it, the next
    computation costs the same at any age of the reminder (issue 14).

    Returns:
        (aware UTC instant or None, progress or None).

    Raises:
        ExpansionLimitExceeded: the rule needs more candidates than `limits` allow.
    """
    out = _ProgressOut()
    found = None
    for occ in iter_occurrences(
        schedule,
        zone,
        after=after,
        inclusive=inclusive,
        limits=limits,
        progress=progress,
        progress_out=out,
    ):
        found = occ.utc
        break
    return found, out.progress


def occurrences_between(
    schedule: Schedule,
    zone: ZoneInfo,
    after: datetime,
    until: datetime,
    *,
    max_items: int = 10_000,
    limits: Limits = DEFAULT_LIMITS,
) -> list[datetime]:
    """Instants in (`after`, `until`], ascending, at most `max_items` (aware UTC)."""
    found: list[datetime] = []
    for occ in iter_occurrences(schedule, zone, after=after, inclusive=False, limits=limits):
        assert occ.utc is not None
        if occ.utc > until or len(found) >= max_items:
            break
        found.append(occ.utc)
    return found


def unmatched_exdates(
    schedule: Schedule, zone: ZoneInfo, *, limits: Limits = DEFAULT_LIMITS
) -> dict[datetime, tuple[datetime, ...]]:
    """The exclusions that match no occurrence of the rule, each with the rule's local
    times on that date (empty: none that day), in `zone`.

    RFC 5545 §3.8.5.1: an EXDATE removes the instance with that start; one that equals no
    instance removes nothing, so a user who wrote it meant something else (a time the
    rule no longer has, a day before the start, past COUNT or UNTIL). A gap time dropped
    by the `skip` policy still counts as matched: the rule has that instance.

    Args:
        schedule: a schedule with a rule (no rule: nothing to match, {}).

    Returns:
        {exdate: local times of the rule on exdate's date, ascending}, in exdate order.

    Raises:
        ExpansionLimitExceeded: as `iter_occurrences`.
    """
    if schedule.rule is None or not schedule.exdates:
        return {}
    bare = replace(schedule, exdates=frozenset())
    unmatched: dict[datetime, tuple[datetime, ...]] = {}
    for excluded in sorted(schedule.exdates):
        day = excluded.date()
        # Local L fires within [L - 14 h, L + 12 h] in UTC: from the day's first minute
        # read at the largest offset on, and up to the next day's end at the smallest.
        after = (_midnight(day) - _MAX_OFFSET - timedelta(hours=1)).replace(tzinfo=UTC)
        stop = _midnight(day) + timedelta(days=2) + _MAX_NEGATIVE_OFFSET
        that_day: set[datetime] = set()
        for occ in iter_occurrences(bare, zone, after=after, include_skipped=True, limits=limits):
            if occ.local.date() == day:
                that_day.add(occ.local)
            instant = occ.utc if occ.utc is not None else readings(occ.local, zone)[0][0]
            if instant.replace(tzinfo=None) > stop:
                break
        if excluded not in that_day:
            unmatched[excluded] = tuple(sorted(that_day))
    return unmatched


def preview(
    schedule: Schedule,
    zone: ZoneInfo,
    after: datetime,
    limit: int,
    *,
    limits: Limits = DEFAULT_LIMITS,
) -> list[Occurrence]:
    """The next `limit` occurrences at or after `after`, skipped ones included and flagged."""
    items: list[Occurrence] = []
    for occ in iter_occurrences(schedule, zone, after=after, include_skipped=True, limits=limits):
        items.append(occ)
        if len(items) >= limit:
            break
    return items


__all__ = [
    "DEFAULT_LIMITS",
    "CountProgress",
    "ExpansionLimitExceeded",
    "Limits",
    "Occurrence",
    "Schedule",
    "compile_schedule",
    "iter_occurrences",
    "next_occurrence",
    "next_occurrence_and_progress",
    "occurrences_between",
    "preview",
    "unmatched_exdates",
]
