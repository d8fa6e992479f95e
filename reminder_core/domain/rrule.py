"""Strict RFC 5545 RRULE parsing (§3.3.10), with error messages that name the problem.

Pure code. The parsed `RecurRule` is expanded by python-dateutil in `recurrence.py`; we
parse ourselves so that every rule dateutil would accept silently but RFC 5545 forbids (or
that would make dateutil spin) is refused up front with a sentence a user can act on.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field, replace
from datetime import UTC, date, datetime
from functools import lru_cache
from typing import Literal

from reminder_core.errors import InvalidSchedule

Freq = Literal["YEARLY", "MONTHLY", "WEEKLY", "DAILY", "HOURLY", "MINUTELY", "SECONDLY"]

FREQS: tuple[Freq, ...] = ("YEARLY", "MONTHLY", "WEEKLY", "DAILY", "HOURLY", "MINUTELY", "SECONDLY")
#: Nominal length of one period of each frequency, in seconds (for spacing checks).
FREQ_SECONDS = {
    "YEARLY": 365 * 86400,
    "MONTHLY": 28 * 86400,
    "WEEKLY": 7 * 86400,
    "DAILY": 86400,
    "HOURLY": 3600,
    "MINUTELY": 60,
    "SECONDLY": 1,
}
WEEKDAYS = ("MO", "TU", "WE", "TH", "FR", "SA", "SU")
MAX_RRULE_BYTES = 1024
MAX_INTERVAL = 10_000

# re.ASCII: \d is [0-9] only (Python's \d also matches other scripts' digits).
_BYDAY_RE = re.compile(r"^([+-]?)(\d{1,2})?(MO|TU|WE|TH|FR|SA|SU)$", re.ASCII)
_INT_RE = re.compile(r"^[+-]?\d{1,4}$", re.ASCII)
_DIGITS_RE = re.compile(r"^\d{1,9}$", re.ASCII)
_UNTIL_DATE_RE = re.compile(r"^(\d{4})(\d{2})(\d{2})$", re.ASCII)
_UNTIL_DT_RE = re.compile(r"^(\d{4})(\d{2})(\d{2})T(\d{2})(\d{2})(\d{2})(Z?)$", re.ASCII)

FIELD = "rrule"


@dataclass(frozen=True, slots=True)
class WeekdaySpec:
    """One BYDAY entry: weekday index (0 = Monday) and optional ordinal (e.g. -1 = last)."""

    weekday: int
    n: int | None = None


@dataclass(frozen=True, slots=True)
class Until:
    """UNTIL as RFC 5545 allows it for our starts: a DATE, or a DATE-TIME in UTC."""

    value: date | datetime  # a datetime is aware UTC


@dataclass(frozen=True, slots=True)
class RecurRule:
    """A parsed, validated RRULE. Tuples are sorted and de-duplicated; None = absent."""

    freq: Freq
    interval: int = 1
    count: int | None = None
    until: Until | None = None
    wkst: int = 0
    bymonth: tuple[int, ...] | None = None
    byweekno: tuple[int, ...] | None = None
    byyearday: tuple[int, ...] | None = None
    bymonthday: tuple[int, ...] | None = None
    byday: tuple[WeekdaySpec, ...] | None = None
    byhour: tuple[int, ...] | None = None
    byminute: tuple[int, ...] | None = None
    bysecond: tuple[int, ...] | None = None
    bysetpos: tuple[int, ...] | None = None
    text: str = field(default="", compare=False)  # canonical RFC 5545 form

    @property
    def nominal_spacing_s(self) -> int:
        """INTERVAL x the length of one FREQ period, seconds (BYxxx may make it denser)."""
        return self.interval * FREQ_SECONDS[self.freq]


def normalize_rrule_text(text: str) -> str:
    """Strip an optional "RRULE:" prefix and surrounding white space."""
    stripped = text.strip()
    if stripped[:6].upper() == "RRULE:":
        stripped = stripped[6:].strip()
    return stripped


def parse_rrule(text: str, *, all_day: bool, max_count: int) -> RecurRule:
    """Parse and validate RRULE text (RFC 5545 §3.3.10), with or without "RRULE:".

    Args:
        text: e.g. "FREQ=WEEKLY;BYDAY=MO,WE" or "RRULE:FREQ=DAILY;COUNT=5".
        all_day: the reminder's start is a DATE (UNTIL must then be a DATE) rather than a
            DATE-TIME with a time zone (UNTIL must then be in UTC, "...Z").
        max_count: largest COUNT accepted.

    Returns:
        The parsed rule.

    Raises:
        InvalidSchedule: ("rrule") with the part at fault and the RFC rule it breaks.
    """
    if not isinstance(text, str):
        raise InvalidSchedule(FIELD, "must be a string")
    return _parse_cached(text, all_day, max_count)


@lru_cache(maxsize=4096)
def _parse_cached(text: str, all_day: bool, max_count: int) -> RecurRule:
    """`parse_rrule` of a string, remembered (the outcome depends on the arguments alone
    and a RecurRule is immutable): many reminders share a rule's text, and the sender
    and the coordinator read each stored rule back at every occurrence (~25 µs of CPU a
    parse; issue 15). A refusal raises and is not remembered. At most 4,096 texts of at
    most MAX_RRULE_BYTES each are kept."""
    if len(text.encode("utf-8")) > MAX_RRULE_BYTES:
        raise InvalidSchedule(FIELD, f"is longer than {MAX_RRULE_BYTES} bytes")
    body = normalize_rrule_text(text)
    if not body:
        raise InvalidSchedule(FIELD, "is empty; give e.g. 'FREQ=WEEKLY;BYDAY=MO'")
    if "DTSTART" in body.upper():
        raise InvalidSchedule(
            FIELD, "must not contain DTSTART: the start goes in 'start_local' (and 'timezone')"
        )
    if any(c in body for c in "\r\n"):
        raise InvalidSchedule(FIELD, "must be a single RRULE line")

    if body.endswith(";") and not body.endswith(";;"):
        body = body[:-1]  # one trailing ';' is common in the wild (issue 14): accepted
    parts: dict[str, str] = {}
    for raw in body.split(";"):
        if not raw:
            raise InvalidSchedule(FIELD, "has an empty part (two ';' in a row or a trailing ';')")
        name, sep, value = raw.partition("=")
        name = name.strip().upper()
        if not sep or not value.strip():
            raise InvalidSchedule(FIELD, f"part {raw!r} is not NAME=VALUE")
        if name in parts:
            raise InvalidSchedule(FIELD, f"{name} appears more than once (RFC 5545 §3.3.10)")
        parts[name] = value.strip().upper()

    known = {
        "FREQ", "UNTIL", "COUNT", "INTERVAL", "BYSECOND", "BYMINUTE", "BYHOUR", "BYDAY",
        "BYMONTHDAY", "BYYEARDAY", "BYWEEKNO", "BYMONTH", "BYSETPOS", "WKST",
    }  # fmt: skip
    unknown = sorted(set(parts) - known)
    if unknown:
        raise InvalidSchedule(FIELD, f"unsupported rule part {unknown[0]} (RFC 5545 §3.3.10)")
    if "FREQ" not in parts:
        raise InvalidSchedule(FIELD, "FREQ is required (e.g. FREQ=DAILY)")
    freq = parts["FREQ"]
    if freq not in FREQS:
        raise InvalidSchedule(FIELD, f"FREQ={freq} is not one of {', '.join(FREQS)}")
    if "COUNT" in parts and "UNTIL" in parts:
        raise InvalidSchedule(FIELD, "COUNT and UNTIL must not both be given (RFC 5545 §3.3.10)")

    interval = _positive(parts, "INTERVAL", 1, MAX_INTERVAL)
    count = _positive(parts, "COUNT", None, max_count) if "COUNT" in parts else None
    until = _until(parts["UNTIL"], all_day=all_day) if "UNTIL" in parts else None
    wkst = _weekday(parts["WKST"], "WKST") if "WKST" in parts else 0

    bymonth = _int_list(parts, "BYMONTH", 1, 12, signed=False)
    byweekno = _int_list(parts, "BYWEEKNO", 1, 53, signed=True)
    if byweekno is not None and any(w < 0 for w in byweekno):
        # python-dateutil counts negative ISO weeks from the wrong end of some years (it
        # misses the Monday of week -52 in 52-week years); refuse rather than misfire.
        raise InvalidSchedule(FIELD, "negative BYWEEKNO values are not supported; count weeks "
                              "from the start of the year")  # fmt: skip
    byyearday = _int_list(parts, "BYYEARDAY", 1, 366, signed=True)
    bymonthday = _int_list(parts, "BYMONTHDAY", 1, 31, signed=True)
    byhour = _int_list(parts, "BYHOUR", 0, 23, signed=False)
    byminute = _int_list(parts, "BYMINUTE", 0, 59, signed=False)
    bysecond = _int_list(parts, "BYSECOND", 0, 59, signed=False, note=" (leap second 60 is "
                         "not supported)")  # fmt: skip
    bysetpos = _int_list(parts, "BYSETPOS", 1, 366, signed=True)
    byday = _byday(parts["BYDAY"]) if "BYDAY" in parts else None

    # Placement rules of RFC 5545 §3.3.10.
    if byweekno is not None and freq != "YEARLY":
        raise InvalidSchedule(FIELD, "BYWEEKNO is only valid with FREQ=YEARLY")
    if byyearday is not None and freq in ("DAILY", "WEEKLY", "MONTHLY"):
        raise InvalidSchedule(FIELD, f"BYYEARDAY must not be used with FREQ={freq}")
    if bymonthday is not None and freq == "WEEKLY":
        raise InvalidSchedule(FIELD, "BYMONTHDAY must not be used with FREQ=WEEKLY")
    if byday is not None and any(d.n is not None for d in byday):
        if freq not in ("MONTHLY", "YEARLY"):
            raise InvalidSchedule(
                FIELD, f"BYDAY with an ordinal (e.g. 1MO) needs FREQ=MONTHLY or YEARLY, not {freq}"
            )
        if freq == "YEARLY" and byweekno is not None:
            raise InvalidSchedule(FIELD, "BYDAY with an ordinal must not be used with BYWEEKNO")
        in_month = freq == "MONTHLY" or (freq == "YEARLY" and bymonth is not None)
        if in_month and any(abs(d.n or 0) > 5 for d in byday):
            # RFC 5545 §3.3.10: with YEARLY and BYMONTH the ordinal is within the month.
            raise InvalidSchedule(FIELD, "BYDAY ordinals within a month range from -5 to 5")
        if bysetpos is not None and any(d.n is None for d in byday):
            raise InvalidSchedule(
                FIELD,
                "BYSETPOS with BYDAY mixing numbered (1MO) and plain (MO) days is not "
                "supported; write the days one way",
            )
    if bysetpos is not None and byweekno is not None:
        raise InvalidSchedule(
            FIELD, "BYSETPOS with BYWEEKNO is not supported; pick the days with BYDAY instead"
        )
    if bysetpos is not None and all(
        p is None
        for p in (bymonth, byweekno, byyearday, bymonthday, byday, byhour, byminute, bysecond)
    ):
        raise InvalidSchedule(FIELD, "BYSETPOS must be used with another BYxxx part")
    if until is not None and not all_day and not isinstance(until.value, datetime):
        raise InvalidSchedule(
            FIELD,
            "UNTIL must be a UTC date-time like 20271231T235959Z for a reminder with a time "
            "(RFC 5545 §3.3.10: UNTIL has DTSTART's value type, in UTC for a zoned start)",
        )
    _check_satisfiable(bymonth, bymonthday)
    if bysetpos is not None:
        most = _most_per_period(
            freq, bymonth, byyearday, bymonthday, byday, byhour, byminute, bysecond
        )
        if min(abs(p) for p in bysetpos) > most:
            raise InvalidSchedule(
                FIELD,
                f"has no occurrence: each {freq.lower()} period holds at most {most} "
                f"instance(s), so BYSETPOS={','.join(map(str, bysetpos))} never matches",
            )

    rule = RecurRule(
        freq=freq,
        interval=interval or 1,
        count=count,
        until=until,
        wkst=wkst,
        bymonth=bymonth,
        byweekno=byweekno,
        byyearday=byyearday,
        bymonthday=bymonthday,
        byday=byday,
        byhour=byhour,
        byminute=byminute,
        bysecond=bysecond,
        bysetpos=bysetpos,
    )
    return replace(rule, text=canonical_text(rule))


def canonical_text(rule: RecurRule) -> str:
    """The rule as canonical RFC 5545 text: parts in the RFC's order, upper case, no
    spaces, no leading zeros, defaults (INTERVAL=1, WKST=MO) left out."""
    parts = [f"FREQ={rule.freq}"]
    if rule.interval != 1:
        parts.append(f"INTERVAL={rule.interval}")
    if rule.count is not None:
        parts.append(f"COUNT={rule.count}")
    if rule.until is not None:
        value = rule.until.value
        parts.append(
            "UNTIL="
            + (
                value.strftime("%Y%m%dT%H%M%SZ")
                if isinstance(value, datetime)
                else f"{value:%Y%m%d}"
            )
        )
    for name, values in (
        ("BYSECOND", rule.bysecond),
        ("BYMINUTE", rule.byminute),
        ("BYHOUR", rule.byhour),
    ):
        if values is not None:
            parts.append(f"{name}={','.join(map(str, values))}")
    if rule.byday is not None:
        days = ",".join(
            f"{d.n if d.n is not None else ''}{WEEKDAYS[d.weekday]}" for d in rule.byday
        )
        parts.append(f"BYDAY={days}")
    for name, values in (
        ("BYMONTHDAY", rule.bymonthday),
        ("BYYEARDAY", rule.byyearday),
        ("BYWEEKNO", rule.byweekno),
        ("BYMONTH", rule.bymonth),
        ("BYSETPOS", rule.bysetpos),
    ):
        if values is not None:
            parts.append(f"{name}={','.join(map(str, values))}")
    if rule.wkst != 0:
        parts.append(f"WKST={WEEKDAYS[rule.wkst]}")
    return ";".join(parts)


def _positive(parts: dict[str, str], name: str, default: int | None, maximum: int) -> int | None:
    if name not in parts:
        return default
    value = parts[name]
    if not _DIGITS_RE.match(value):
        if value.isascii() and value.isdigit():
            raise InvalidSchedule(FIELD, f"{name}={value} is over the limit of {maximum}")
        raise InvalidSchedule(FIELD, f"{name}={value} must be a positive integer")
    number = int(value)
    if number < 1:
        raise InvalidSchedule(FIELD, f"{name} must be at least 1 (RFC 5545 §3.3.10)")
    if number > maximum:
        raise InvalidSchedule(FIELD, f"{name}={number} is over the limit of {maximum}")
    return number


def _weekday(value: str, name: str) -> int:
    if value not in WEEKDAYS:
        raise InvalidSchedule(FIELD, f"{name}={value} is not a weekday (MO, TU, ... SU)")
    return WEEKDAYS.index(value)


def _int_list(
    parts: dict[str, str], name: str, low: int, high: int, *, signed: bool, note: str = ""
) -> tuple[int, ...] | None:
    if name not in parts:
        return None
    values: set[int] = set()
    for item in parts[name].split(","):
        if not _INT_RE.match(item):
            raise InvalidSchedule(FIELD, f"{name} value {item!r} is not an integer")
        number = int(item)
        magnitude = abs(number) if signed else number
        if (not signed and item[0] in "+-") or not low <= magnitude <= high:
            rng = f"{low}..{high}" + (f" or -{high}..-{low}" if signed else "")
            raise InvalidSchedule(FIELD, f"{name} value {item} is outside {rng}{note}")
        values.add(number)
    return tuple(sorted(values))


def _byday(value: str) -> tuple[WeekdaySpec, ...]:
    specs: set[WeekdaySpec] = set()
    for item in value.split(","):
        match = _BYDAY_RE.match(item)
        if not match:
            raise InvalidSchedule(FIELD, f"BYDAY value {item!r} is not like MO, 1MO or -1FR")
        sign, digits, day = match.groups()
        n = None
        if digits is not None:
            n = int(digits) * (-1 if sign == "-" else 1)
            if not 1 <= abs(n) <= 53:
                raise InvalidSchedule(FIELD, f"BYDAY ordinal in {item} is outside 1..53")
        elif sign:
            raise InvalidSchedule(FIELD, f"BYDAY value {item!r} has a sign but no number")
        specs.add(WeekdaySpec(WEEKDAYS.index(day), n))
    return tuple(sorted(specs, key=lambda s: (s.weekday, s.n or 0)))


def _until(value: str, *, all_day: bool) -> Until:
    if match := _UNTIL_DATE_RE.match(value):
        try:
            return Until(date(*map(int, match.groups())))
        except ValueError:
            raise InvalidSchedule(FIELD, f"UNTIL={value} is not a real date") from None
    if match := _UNTIL_DT_RE.match(value):
        *numbers, zulu = match.groups()
        if all_day:
            raise InvalidSchedule(
                FIELD,
                "UNTIL must be a DATE like 20271231 for an all-day reminder (RFC 5545 "
                "§3.3.10: UNTIL has the value type of DTSTART)",
            )
        if not zulu:
            raise InvalidSchedule(
                FIELD,
                f"UNTIL={value} is a floating local time; for a reminder in a time zone RFC "
                "5545 §3.3.10 requires UTC, e.g. 20271231T235959Z",
            )
        try:
            y, mo, d, h, mi, sec = map(int, numbers)
            return Until(datetime(y, mo, d, h, mi, sec, tzinfo=UTC))
        except ValueError:
            raise InvalidSchedule(FIELD, f"UNTIL={value} is not a real date-time") from None
    raise InvalidSchedule(FIELD, f"UNTIL={value} is neither YYYYMMDD nor YYYYMMDDTHHMMSSZ")


def _most_per_period(
    freq: str,
    bymonth: tuple[int, ...] | None,
    byyearday: tuple[int, ...] | None,
    bymonthday: tuple[int, ...] | None,
    byday: tuple[WeekdaySpec, ...] | None,
    byhour: tuple[int, ...] | None,
    byminute: tuple[int, ...] | None,
    bysecond: tuple[int, ...] | None,
) -> int:
    """An upper bound of the instances in one FREQ period, for BYSETPOS (RFC 5545
    §3.3.10: BYSETPOS picks among the instances of one interval). A BYSETPOS beyond it
    never matches, and python-dateutil would search centuries for it."""
    times = 1
    sub_daily = {"HOURLY": 1, "MINUTELY": 2, "SECONDLY": 3}.get(freq, 0)
    for level, values in ((1, byhour), (2, byminute), (3, bysecond)):
        if level > sub_daily:  # the period spans this unit: BYxxx expands within it
            times *= len(values) if values is not None else 1
    days = {"YEARLY": 366, "MONTHLY": 31, "WEEKLY": 7}.get(freq, 1)
    if byyearday is not None:
        days = min(days, len(byyearday))
    if bymonthday is not None:
        months = (len(bymonth) if bymonth else 12) if freq == "YEARLY" else 1
        days = min(days, len(bymonthday) * months)
    if byday is not None and freq == "WEEKLY":
        days = min(days, len(byday))
    return days * times


# Longest day of each month in a leap year: day numbers a month can hold.
_MONTH_DAYS = (31, 29, 31, 30, 31, 30, 31, 31, 30, 31, 30, 31)


def _check_satisfiable(bymonth: tuple[int, ...] | None, bymonthday: tuple[int, ...] | None) -> None:
    """Refuse BYMONTH x BYMONTHDAY combinations that never occur (e.g. February 30).

    RFC 5545 §3.3.10 drops invalid dates such as February 30, so such a rule yields
    nothing; refusing it here answers at once instead of searching years for a match.
    """
    if not bymonth or not bymonthday:
        return
    for month in bymonth:
        for day in bymonthday:
            if abs(day) <= _MONTH_DAYS[month - 1]:
                return
    raise InvalidSchedule(
        FIELD,
        "has no occurrence: none of the BYMONTHDAY days exists in the BYMONTH months "
        "(e.g. February 30)",
    )
