"""When a reminder fires: its first run at creation (one-time reminders).

Pure functions; `now` is an input (aware UTC).
"""

from __future__ import annotations

from datetime import datetime
from zoneinfo import ZoneInfo

from reminder_core.domain.localtime import Ambiguous, Nonexistent, local_to_utc
from reminder_core.errors import InvalidSchedule


def first_run_utc(
    start_local: datetime,
    zone: ZoneInfo,
    *,
    now: datetime,
    nonexistent: Nonexistent = "shift",
    ambiguous: Ambiguous = "first",
) -> datetime:
    """The instant a one-time reminder fires: `start_local` read in `zone`
    (docs/design.md, "next_run_utc").

    The first instant at or after `now` (to the second) is chosen, so with ambiguous
    `both` a reminder created between the two readings still fires at the second one.

    Args:
        start_local: naive wall-clock reading.
        now: aware UTC creation time.

    Returns:
        Aware UTC datetime.

    Raises:
        InvalidSchedule: ("start_local") the time is in the past, or falls in a DST gap
            with the `skip` policy (RFC 5545 §3.3.10: such an instance does not occur).
    """
    instants = local_to_utc(start_local, zone, nonexistent, ambiguous)
    if not instants:
        raise InvalidSchedule(
            "start_local",
            f"{start_local:%Y-%m-%dT%H:%M:%S} does not exist in {zone.key} (skipped by a DST "
            "change) and the 'skip' policy drops it",
        )
    floor = now.replace(microsecond=0)
    for instant in instants:
        if instant >= floor:
            return instant
    raise InvalidSchedule(
        "start_local",
        f"{start_local:%Y-%m-%dT%H:%M:%S} in {zone.key} is in the past "
        f"(now is {now.astimezone(zone):%Y-%m-%dT%H:%M:%S} there)",
    )
