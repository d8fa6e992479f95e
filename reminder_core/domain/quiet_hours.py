"""Quiet hours: local-time windows in which a user gets no email (issue 17; docs/design.md,
"Quiet hours").

Pure functions, no I/O. A user's profile may say "not between 22:00 and 07:30", on every
day or on named weekdays. An occurrence due inside a window is held to the window's end,
computed in the zone of the profile as read at send time; the window's two ends are local
wall-clock readings resolved with the same DST policies as occurrences (docs/design.md,
"DST policies"): an end in a spring-forward gap is read with the offset in force before
the gap (RFC 5545 §3.3.5, `shift`), an end in a fall-back overlap is its first instant
(`first`).
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import UTC, date, datetime, time, timedelta
from zoneinfo import ZoneInfo

from reminder_core.domain.localtime import local_to_utc

#: Weekday names as profiles spell them, Monday first (datetime.weekday() order).
WEEKDAYS = ("mon", "tue", "wed", "thu", "fri", "sat", "sun")
#: The most windows one profile may have.
MAX_WINDOWS = 14
#: Adjacent or overlapping windows are followed to the end of the last, at most this many.
MAX_CHAINED = MAX_WINDOWS + 1

_HHMM = re.compile(r"^([01]\d|2[0-3]):([0-5]\d)$", re.ASCII)


@dataclass(frozen=True, slots=True)
class QuietWindow:
    """One quiet-hours window.

    Attributes:
        start, end: local wall-clock times (minutes precision); `end` <= `start` means the
            window crosses midnight and ends the next day. Never equal.
        days: the weekdays (0 = Monday) on which the window *starts*; None: every day.
            "fri 22:00-07:30" holds Friday night until Saturday 07:30.
    """

    start: time
    end: time
    days: frozenset[int] | None = None

    def __post_init__(self) -> None:
        if self.start == self.end:
            raise ValueError("a quiet-hours window must not start and end at the same time")

    def starts_on(self, day: date) -> bool:
        """True when an instance of the window starts on local date `day`."""
        return self.days is None or day.weekday() in self.days

    def instance(self, day: date, zone: ZoneInfo) -> tuple[datetime, datetime]:
        """The window starting on local date `day` as aware UTC [start, end) instants."""
        start = datetime.combine(day, self.start)
        end_day = day if self.end > self.start else day + timedelta(days=1)
        end = datetime.combine(end_day, self.end)
        return _instant(start, zone), _instant(end, zone)


def _instant(local: datetime, zone: ZoneInfo) -> datetime:
    # `shift` and `first` always give exactly one instant.
    return local_to_utc(local, zone, nonexistent="shift", ambiguous="first")[0]


def quiet_until(
    instant: datetime, windows: Sequence[QuietWindow], zone: ZoneInfo
) -> datetime | None:
    """The end of the quiet hours `instant` falls in, or None when it falls in none.

    Windows that touch or overlap are followed: an instant in a weekday 22:00-07:00 window
    followed by a 07:00-09:00 one is held until 09:00.

    Args:
        instant: aware datetime (any zone; compared as an instant).
        windows: the profile's windows.
        zone: the zone the windows are read in (the profile's, as in force now).

    Returns:
        Aware UTC: the instant the last window containing `instant` ends (> `instant`), or
        None.
    """
    at = instant.astimezone(UTC)
    until: datetime | None = None
    for _ in range(MAX_CHAINED):
        end = _containing_end(at, windows, zone)
        if end is None:
            break
        until = at = end
    return until


def _containing_end(
    at: datetime, windows: Sequence[QuietWindow], zone: ZoneInfo
) -> datetime | None:
    """The latest end of the window instances that contain `at` (aware UTC), or None.

    A window lasts under 24 wall-clock hours, so an instance containing `at` started on
    `at`'s local date or the day before (DST changes move its ends by at most hours).
    """
    today = at.astimezone(zone).date()
    ends = [
        end
        for window in windows
        for day in (today - timedelta(days=1), today)
        if window.starts_on(day)
        for start, end in (window.instance(day, zone),)
        if start <= at < end
    ]
    return max(ends, default=None)


def parse_windows(raw: object) -> tuple[QuietWindow, ...]:
    """The quiet hours of a profile's `quiet_hours` member.

    Args:
        raw: None (no quiet hours) or a JSON list of at most MAX_WINDOWS objects
            `{"start": "HH:MM", "end": "HH:MM", "days": ["mon", ...]}` (`days` optional:
            every day).

    Returns:
        The windows, in the order given.

    Raises:
        ValueError: the value is not of that shape; the message names the member and why
            (e.g. "quiet_hours[0].end: must be 'HH:MM' (00:00-23:59)").
    """
    if raw is None:
        return ()
    if not isinstance(raw, list):
        raise ValueError("quiet_hours: must be a list of {start, end, days} objects")
    if len(raw) > MAX_WINDOWS:
        raise ValueError(f"quiet_hours: at most {MAX_WINDOWS} windows")
    return tuple(_parse_window(f"quiet_hours[{i}]", item) for i, item in enumerate(raw))


def _parse_window(where: str, item: object) -> QuietWindow:
    if not isinstance(item, dict):
        raise ValueError(f"{where}: must be an object with start and end")
    unknown = set(item) - {"start", "end", "days"}
    if unknown:
        raise ValueError(f"{where}: unknown member(s) {', '.join(sorted(map(str, unknown)))}")
    start, end = _hhmm(f"{where}.start", item.get("start")), _hhmm(f"{where}.end", item.get("end"))
    if start == end:
        raise ValueError(f"{where}: start and end must differ")
    days = item.get("days")
    if days is None:
        return QuietWindow(start, end)
    if not isinstance(days, list) or not days:
        raise ValueError(f"{where}.days: must be a non-empty list of {', '.join(WEEKDAYS)}")
    parsed: set[int] = set()
    for day in days:
        if not isinstance(day, str) or day.lower() not in WEEKDAYS:
            raise ValueError(f"{where}.days: {day!r} is not one of {', '.join(WEEKDAYS)}")
        parsed.add(WEEKDAYS.index(day.lower()))
    return QuietWindow(start, end, frozenset(parsed))


def _hhmm(where: str, value: object) -> time:
    match = _HHMM.match(value) if isinstance(value, str) else None
    if match is None:
        raise ValueError(f"{where}: must be 'HH:MM' (00:00-23:59), got {value!r}")
    return time(int(match[1]), int(match[2]))
