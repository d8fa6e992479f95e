"""Property tests of the recurrence engine over random rules, zones, starts and policies.

Invariants (docs/design.md, "Occurrences"; recurrence.py rules 1-2):
- occurrences are strictly increasing in UTC (so no instant fires twice);
- a non-shifted occurrence shows its `local` on the zone's clocks, at the rule's time of
  day, and `shifted` is set exactly when that local time does not exist (checked by an
  independent round trip through zoneinfo, not by the engine's own helpers);
- a shifted one fires at the reading with the offset before the gap (RFC 5545 §3.3.5;
  PEP 495 fold=0), a time that occurs twice at the `first`/`last`/`both` readings;
- `skip` never fires a nonexistent local time, and lists it as skipped in previews;
- COUNT bounds the number of recurrence instances;
- a re-anchored `next_occurrence` equals the brute-force answer from a full expansion.

Differential oracle: in UTC there is no DST, and for rules without BYSETPOS plain
python-dateutil is a correct RFC 5545 expander (its issue #1398 only concerns WEEKLY rules
with BYSETPOS in the first week), so the engine's local sequence must equal
`dateutil.rrule.rrulestr(text, dtstart=start)` there.
"""

from __future__ import annotations

import bisect
from datetime import UTC, datetime, timedelta
from functools import lru_cache
from itertools import islice, pairwise, takewhile
from zoneinfo import ZoneInfo

from dateutil.rrule import rrulestr
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st

from reminder_core.domain.recurrence import (
    ExpansionLimitExceeded,
    Limits,
    Occurrence,
    Schedule,
    compile_schedule,
    iter_occurrences,
    next_occurrence,
)
from reminder_core.errors import InvalidSchedule

ZONES = (
    "America/New_York",
    "Europe/London",
    "Australia/Lord_Howe",
    "Pacific/Apia",
    "UTC",
    "Asia/Kolkata",
    "America/St_Johns",
)
WEEKDAYS = ("MO", "TU", "WE", "TH", "FR", "SA", "SU")
N = 40  # occurrences looked at for a rule without COUNT
# A rule that needs more candidates than this is rejected (`assume`), which keeps the run
# short; the time bound is lifted so that a slow machine cannot change an outcome.
LIMITS = Limits(max_iterations=20_000)

PROFILE = settings(
    derandomize=True,
    database=None,
    deadline=None,
    max_examples=100,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much],
)


def _nonzero(low: int, high: int) -> st.SearchStrategy[int]:
    return st.sampled_from([n for n in range(low, high + 1) if n])


def _sometimes(draw: st.DrawFn) -> bool:
    """One BYxxx part in three is present: more at once mostly match nothing."""
    return draw(st.integers(0, 2)) == 0


@lru_cache(maxsize=512)
def _transitions(zone_name: str, year: int) -> tuple[tuple[datetime, timedelta], ...]:
    """(local wall time where the change starts, offset change) for each UTC offset change
    of `zone_name` in `year` (found by scanning; only used to aim starts at them)."""
    zone = ZoneInfo(zone_name)
    instant = datetime(year, 1, 1, tzinfo=UTC)
    before = instant.astimezone(zone).utcoffset()
    found = []
    while instant.year == year:
        instant += timedelta(minutes=30)
        after = instant.astimezone(zone).utcoffset()
        if after != before:
            assert before is not None
            assert after is not None
            found.append(((instant + before).replace(tzinfo=None), after - before))
        before = after
    return tuple(found)


@st.composite
def aimed_starts(draw: st.DrawFn, zone_name: str) -> tuple[datetime, datetime] | None:
    """(start, target): `target` is a wall time inside one of the zone's gaps or overlaps
    (Apia's 2011 jump included), `start` the same time of day up to 12 days before."""
    year = draw(st.one_of(st.integers(2000, 2040), st.just(2011)))
    changes = _transitions(zone_name, year)
    if not changes:
        return None
    wall, jump = draw(st.sampled_from(changes))
    width = abs(jump)
    band = wall if jump > timedelta(0) else wall - width  # the gap, or the overlap
    minutes = int(width / timedelta(minutes=1))
    target = band + timedelta(minutes=draw(st.integers(0, minutes - 1)))
    return target - timedelta(days=draw(st.integers(0, 12))), target


@st.composite
def random_starts(draw: st.DrawFn) -> datetime:
    """A start in 2000-2040, the small hours drawn more often."""
    day = draw(st.dates(datetime(2000, 1, 1).date(), datetime(2040, 12, 31).date()))
    hour = draw(st.one_of(st.sampled_from([0, 1, 2, 3]), st.integers(0, 23)))
    minute = draw(st.sampled_from([0, 15, 30, 45, 59]))
    return datetime(day.year, day.month, day.day, hour, minute)


@st.composite
def aimed_rule_texts(draw: st.DrawFn, start: datetime, target: datetime) -> str:
    """A rule that has an occurrence at `target` (same time of day as `start`)."""
    weekday = WEEKDAYS[target.weekday()]
    nth = (target.day - 1) // 7 + 1
    shape = draw(st.sampled_from(["daily", "weekly", "monthly", "yearly"]))
    parts = {
        "daily": ["FREQ=DAILY"],
        "weekly": ["FREQ=WEEKLY", f"BYDAY={weekday}"],
        "monthly": [
            "FREQ=MONTHLY",
            draw(st.sampled_from([f"BYDAY={nth}{weekday}", f"BYMONTHDAY={target.day}"])),
        ],
        "yearly": ["FREQ=YEARLY", f"BYMONTH={target.month}", f"BYDAY={nth}{weekday}"],
    }[shape]
    if draw(st.booleans()):
        others = draw(st.lists(st.integers(0, 23), max_size=2, unique=True))
        parts.append("BYHOUR=" + ",".join(map(str, sorted({start.hour, *others}))))
    if draw(st.booleans()):
        parts.append(f"COUNT={draw(st.integers(14, 30))}")
    return ";".join(parts)


@st.composite
def rule_texts(draw: st.DrawFn, start: datetime, *, allow_bysetpos: bool = True) -> str:
    """RRULE text: FREQ DAILY/WEEKLY/MONTHLY/YEARLY, INTERVAL 1-4, optional BYMONTH,
    BYDAY (with ordinals for MONTHLY/YEARLY), BYMONTHDAY, BYHOUR, BYSETPOS, COUNT, WKST,
    in random order (RFC 5545 §3.3.10: "Compliant applications MUST accept rule parts
    ordered in any sequence")."""
    freq = draw(st.sampled_from(["DAILY", "WEEKLY", "MONTHLY", "YEARLY"]))
    parts = []
    interval = draw(st.integers(1, 4))
    if interval != 1 or draw(st.booleans()):
        parts.append(f"INTERVAL={interval}")
    months = None
    if _sometimes(draw):
        months = draw(st.lists(st.integers(1, 12), min_size=1, max_size=4, unique=True))
        parts.append("BYMONTH=" + ",".join(map(str, months)))
    if _sometimes(draw):
        days = draw(st.lists(st.sampled_from(WEEKDAYS), min_size=1, max_size=4, unique=True))
        # An ordinal counts within the month for MONTHLY, and for YEARLY with BYMONTH
        # (RFC 5545 §3.3.10), within the year otherwise. Past +-5 within a month see
        # test_rrule_validation.py::test_yearly_bymonth_large_ordinal_is_refused_not_crash.
        # Ordinals on all entries or on none: python-dateutil intersects plain and
        # ordinal BYDAY entries instead of joining them, see
        # test_recurrence_rfc.py::test_byday_mixing_ordinal_and_plain_weekdays_is_a_union.
        within_month = freq == "MONTHLY" or months is not None
        ordinals = _nonzero(-5, 5) if within_month else _nonzero(-53, 53)
        with_ordinals = freq in ("MONTHLY", "YEARLY") and draw(st.booleans())
        items = [f"{draw(ordinals)}{day}" if with_ordinals else day for day in days]
        parts.append("BYDAY=" + ",".join(items))
    if freq != "WEEKLY" and _sometimes(draw):
        monthdays = draw(st.lists(_nonzero(-31, 31), min_size=1, max_size=3, unique=True))
        parts.append("BYMONTHDAY=" + ",".join(map(str, monthdays)))
    if _sometimes(draw):
        hours = draw(st.lists(st.integers(0, 23), min_size=0, max_size=2, unique=True))
        if draw(st.booleans()) or not hours:
            hours.append(start.hour)  # keep the start's (DST-aimed) hour in play
        parts.append("BYHOUR=" + ",".join(map(str, sorted(set(hours)))))
    # BYSETPOS picks from the set of one period; within a day (FREQ=DAILY) that set is
    # the BYHOUR list, so it is drawn only for the longer periods, with BYDAY/BYMONTHDAY.
    by_days = any(p.startswith(("BYDAY=", "BYMONTHDAY=")) for p in parts)
    if allow_bysetpos and freq != "DAILY" and by_days and _sometimes(draw):
        positions = draw(st.lists(_nonzero(-3, 3), min_size=1, max_size=2, unique=True))
        parts.append("BYSETPOS=" + ",".join(map(str, positions)))
    if draw(st.booleans()):
        parts.append(f"COUNT={draw(st.integers(1, 30))}")
    if _sometimes(draw):
        parts.append(f"WKST={draw(st.sampled_from(WEEKDAYS))}")
    return ";".join([f"FREQ={freq}", *draw(st.permutations(parts))])


@st.composite
def cases(
    draw: st.DrawFn, *, zones: tuple[str, ...] = ZONES, allow_bysetpos: bool = True
) -> tuple[str, ZoneInfo, datetime, str, str]:
    """(rrule text, zone, start, nonexistent policy, ambiguous policy): half the time a
    random rule from a random start, half the time a rule aimed at a DST gap or overlap."""
    zone_name = draw(st.sampled_from(zones))
    aimed = draw(aimed_starts(zone_name)) if draw(st.booleans()) else None
    if aimed is not None:
        start, target = aimed
        text = draw(aimed_rule_texts(start, target))
    else:
        start = draw(random_starts())
        text = draw(rule_texts(start, allow_bysetpos=allow_bysetpos))
    nonexistent = draw(st.sampled_from(["shift", "skip"]))
    ambiguous = draw(st.sampled_from(["first", "last", "both"]))
    return text, ZoneInfo(zone_name), start, nonexistent, ambiguous


def compile_or_reject(start: datetime, text: str, nonexistent: str, ambiguous: str) -> Schedule:
    try:
        return compile_schedule(
            start,
            rrule=text,
            nonexistent=nonexistent,  # type: ignore[arg-type]
            ambiguous=ambiguous,  # type: ignore[arg-type]
            limits=LIMITS,
        )
    except InvalidSchedule:
        assume(False)  # a rule RFC 5545 forbids (e.g. BYMONTH=2;BYMONTHDAY=30)
        raise  # pragma: no cover


def expand(schedule: Schedule, zone: ZoneInfo, include_skipped: bool = False) -> list[Occurrence]:
    """Up to COUNT (all of them) or N occurrences from the start; rejects rules too sparse
    to expand within the iteration bound."""
    assert schedule.rule is not None
    want = N if schedule.rule.count is None else schedule.rule.count * 2 + 1
    try:
        items = iter_occurrences(schedule, zone, include_skipped=include_skipped, limits=LIMITS)
        return list(islice(items, want))
    except ExpansionLimitExceeded:
        assume(False)
        raise  # pragma: no cover


def exists(local: datetime, zone: ZoneInfo) -> bool:
    """The wall clock of `zone` shows `local` at some instant (round trip via UTC)."""
    for fold in (0, 1):
        instant = local.replace(tzinfo=zone, fold=fold).astimezone(UTC)
        if instant.astimezone(zone).replace(tzinfo=None) == local:
            return True
    return False


def _monthdays(local: datetime) -> set[int]:
    """The BYMONTHDAY values (positive and negative) that select `local`'s day."""
    next_month = (local.replace(day=28) + timedelta(days=4)).replace(day=1)
    length = (next_month - timedelta(days=1)).day
    return {local.day, local.day - length - 1}


def _parts(text: str) -> dict[str, str]:
    return dict(p.split("=", 1) for p in text.split(";"))


@PROFILE
@given(case=cases())
def test_invariants(case: tuple[str, ZoneInfo, datetime, str, str]) -> None:
    text, zone, start, nonexistent, ambiguous = case
    schedule = compile_or_reject(start, text, nonexistent, ambiguous)
    occurrences = expand(schedule, zone)
    parts = _parts(text)

    instants = [o.utc for o in occurrences]
    assert all(a < b for a, b in pairwise(instants))  # type: ignore[operator]

    byhour = {int(h) for h in parts["BYHOUR"].split(",")} if "BYHOUR" in parts else {start.hour}
    bymonth = {int(m) for m in parts["BYMONTH"].split(",")} if "BYMONTH" in parts else None
    byday = {d[-2:] for d in parts["BYDAY"].split(",")} if "BYDAY" in parts else None
    bymonthday = {int(d) for d in parts["BYMONTHDAY"].split(",")} if "BYMONTHDAY" in parts else None
    for occ in occurrences:
        assert occ.utc is not None
        assert not occ.skipped
        local = occ.local
        assert local >= start
        # The rule's time of day: BYHOUR or DTSTART's hour, DTSTART's minute and second.
        assert local.hour in byhour
        assert (local.minute, local.second) == (start.minute, start.second)
        if bymonth is not None:
            assert local.month in bymonth
        if byday is not None:
            assert WEEKDAYS[local.weekday()] in byday
        if bymonthday is not None:
            assert _monthdays(local) & bymonthday
        real = exists(local, zone)
        assert occ.shifted == (not real)
        if nonexistent == "skip":
            assert real
        shown = occ.utc.astimezone(zone).replace(tzinfo=None)
        # PEP 495: fold=0 reads a wall time with the offset before a transition, fold=1
        # with the offset after.
        before, after = (local.replace(tzinfo=zone, fold=fold).astimezone(UTC) for fold in (0, 1))
        if real:
            assert shown == local
            if before != after:  # occurs twice (fall-back overlap)
                wanted = {"first": [before], "last": [after], "both": [before, after]}
                for instant in wanted[ambiguous]:
                    if instant <= instants[-1]:  # type: ignore[operator]
                        assert instant in instants
                assert occ.utc in wanted[ambiguous]
        else:
            # Read with the offset before the gap (RFC 5545 §3.3.5), it shows a later wall
            # time, by the size of the gap (at most a day: Pacific/Apia, 2011-12-30).
            assert occ.utc == before
            assert local < shown <= local + timedelta(days=1)

    if "COUNT" in parts:
        count = int(parts["COUNT"])
        assert len({o.local for o in occurrences}) <= count
        if ambiguous != "both":
            assert len(occurrences) <= count

    if nonexistent == "skip":
        with_skipped = expand(schedule, zone, include_skipped=True)
        skipped = [o for o in with_skipped if o.skipped]
        assert all(o.utc is None and not exists(o.local, zone) for o in skipped)
        fired = [o for o in with_skipped if not o.skipped]
        assert fired[: len(occurrences)] == occurrences[: len(fired)]


@PROFILE
@given(case=cases(), fractions=st.lists(st.floats(0, 1), min_size=1, max_size=6))
def test_reanchored_next_occurrence_equals_brute_force(
    case: tuple[str, ZoneInfo, datetime, str, str], fractions: list[float]
) -> None:
    text, zone, start, nonexistent, ambiguous = case
    schedule = compile_or_reject(start, text, nonexistent, ambiguous)
    instants = [o.utc for o in expand(schedule, zone) if o.utc is not None]
    assume(instants)
    assert schedule.rule is not None
    complete = schedule.rule.count is not None  # then `instants` holds every occurrence
    low = instants[0] - timedelta(days=3)
    high = instants[-1] + (timedelta(days=3) if complete else timedelta(0))
    afters = [(low + (high - low) * f).replace(microsecond=0) for f in fractions]
    # Right at an occurrence and just before it.
    for instant in instants[:: max(1, len(instants) // 4)]:
        afters += [instant, instant - timedelta(seconds=1)]
    for after in afters:
        if not complete and after >= instants[-1]:
            continue  # the brute-force list is only a prefix
        index = bisect.bisect_right(instants, after)
        expected = instants[index] if index < len(instants) else None
        assert next_occurrence(schedule, zone, after, limits=LIMITS) == expected, after
        index = bisect.bisect_left(instants, after)
        expected = instants[index] if index < len(instants) else None
        got = next_occurrence(schedule, zone, after, inclusive=True, limits=LIMITS)
        assert got == expected, after


def rfc_explicit(text: str, start: datetime) -> str:
    """`text` with the parts RFC 5545 §3.3.10 derives from DTSTART written out where
    python-dateutil reads their absence otherwise (issue 14): FREQ=YEARLY with BYWEEKNO
    and no day part takes DTSTART's weekday; FREQ=YEARLY with BYMONTHDAY and no BYMONTH
    (nor BYWEEKNO, BYYEARDAY) takes DTSTART's month."""
    parts = dict(p.split("=", 1) for p in text.split(";"))
    if parts["FREQ"] != "YEARLY" or "BYYEARDAY" in parts:
        return text
    if "BYWEEKNO" in parts and "BYDAY" not in parts and "BYMONTHDAY" not in parts:
        return f"{text};BYDAY={('MO', 'TU', 'WE', 'TH', 'FR', 'SA', 'SU')[start.weekday()]}"
    if "BYWEEKNO" not in parts and "BYMONTHDAY" in parts and "BYMONTH" not in parts:
        return f"{text};BYMONTH={start.month}"
    return text


@PROFILE
@given(case=cases(zones=("UTC",), allow_bysetpos=False))
def test_utc_without_bysetpos_matches_plain_dateutil(
    case: tuple[str, ZoneInfo, datetime, str, str],
) -> None:
    text, zone, start, _, _ = case
    schedule = compile_or_reject(start, text, "shift", "first")
    ours = [o.local for o in expand(schedule, zone)]
    assume(ours)
    # dateutil generates in order; stopping at our last local keeps it from searching to
    # year 9999 for a rule with few matches.
    theirs = list(
        takewhile(lambda d: d <= ours[-1], rrulestr(rfc_explicit(text, start), dtstart=start))
    )
    assert ours == theirs


def test_dateutil_issue_1398_weekly_bysetpos_first_week() -> None:
    # dateutil/dateutil#1398: DTSTART:20241110 (a Sunday),
    # RRULE:FREQ=WEEKLY;WKST=WE;BYSETPOS=1;BYDAY=MO,TU,WE;COUNT=3.
    # RFC 5545 §3.3.10: "BYSETPOS operates on a set of recurrence instances in one interval
    # of the recurrence rule ... in a WEEKLY rule, the interval would be one week A set of
    # recurrence instances starts at the beginning of the interval defined by the FREQ
    # rule part." With WKST=WE the week of Sun 10 Nov 2024 is Wed 6 - Tue 12 Nov; its set
    # {Wed 6, Mon 11, Tue 12} has Wed 6 first, which is before DTSTART; the next weeks
    # give Wed 13, Wed 20 and Wed 27 Nov 2024 (as analysed in the issue thread).
    start = datetime(2024, 11, 10)
    assert start.strftime("%a") == "Sun"
    text = "FREQ=WEEKLY;WKST=WE;BYSETPOS=1;BYDAY=MO,TU,WE;COUNT=3"
    rfc = [datetime(2024, 11, 13), datetime(2024, 11, 20), datetime(2024, 11, 27)]
    assert [d.strftime("%a") for d in rfc] == ["Wed", "Wed", "Wed"]

    raw = list(rrulestr(text, dtstart=start))
    assert raw[0] == datetime(2024, 11, 11)  # Mon 11 Nov: dateutil's first week is wrong
    assert raw != rfc

    schedule = compile_schedule(start, rrule=text)
    for zone in ("UTC", "America/New_York", "Pacific/Apia"):
        assert [o.local for o in iter_occurrences(schedule, ZoneInfo(zone))] == rfc
