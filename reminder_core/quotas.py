"""Per-user quotas on reminders (docs/operations.md, "Fair limits"): live reminders per
user, occurrences per local day per reminder. Called by `reminder_core.services.reminders`
inside the transaction that writes the reminder."""

from __future__ import annotations

import itertools
from dataclasses import dataclass
from datetime import date, datetime, timedelta
from zoneinfo import ZoneInfo

from sqlalchemy import Connection

from reminder_core.domain.recurrence import (
    ExpansionLimitExceeded,
    Limits,
    Schedule,
    iter_occurrences,
)
from reminder_core.errors import QuotaExceeded
from reminder_core.settings import Settings
from reminder_core.store import live_reminder_bounds
from reminder_core.store import reminders as store

#: How far ahead the busiest local day of a rule is looked for (a year: every weekly,
#: monthly and yearly pattern shows its busiest day in it).
DAY_QUOTA_HORIZON = timedelta(days=366)
#: The longest local day (a DST fall-back day: 25 hours), seconds.
LONGEST_DAY_S = 25 * 3600


@dataclass(frozen=True, slots=True)
class Quotas:
    """The quotas of every user; 0 is no quota.

    Attributes:
        live_reminders: pending, claimed or paused reminders one user may have
            (QUOTA_LIVE_REMINDERS).
        occurrences_per_day: occurrences one reminder may fire in one local calendar day
            (QUOTA_OCCURRENCES_PER_DAY).
    """

    live_reminders: int
    occurrences_per_day: int

    @classmethod
    def from_settings(cls, settings: Settings) -> Quotas:
        return cls(
            live_reminders=settings.quota_live_reminders,
            occurrences_per_day=settings.quota_occurrences_per_day,
        )


def check_one_more_live(conn: Connection, *, user_id: str, quotas: Quotas) -> None:
    """Refuse a change that makes one more of `user_id`'s reminders live when they have
    `quotas.live_reminders` already; the caller must write the reminder in this same
    transaction.

    The check reads no reminders while the user is clearly under the quota: it raises the
    user's `live_reminder_bounds` row, an upper bound of their live reminders (every
    change that makes one live raises it in the transaction that writes it; one that
    stops being live does not lower it), and counts exactly only when the bound passes the
    quota, then stores the exact count. Race-free across requests and processes: the
    bound's row lock, held until the caller's transaction ends, serialises one user's
    checks, so the exact count sees every committed change and none is in flight. The
    bound is kept with the quota off too (0), so turning it on finds it true.

    A create's common case (a bound below the quota) does this check and its INSERT in
    one statement instead (`reminder_core.store.reminders.insert_within_bound`).

    Side effects: raises (or starts) the user's bound, row-locked until the caller's
    transaction ends; at the bound, one count of the user's live reminders.

    Raises:
        QuotaExceeded: ("QUOTA_LIVE_REMINDERS") the user is at the quota; the caller must
            store nothing (roll back: the bound's raise is undone with it).
    """
    bound = live_reminder_bounds.increment(conn, user_id=user_id)
    if bound is None:
        bound = live_reminder_bounds.start(conn, user_id=user_id)
    cap = quotas.live_reminders
    if cap <= 0 or bound <= cap:
        return
    live = store.count_live(conn, user_id=user_id)  # with any this transaction made live
    if live >= cap:
        raise QuotaExceeded(
            "QUOTA_LIVE_REMINDERS",
            cap,
            f"this would make {live + 1} live reminders for this user; cancel some before"
            " creating more",
        )
    live_reminder_bounds.reset(conn, user_id=user_id, bound=live + 1)


def check_occurrences_per_day(
    schedule: Schedule, zone: ZoneInfo, first_run: datetime, *, quotas: Quotas, limits: Limits
) -> None:
    """Refuse a schedule that fires more than `quotas.occurrences_per_day` times in one
    local calendar day (its occurrences' wall-clock dates in `zone`), looked for over
    `DAY_QUOTA_HORIZON` from `first_run` (aware UTC). Pure; skipped when the minimum
    spacing of `limits` already keeps every day under the quota.

    Raises:
        QuotaExceeded: ("QUOTA_OCCURRENCES_PER_DAY") naming the busiest day found.
    """
    cap = quotas.occurrences_per_day
    if cap <= 0 or (limits.min_spacing_s > 0 and LONGEST_DAY_S // limits.min_spacing_s < cap):
        return
    busiest = busiest_day(schedule, zone, first_run, limits=limits, over=cap)
    if busiest is not None:
        day, count = busiest
        raise QuotaExceeded(
            "QUOTA_OCCURRENCES_PER_DAY",
            cap,
            f"the schedule fires {count} or more times on {day.isoformat()} ({zone.key})",
        )


def busiest_day(
    schedule: Schedule, zone: ZoneInfo, first_run: datetime, *, limits: Limits, over: int
) -> tuple[date, int] | None:
    """The first local date within `DAY_QUOTA_HORIZON` of `first_run` (aware UTC) on which
    `schedule` fires more than `over` times in `zone`, with that count (`over` + 1), or
    None. An expansion too long for `limits` stops the search (no refusal)."""
    until = first_run + DAY_QUOTA_HORIZON
    fired = (
        occ
        for occ in iter_occurrences(schedule, zone, after=first_run, limits=limits)
        if occ.utc is not None
    )
    try:
        for day, same_day in itertools.groupby(
            itertools.takewhile(lambda occ: occ.utc is not None and occ.utc <= until, fired),
            key=lambda occ: occ.local.date(),
        ):
            count = sum(1 for _ in itertools.islice(same_day, over + 1))
            if count > over:
                return day, count
    except ExpansionLimitExceeded:
        return None
    return None
