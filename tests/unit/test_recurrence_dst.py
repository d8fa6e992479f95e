"""Recurrences across DST transitions, under every DST policy.

Expected instants are worked out by hand from each zone's rules (IANA tz database; the
transition and offsets are stated above each scenario) and from the policies of
docs/design.md, "DST policies", with their sources:
- RFC 5545 §3.3.5: a local time in a spring-forward gap is read with the offset in force
  before the gap ("TZID=America/New_York:20070311T023000 indicates March 11, 2007 at
  3:30 A.M. EDT (UTC-04:00), one hour after 1:30 A.M. EST (UTC-05:00)"); a time that
  occurs twice means the first ("...20071104T013000 indicates November 4, 2007 at 1:30
  A.M. EDT"). That is `nonexistent="shift"` and `ambiguous="first"`.
- RFC 5545 §3.3.10: "Recurrence rules may generate recurrence instances with an invalid
  date (e.g., February 30) or nonexistent local time ... Such recurrence instances MUST be
  ignored and MUST NOT be counted as part of the recurrence set." That is `skip`.
- `last` and `both` are our own extensions (docs/design.md, "DST policies"): the second
  reading, or both.
- recurrence.py rule 2: two readings that land on one instant fire once.

UTC = local - offset: e.g. 02:30 EST (UTC-05:00) = 07:30Z.
"""

from __future__ import annotations

import bisect
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from itertools import islice, product
from zoneinfo import ZoneInfo

import pytest

from reminder_core.domain.recurrence import (
    Occurrence,
    compile_schedule,
    iter_occurrences,
    next_occurrence,
    preview,
)

NY = ZoneInfo("America/New_York")
LONDON = ZoneInfo("Europe/London")
LORD_HOWE = ZoneInfo("Australia/Lord_Howe")
APIA = ZoneInfo("Pacific/Apia")

NONEXISTENT = ("shift", "skip")
AMBIGUOUS = ("first", "last", "both")
POLICIES = list(product(NONEXISTENT, AMBIGUOUS))
POLICY_IDS = [f"{n}-{a}" for n, a in POLICIES]


def z(y: int, mo: int, d: int, h: int = 0, mi: int = 0) -> datetime:
    """An aware UTC instant."""
    return datetime(y, mo, d, h, mi, tzinfo=UTC)


def loc(y: int, mo: int, d: int, h: int = 0, mi: int = 0) -> datetime:
    """A naive local wall-clock reading."""
    return datetime(y, mo, d, h, mi)


@dataclass(frozen=True)
class Local:
    """One local occurrence of the rule and its readings, worked out by hand.

    normal: one instant. gap: `shift_to` is the reading with the offset before the gap.
    overlap: `first` (offset before the transition) and `last` (offset after).
    """

    local: datetime
    normal: datetime | None = None
    shift_to: datetime | None = None
    first: datetime | None = None
    last: datetime | None = None

    @property
    def in_gap(self) -> bool:
        return self.shift_to is not None


def normal(local: datetime, utc: datetime) -> Local:
    return Local(local, normal=utc)


def gap(local: datetime, shift_to: datetime) -> Local:
    return Local(local, shift_to=shift_to)


def overlap(local: datetime, first: datetime, last: datetime) -> Local:
    return Local(local, first=first, last=last)


def expected_fires(
    locals_: list[Local], nonexistent: str, ambiguous: str
) -> list[tuple[datetime, set[tuple[datetime, bool]]]]:
    """The instants that fire, ascending, each once, with the (local, shifted) pairs that
    may stand for it (two readings on one instant fire once: either may be reported)."""
    fires: dict[datetime, set[tuple[datetime, bool]]] = {}
    for item in locals_:
        readings: list[tuple[datetime, bool]] = []
        if item.normal is not None:
            readings = [(item.normal, False)]
        elif item.shift_to is not None:
            readings = [(item.shift_to, True)] if nonexistent == "shift" else []
        else:
            assert item.first is not None
            assert item.last is not None
            readings = {
                "first": [(item.first, False)],
                "last": [(item.last, False)],
                "both": [(item.first, False), (item.last, False)],
            }[ambiguous]
        for instant, shifted in readings:
            fires.setdefault(instant, set()).add((item.local, shifted))
    return sorted(fires.items())


@dataclass(frozen=True)
class Scenario:
    name: str
    zone: ZoneInfo
    start: datetime
    rrule: str
    locals_: list[Local]  # every local occurrence from `start` up to the window's end

    @property
    def horizon(self) -> datetime:
        """The last instant any reading of the listed locals can have."""
        return max(
            t
            for item in self.locals_
            for t in (item.normal, item.shift_to, item.first, item.last)
            if t is not None
        )


SCENARIOS = [
    # America/New_York 2026-03-08: 02:00 EST (UTC-05:00) -> 03:00 EDT (UTC-04:00).
    Scenario(
        "new_york_daily_0230_spring",
        NY,
        loc(2026, 3, 7, 2, 30),
        "FREQ=DAILY",
        [
            normal(loc(2026, 3, 7, 2, 30), z(2026, 3, 7, 7, 30)),  # EST
            gap(loc(2026, 3, 8, 2, 30), z(2026, 3, 8, 7, 30)),  # read at EST = 03:30 EDT
            normal(loc(2026, 3, 9, 2, 30), z(2026, 3, 9, 6, 30)),  # EDT
        ],
    ),
    Scenario(
        "new_york_hourly_spring",
        NY,
        loc(2026, 3, 8, 0, 0),
        "FREQ=HOURLY",
        [
            normal(loc(2026, 3, 8, 0), z(2026, 3, 8, 5)),  # EST
            normal(loc(2026, 3, 8, 1), z(2026, 3, 8, 6)),  # EST
            gap(loc(2026, 3, 8, 2), z(2026, 3, 8, 7)),  # read at EST = 03:00 EDT
            normal(loc(2026, 3, 8, 3), z(2026, 3, 8, 7)),  # EDT: the same instant
            normal(loc(2026, 3, 8, 4), z(2026, 3, 8, 8)),  # EDT
        ],
    ),
    # America/New_York 2026-11-01: 02:00 EDT (UTC-04:00) -> 01:00 EST (UTC-05:00).
    Scenario(
        "new_york_daily_0130_fall",
        NY,
        loc(2026, 10, 31, 1, 30),
        "FREQ=DAILY",
        [
            normal(loc(2026, 10, 31, 1, 30), z(2026, 10, 31, 5, 30)),  # EDT
            overlap(loc(2026, 11, 1, 1, 30), z(2026, 11, 1, 5, 30), z(2026, 11, 1, 6, 30)),
            normal(loc(2026, 11, 2, 1, 30), z(2026, 11, 2, 6, 30)),  # EST
        ],
    ),
    Scenario(
        "new_york_hourly_fall",
        NY,
        loc(2026, 11, 1, 0, 0),
        "FREQ=HOURLY",
        [
            normal(loc(2026, 11, 1, 0), z(2026, 11, 1, 4)),  # EDT
            overlap(loc(2026, 11, 1, 1), z(2026, 11, 1, 5), z(2026, 11, 1, 6)),
            normal(loc(2026, 11, 1, 2), z(2026, 11, 1, 7)),  # EST
            normal(loc(2026, 11, 1, 3), z(2026, 11, 1, 8)),  # EST
        ],
    ),
    # Europe/London 2026-03-29: 01:00 GMT (UTC+00:00) -> 02:00 BST (UTC+01:00).
    Scenario(
        "london_daily_0130_spring",
        LONDON,
        loc(2026, 3, 28, 1, 30),
        "FREQ=DAILY",
        [
            normal(loc(2026, 3, 28, 1, 30), z(2026, 3, 28, 1, 30)),  # GMT
            gap(loc(2026, 3, 29, 1, 30), z(2026, 3, 29, 1, 30)),  # read at GMT = 02:30 BST
            normal(loc(2026, 3, 30, 1, 30), z(2026, 3, 30, 0, 30)),  # BST
        ],
    ),
    Scenario(
        "london_hourly_half_past_spring",
        LONDON,
        loc(2026, 3, 29, 0, 30),
        "FREQ=HOURLY",
        [
            normal(loc(2026, 3, 29, 0, 30), z(2026, 3, 29, 0, 30)),  # GMT
            gap(loc(2026, 3, 29, 1, 30), z(2026, 3, 29, 1, 30)),  # read at GMT
            normal(loc(2026, 3, 29, 2, 30), z(2026, 3, 29, 1, 30)),  # BST: same instant
            normal(loc(2026, 3, 29, 3, 30), z(2026, 3, 29, 2, 30)),  # BST
        ],
    ),
    # Europe/London 2026-10-25: 02:00 BST (UTC+01:00) -> 01:00 GMT (UTC+00:00).
    Scenario(
        "london_daily_0130_fall",
        LONDON,
        loc(2026, 10, 24, 1, 30),
        "FREQ=DAILY",
        [
            normal(loc(2026, 10, 24, 1, 30), z(2026, 10, 24, 0, 30)),  # BST
            overlap(loc(2026, 10, 25, 1, 30), z(2026, 10, 25, 0, 30), z(2026, 10, 25, 1, 30)),
            normal(loc(2026, 10, 26, 1, 30), z(2026, 10, 26, 1, 30)),  # GMT
        ],
    ),
    Scenario(
        "london_hourly_half_past_fall",
        LONDON,
        loc(2026, 10, 25, 0, 30),
        "FREQ=HOURLY",
        [
            normal(loc(2026, 10, 25, 0, 30), z(2026, 10, 24, 23, 30)),  # BST
            overlap(loc(2026, 10, 25, 1, 30), z(2026, 10, 25, 0, 30), z(2026, 10, 25, 1, 30)),
            normal(loc(2026, 10, 25, 2, 30), z(2026, 10, 25, 2, 30)),  # GMT
            normal(loc(2026, 10, 25, 3, 30), z(2026, 10, 25, 3, 30)),  # GMT
        ],
    ),
    # Australia/Lord_Howe 2026-10-04: 02:00 +10:30 -> 02:30 +11:00 (a 30-minute gap).
    Scenario(
        "lord_howe_daily_0215_spring",
        LORD_HOWE,
        loc(2026, 10, 3, 2, 15),
        "FREQ=DAILY",
        [
            normal(loc(2026, 10, 3, 2, 15), z(2026, 10, 2, 15, 45)),  # +10:30
            gap(loc(2026, 10, 4, 2, 15), z(2026, 10, 3, 15, 45)),  # read at +10:30 = 02:45
            normal(loc(2026, 10, 5, 2, 15), z(2026, 10, 4, 15, 15)),  # +11:00
        ],
    ),
    Scenario(
        "lord_howe_hourly_quarter_past_spring",
        LORD_HOWE,
        loc(2026, 10, 4, 0, 15),
        "FREQ=HOURLY",
        [
            normal(loc(2026, 10, 4, 0, 15), z(2026, 10, 3, 13, 45)),  # +10:30
            normal(loc(2026, 10, 4, 1, 15), z(2026, 10, 3, 14, 45)),  # +10:30
            gap(loc(2026, 10, 4, 2, 15), z(2026, 10, 3, 15, 45)),  # read at +10:30
            normal(loc(2026, 10, 4, 3, 15), z(2026, 10, 3, 16, 15)),  # +11:00
            normal(loc(2026, 10, 4, 4, 15), z(2026, 10, 3, 17, 15)),  # +11:00
        ],
    ),
    Scenario(
        "lord_howe_hourly_on_the_hour_spring",
        LORD_HOWE,
        loc(2026, 10, 4, 1, 0),
        "FREQ=HOURLY",
        [
            normal(loc(2026, 10, 4, 1, 0), z(2026, 10, 3, 14, 30)),  # +10:30
            # 02:00 itself is the first missing minute; read at +10:30 it is 15:30Z, the
            # transition instant, which the clocks show as 02:30 +11:00.
            gap(loc(2026, 10, 4, 2, 0), z(2026, 10, 3, 15, 30)),
            normal(loc(2026, 10, 4, 3, 0), z(2026, 10, 3, 16, 0)),  # +11:00
        ],
    ),
    # Australia/Lord_Howe 2026-04-05: 02:00 +11:00 -> 01:30 +10:30 (a 30-minute overlap).
    Scenario(
        "lord_howe_daily_0145_fall",
        LORD_HOWE,
        loc(2026, 4, 4, 1, 45),
        "FREQ=DAILY",
        [
            normal(loc(2026, 4, 4, 1, 45), z(2026, 4, 3, 14, 45)),  # +11:00
            overlap(loc(2026, 4, 5, 1, 45), z(2026, 4, 4, 14, 45), z(2026, 4, 4, 15, 15)),
            normal(loc(2026, 4, 6, 1, 45), z(2026, 4, 5, 15, 15)),  # +10:30
        ],
    ),
    Scenario(
        "lord_howe_hourly_quarter_to_fall",
        LORD_HOWE,
        loc(2026, 4, 5, 0, 45),
        "FREQ=HOURLY",
        [
            normal(loc(2026, 4, 5, 0, 45), z(2026, 4, 4, 13, 45)),  # +11:00
            overlap(loc(2026, 4, 5, 1, 45), z(2026, 4, 4, 14, 45), z(2026, 4, 4, 15, 15)),
            normal(loc(2026, 4, 5, 2, 45), z(2026, 4, 4, 16, 15)),  # +10:30
            normal(loc(2026, 4, 5, 3, 45), z(2026, 4, 4, 17, 15)),  # +10:30
        ],
    ),
    # Pacific/Apia 2011-12-30 10:00Z: UTC-10:00 -> UTC+14:00; local 2011-12-29 24:00 is
    # followed by 2011-12-31 00:00, so the whole of 2011-12-30 does not exist.
    Scenario(
        "apia_daily_0900_skipped_day",
        APIA,
        loc(2011, 12, 28, 9, 0),
        "FREQ=DAILY",
        [
            normal(loc(2011, 12, 28, 9), z(2011, 12, 28, 19)),  # -10:00
            normal(loc(2011, 12, 29, 9), z(2011, 12, 29, 19)),  # -10:00
            gap(loc(2011, 12, 30, 9), z(2011, 12, 30, 19)),  # read at -10:00
            normal(loc(2011, 12, 31, 9), z(2011, 12, 30, 19)),  # +14:00: the same instant
            normal(loc(2012, 1, 1, 9), z(2011, 12, 31, 19)),  # +14:00
        ],
    ),
    Scenario(
        "apia_hourly_into_skipped_day",
        APIA,
        loc(2011, 12, 29, 22, 0),
        "FREQ=HOURLY",
        [
            normal(loc(2011, 12, 29, 22), z(2011, 12, 30, 8)),  # -10:00
            normal(loc(2011, 12, 29, 23), z(2011, 12, 30, 9)),  # -10:00
        ]
        # Every hour of 2011-12-30 is in the gap: read at -10:00, hh:00 is (hh+10):00Z on
        # the 30th; the real hh:00 on the 31st at +14:00 is the same instant.
        + [gap(loc(2011, 12, 30, h), z(2011, 12, 30, 10) + timedelta(hours=h)) for h in range(24)]
        + [
            normal(loc(2011, 12, 31, h), z(2011, 12, 30, 10) + timedelta(hours=h))
            for h in range(24)
        ]
        + [normal(loc(2012, 1, 1, 0), z(2011, 12, 31, 10))],  # +14:00
    ),
]


def expand_window(
    scenario: Scenario, nonexistent: str, ambiguous: str, include_skipped: bool = False
) -> list[Occurrence]:
    schedule = compile_schedule(
        scenario.start,
        rrule=scenario.rrule,
        nonexistent=nonexistent,  # type: ignore[arg-type]
        ambiguous=ambiguous,  # type: ignore[arg-type]
    )
    found: list[Occurrence] = []
    for occ in iter_occurrences(schedule, scenario.zone, include_skipped=include_skipped):
        if occ.local > scenario.locals_[-1].local or (occ.utc and occ.utc > scenario.horizon):
            break
        found.append(occ)
    return found


@pytest.mark.parametrize(("nonexistent", "ambiguous"), POLICIES, ids=POLICY_IDS)
@pytest.mark.parametrize("scenario", SCENARIOS, ids=[s.name for s in SCENARIOS])
def test_instants_across_transition(scenario: Scenario, nonexistent: str, ambiguous: str) -> None:
    got = expand_window(scenario, nonexistent, ambiguous)
    expected = expected_fires(scenario.locals_, nonexistent, ambiguous)
    assert [o.utc for o in got] == [instant for instant, _ in expected]
    for occ, (_, candidates) in zip(got, expected, strict=True):
        assert (occ.local, occ.shifted) in candidates
        assert not occ.skipped


@pytest.mark.parametrize(("nonexistent", "ambiguous"), POLICIES, ids=POLICY_IDS)
@pytest.mark.parametrize("scenario", SCENARIOS, ids=[s.name for s in SCENARIOS])
def test_shifted_flag_exactly_on_gap_times(
    scenario: Scenario, nonexistent: str, ambiguous: str
) -> None:
    gap_locals = {item.local for item in scenario.locals_ if item.in_gap}
    for occ in expand_window(scenario, nonexistent, ambiguous):
        assert occ.shifted == (occ.local in gap_locals)
        if nonexistent == "skip":
            assert not occ.shifted


@pytest.mark.parametrize("ambiguous", AMBIGUOUS)
@pytest.mark.parametrize("scenario", SCENARIOS, ids=[s.name for s in SCENARIOS])
def test_include_skipped_lists_each_skipped_gap_time_flagged(
    scenario: Scenario, ambiguous: str
) -> None:
    got = expand_window(scenario, "skip", ambiguous, include_skipped=True)
    skipped = [o for o in got if o.skipped]
    assert [o.local for o in skipped] == [i.local for i in scenario.locals_ if i.in_gap]
    for occ in skipped:
        assert occ.utc is None
        assert not occ.shifted
    # The fired ones are exactly those without include_skipped.
    fired = [o for o in got if not o.skipped]
    assert fired == expand_window(scenario, "skip", ambiguous)


def test_gap_rfc5545_3_3_5_worked_example_in_a_rule() -> None:
    # RFC 5545 §3.3.5: "TZID=America/New_York:20070311T023000 indicates March 11, 2007 at
    # 3:30 A.M. EDT (UTC-04:00)": a daily 02:30 reminder fires at 07:30Z that day.
    schedule = compile_schedule(loc(2007, 3, 10, 2, 30), rrule="FREQ=DAILY;COUNT=3")
    got = list(iter_occurrences(schedule, NY))
    assert [o.utc for o in got] == [
        z(2007, 3, 10, 7, 30),  # 02:30 EST
        z(2007, 3, 11, 7, 30),  # 03:30 EDT
        z(2007, 3, 12, 6, 30),  # 02:30 EDT
    ]
    assert [o.shifted for o in got] == [False, True, False]
    assert got[1].utc is not None
    assert got[1].utc.astimezone(NY).strftime("%H:%M %Z") == "03:30 EDT"


def test_overlap_rfc5545_3_3_5_worked_example_in_a_rule() -> None:
    # RFC 5545 §3.3.5: "TZID=America/New_York:20071104T013000 indicates November 4, 2007
    # at 1:30 A.M. EDT (UTC-04:00)": the default (first) reading.
    schedule = compile_schedule(loc(2007, 11, 3, 1, 30), rrule="FREQ=DAILY;COUNT=3")
    assert [o.utc for o in iter_occurrences(schedule, NY)] == [
        z(2007, 11, 3, 5, 30),  # 01:30 EDT
        z(2007, 11, 4, 5, 30),  # 01:30 EDT, the first of the two
        z(2007, 11, 5, 6, 30),  # 01:30 EST
    ]


# COUNT across a gap: RFC 5545 §3.3.10 "MUST NOT be counted" for a skipped instance; a
# shifted one (§3.3.5 reading) is a real instance and counts.
@pytest.mark.parametrize(
    ("nonexistent", "expected"),
    [
        ("shift", [z(2026, 3, 7, 7, 30), z(2026, 3, 8, 7, 30), z(2026, 3, 9, 6, 30)]),
        ("skip", [z(2026, 3, 7, 7, 30), z(2026, 3, 9, 6, 30), z(2026, 3, 10, 6, 30)]),
    ],
)
def test_count_across_gap(nonexistent: str, expected: list[datetime]) -> None:
    schedule = compile_schedule(
        loc(2026, 3, 7, 2, 30),
        rrule="FREQ=DAILY;COUNT=3",
        nonexistent=nonexistent,  # type: ignore[arg-type]
    )
    assert [o.utc for o in iter_occurrences(schedule, NY)] == expected


# COUNT across an overlap counts recurrence instances (RFC 5545 §3.3.10 COUNT), not
# readings: with `both`, the one 01:30 instance of 2026-11-01 fires at both readings.
@pytest.mark.parametrize(
    ("ambiguous", "expected"),
    [
        ("first", [z(2026, 10, 31, 5, 30), z(2026, 11, 1, 5, 30), z(2026, 11, 2, 6, 30)]),
        ("last", [z(2026, 10, 31, 5, 30), z(2026, 11, 1, 6, 30), z(2026, 11, 2, 6, 30)]),
        (
            "both",
            [
                z(2026, 10, 31, 5, 30),
                z(2026, 11, 1, 5, 30),
                z(2026, 11, 1, 6, 30),
                z(2026, 11, 2, 6, 30),
            ],
        ),
    ],
)
def test_count_across_overlap(ambiguous: str, expected: list[datetime]) -> None:
    schedule = compile_schedule(
        loc(2026, 10, 31, 1, 30),
        rrule="FREQ=DAILY;COUNT=3",
        ambiguous=ambiguous,  # type: ignore[arg-type]
    )
    assert [o.utc for o in iter_occurrences(schedule, NY)] == expected


@pytest.mark.parametrize(
    ("nonexistent", "expected"),
    [
        # Instances Dec 29, Dec 30 (shifted to 19:00Z on the 30th) and Dec 31 (also 19:00Z
        # on the 30th, at +14:00): three instances, two instants. RFC 5545 §3.8.5.2:
        # "Duplicate instances are ignored", so it fires twice.
        ("shift", [z(2011, 12, 29, 19), z(2011, 12, 30, 19)]),
        # Dec 30 is skipped and not counted (§3.3.10): Dec 29, Dec 31, Jan 1.
        ("skip", [z(2011, 12, 29, 19), z(2011, 12, 30, 19), z(2011, 12, 31, 19)]),
    ],
)
def test_count_across_apia_skipped_day(nonexistent: str, expected: list[datetime]) -> None:
    schedule = compile_schedule(
        loc(2011, 12, 29, 9, 0),
        rrule="FREQ=DAILY;COUNT=3",
        nonexistent=nonexistent,  # type: ignore[arg-type]
    )
    assert [o.utc for o in iter_occurrences(schedule, APIA)] == expected


@pytest.mark.parametrize("ambiguous", AMBIGUOUS)
def test_apia_two_readings_on_one_instant_fire_once(ambiguous: str) -> None:
    # 2011-12-30 09:00 read at -10:00 is 19:00Z, and so is 2011-12-31 09:00 at +14:00.
    schedule = compile_schedule(
        loc(2011, 12, 29, 9, 0),
        rrule="FREQ=DAILY",
        ambiguous=ambiguous,  # type: ignore[arg-type]
    )
    got = [o.utc for o in islice(iter_occurrences(schedule, APIA), 3)]
    assert got == [z(2011, 12, 29, 19), z(2011, 12, 30, 19), z(2011, 12, 31, 19)]
    after = z(2011, 12, 29, 19)
    assert next_occurrence(schedule, APIA, after) == z(2011, 12, 30, 19)
    assert next_occurrence(schedule, APIA, z(2011, 12, 30, 19)) == z(2011, 12, 31, 19)


@pytest.mark.parametrize(
    ("nonexistent", "expected"),
    [
        (
            "shift",
            [
                Occurrence(loc(2026, 3, 7, 2, 30), z(2026, 3, 7, 7, 30)),
                Occurrence(loc(2026, 3, 8, 2, 30), z(2026, 3, 8, 7, 30), shifted=True),
                Occurrence(loc(2026, 3, 9, 2, 30), z(2026, 3, 9, 6, 30)),
            ],
        ),
        (
            "skip",
            [
                Occurrence(loc(2026, 3, 7, 2, 30), z(2026, 3, 7, 7, 30)),
                Occurrence(loc(2026, 3, 8, 2, 30), None, skipped=True),
                Occurrence(loc(2026, 3, 9, 2, 30), z(2026, 3, 9, 6, 30)),
            ],
        ),
    ],
)
def test_preview_flags_shifted_and_skipped(nonexistent: str, expected: list[Occurrence]) -> None:
    # docs/design.md, "DST policies": the occurrence preview marks each item `shifted` or
    # `skipped`.
    schedule = compile_schedule(
        loc(2026, 3, 6, 2, 30),
        rrule="FREQ=DAILY",
        nonexistent=nonexistent,  # type: ignore[arg-type]
    )
    assert preview(schedule, NY, z(2026, 3, 7, 0, 0), 3) == expected


def test_preview_on_apia_lists_the_skipped_day() -> None:
    schedule = compile_schedule(loc(2011, 12, 29, 9, 0), rrule="FREQ=DAILY", nonexistent="skip")
    assert preview(schedule, APIA, z(2011, 12, 29, 0, 0), 3) == [
        Occurrence(loc(2011, 12, 29, 9), z(2011, 12, 29, 19)),
        Occurrence(loc(2011, 12, 30, 9), None, skipped=True),
        Occurrence(loc(2011, 12, 31, 9), z(2011, 12, 30, 19)),
    ]


def test_exdate_on_a_gap_time_removes_the_shifted_occurrence() -> None:
    # RFC 5545 §3.8.5.1: EXDATE removes the instance; exdates are the rule's wall time.
    schedule = compile_schedule(
        loc(2026, 3, 7, 2, 30), rrule="FREQ=DAILY;COUNT=3", exdates=(loc(2026, 3, 8, 2, 30),)
    )
    assert [o.utc for o in iter_occurrences(schedule, NY)] == [
        z(2026, 3, 7, 7, 30),
        z(2026, 3, 9, 6, 30),  # COUNT is applied before EXDATE: Mar 10 does not replace it
    ]


# ---------------------------------------------------------------------------------------
# Re-anchoring: next_occurrence(after) equals the first instant > after of a full
# expansion from the start (recurrence.py: "Cost does not grow with age").

# Each case: a start years before the windows (so the rule is re-anchored), and windows
# of `after` values around the zone's transitions.
REANCHOR_CASES = [
    ("new_york_daily_0230_10y", NY, loc(2016, 1, 1, 2, 30), "FREQ=DAILY",
     [(z(2026, 3, 1), z(2026, 3, 15)), (z(2026, 10, 25), z(2026, 11, 8))]),
    ("new_york_2nd_sunday_0230", NY, loc(2010, 1, 1, 2, 30), "FREQ=MONTHLY;BYDAY=2SU",
     [(z(2025, 12, 1), z(2026, 4, 1))]),
    ("london_hourly_spring", LONDON, loc(2026, 3, 27, 0, 30), "FREQ=HOURLY",
     [(z(2026, 3, 28, 20), z(2026, 3, 29, 6))]),
    ("london_hourly_fall", LONDON, loc(2026, 10, 23, 0, 0), "FREQ=HOURLY",
     [(z(2026, 10, 24, 20), z(2026, 10, 25, 6))]),
    ("london_last_sundays_0130", LONDON, loc(2000, 3, 26, 1, 30),
     "FREQ=YEARLY;BYMONTH=3,10;BYDAY=-1SU",
     [(z(2026, 3, 20), z(2026, 4, 5)), (z(2026, 10, 15), z(2026, 11, 1))]),
    ("lord_howe_sundays_0215", LORD_HOWE, loc(2020, 1, 5, 2, 15), "FREQ=WEEKLY;BYDAY=SU",
     [(z(2026, 3, 25), z(2026, 4, 15)), (z(2026, 9, 25), z(2026, 10, 15))]),
    ("lord_howe_biweekly_0145", LORD_HOWE, loc(2020, 1, 5, 1, 45),
     "FREQ=WEEKLY;INTERVAL=2;BYDAY=SU,MO",
     [(z(2026, 3, 20), z(2026, 4, 20)), (z(2026, 9, 20), z(2026, 10, 20))]),
    ("apia_daily_0900", APIA, loc(2011, 12, 1, 9, 0), "FREQ=DAILY",
     [(z(2011, 12, 27), z(2012, 1, 3))]),
    ("apia_hourly", APIA, loc(2011, 12, 29, 0, 0), "FREQ=HOURLY;INTERVAL=2",
     [(z(2011, 12, 29, 12), z(2011, 12, 31, 12))]),
]  # fmt: skip


def _afters(full: list[datetime], first: datetime, last: datetime) -> list[datetime]:
    """Every occurrence instant in [first, last], a second and half an hour either side
    of it, and a grid of instants every 7 h 13 min (which drifts across times of day)."""
    step = timedelta(hours=7, minutes=13)
    points = {first + step * i for i in range(int((last - first) / step) + 1)}
    for instant in full:
        if first <= instant <= last:
            for delta in (timedelta(0), timedelta(seconds=1), timedelta(minutes=30)):
                points |= {instant - delta, instant + delta}
    return sorted(p for p in points if first <= p <= last)


@pytest.mark.parametrize(("nonexistent", "ambiguous"), POLICIES, ids=POLICY_IDS)
@pytest.mark.parametrize(
    ("zone", "start", "rrule", "windows"),
    [case[1:] for case in REANCHOR_CASES],
    ids=[case[0] for case in REANCHOR_CASES],
)
def test_reanchored_next_occurrence_equals_full_expansion(
    zone: ZoneInfo,
    start: datetime,
    rrule: str,
    windows: list[tuple[datetime, datetime]],
    nonexistent: str,
    ambiguous: str,
) -> None:
    schedule = compile_schedule(
        start,
        rrule=rrule,
        nonexistent=nonexistent,  # type: ignore[arg-type]
        ambiguous=ambiguous,  # type: ignore[arg-type]
    )
    last = max(w[1] for w in windows)
    full: list[datetime] = []  # from the start, up to the first instant after `last`
    for occ in iter_occurrences(schedule, zone):
        assert occ.utc is not None
        full.append(occ.utc)
        if occ.utc > last:
            break
    assert full == sorted(set(full))  # strictly increasing
    assert full[-1] > last
    for first, end in windows:
        for after in _afters(full, first, end):
            strict = full[bisect.bisect_right(full, after)]
            assert next_occurrence(schedule, zone, after) == strict, after
            at_or_after = full[bisect.bisect_left(full, after)]
            assert next_occurrence(schedule, zone, after, inclusive=True) == at_or_after, after
