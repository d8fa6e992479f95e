"""Every refusal of a schedule, and bounded cost for rules that (almost) never match.

Sources: RFC 5545 §3.3.10 (the RECUR grammar and its MUST/MUST NOT rules), docs/design.md,
"Bounds" (each a 422 naming the field, nothing stored: an unknown zone; an RRULE that is
unparsable, contains DTSTART or is over 1 KiB; FREQ=SECONDLY and MINUTELY under the
default minimum spacing; a rule with no occurrence left; expansion bounded in candidates
and time, so no input can make the API spin) and issue 3 ("INTERVAL=0 (python-dateutil
loops forever on it)", "UNTIL in a form RFC 5545 forbids for a zoned start", "too many
exdates"). Each refusal must name the field and, in its reason, the problem.
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from itertools import islice, pairwise
from zoneinfo import ZoneInfo

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from reminder_core.domain.recurrence import (
    ExpansionLimitExceeded,
    Limits,
    compile_schedule,
    iter_occurrences,
    next_occurrence,
)
from reminder_core.errors import InvalidSchedule

START = datetime(2026, 3, 2, 9, 0)  # a Monday
ALL_DAY_START = datetime(2026, 3, 2, 9, 0)
NY = ZoneInfo("America/New_York")
NOW = datetime(2026, 3, 1, tzinfo=UTC)

# (id, rrule text, words the reason must contain (case-insensitive), all_day)
REFUSALS = [
    ("unparsable-not-name-value", "every monday", ["not NAME=VALUE"], False),
    ("unparsable-empty", "", ["empty"], False),
    ("unparsable-prefix-only", "RRULE:", ["empty"], False),
    ("unparsable-empty-part", "FREQ=DAILY;;COUNT=2", ["empty part"], False),
    ("unparsable-double-trailing-semicolon", "FREQ=DAILY;;", ["empty part"], False),
    ("unparsable-no-value", "FREQ=DAILY;COUNT=", ["not NAME=VALUE"], False),
    ("unparsable-two-lines", "FREQ=DAILY\nRRULE:FREQ=WEEKLY", ["single RRULE line"], False),
    ("missing-freq", "COUNT=5;BYDAY=MO", ["FREQ is required"], False),
    ("unknown-freq", "FREQ=FORTNIGHTLY", ["FREQ=FORTNIGHTLY", "not one of"], False),
    ("unknown-part", "FREQ=DAILY;FOO=1", ["unsupported rule part FOO"], False),
    (
        "rdate-is-not-a-rule-part",
        "FREQ=DAILY;RDATE=20260301",
        ["unsupported rule part RDATE"],
        False,
    ),
    ("duplicate-part", "FREQ=DAILY;COUNT=2;COUNT=3", ["COUNT appears more than once"], False),
    ("duplicate-freq", "FREQ=DAILY;FREQ=WEEKLY", ["FREQ appears more than once"], False),
    ("interval-zero", "FREQ=DAILY;INTERVAL=0", ["INTERVAL must be at least 1"], False),
    ("interval-negative", "FREQ=DAILY;INTERVAL=-1", ["INTERVAL=-1", "positive integer"], False),
    (
        "interval-not-a-number",
        "FREQ=DAILY;INTERVAL=two",
        ["INTERVAL=TWO", "positive integer"],
        False,
    ),
    ("count-zero", "FREQ=DAILY;COUNT=0", ["COUNT must be at least 1"], False),
    ("count-over-limit", "FREQ=DAILY;COUNT=1001", ["COUNT=1001", "over the limit"], False),
    ("count-and-until", "FREQ=DAILY;COUNT=3;UNTIL=20270101T000000Z", ["COUNT and UNTIL"], False),
    ("dtstart-inside", "DTSTART:20260302T090000\nRRULE:FREQ=DAILY", ["DTSTART"], False),
    ("dtstart-as-part", "FREQ=DAILY;DTSTART=20260302T090000", ["DTSTART"], False),
    ("secondly", "FREQ=SECONDLY", ["FREQ=SECONDLY", "minimum spacing"], False),
    ("minutely", "FREQ=MINUTELY;INTERVAL=15", ["FREQ=MINUTELY", "minimum spacing"], False),
    (
        "hourly-byminute-0-10",
        "FREQ=HOURLY;BYMINUTE=0,10",
        ["closer than the minimum spacing"],
        False,
    ),
    (
        "daily-byhour-byminute",
        "FREQ=DAILY;BYHOUR=9;BYMINUTE=0,30",
        ["closer than the minimum spacing"],
        False,
    ),
    ("until-floating", "FREQ=DAILY;UNTIL=20271231T235959", ["floating", "UTC"], False),
    ("until-date-for-timed-start", "FREQ=DAILY;UNTIL=20271231", ["UNTIL", "UTC date-time"], False),
    ("until-not-a-date", "FREQ=DAILY;UNTIL=20270231T000000Z", ["not a real date-time"], False),
    ("until-garbage", "FREQ=DAILY;UNTIL=tomorrow", ["UNTIL=TOMORROW", "neither"], False),
    ("until-date-time-for-all-day", "FREQ=DAILY;UNTIL=20271231T000000Z", ["must be a DATE"], True),
    ("all-day-byhour", "FREQ=DAILY;BYHOUR=9", ["all-day", "BYHOUR"], True),
    ("all-day-hourly", "FREQ=HOURLY", ["all-day"], True),
    ("february-30", "FREQ=YEARLY;BYMONTH=2;BYMONTHDAY=30", ["no occurrence", "February 30"], False),
    ("april-31", "FREQ=MONTHLY;BYMONTH=4,6;BYMONTHDAY=31", ["no occurrence"], False),
    ("byweekno-with-monthly", "FREQ=MONTHLY;BYWEEKNO=20", ["BYWEEKNO", "YEARLY"], False),
    ("byyearday-with-monthly", "FREQ=MONTHLY;BYYEARDAY=100", ["BYYEARDAY", "MONTHLY"], False),
    ("bymonthday-with-weekly", "FREQ=WEEKLY;BYMONTHDAY=1", ["BYMONTHDAY", "WEEKLY"], False),
    ("ordinal-byday-with-weekly", "FREQ=WEEKLY;BYDAY=1MO", ["ordinal", "MONTHLY or YEARLY"], False),
    ("ordinal-byday-with-daily", "FREQ=DAILY;BYDAY=-1FR", ["ordinal", "MONTHLY or YEARLY"], False),
    (
        "ordinal-byday-with-byweekno",
        "FREQ=YEARLY;BYWEEKNO=20;BYDAY=1MO",
        ["ordinal", "BYWEEKNO"],
        False,
    ),
    ("monthly-ordinal-over-5", "FREQ=MONTHLY;BYDAY=6MO", ["-5 to 5"], False),
    ("bysetpos-alone", "FREQ=MONTHLY;BYSETPOS=1", ["BYSETPOS", "another BYxxx"], False),
    ("bysecond-60", "FREQ=DAILY;BYSECOND=60", ["BYSECOND", "60", "leap second"], False),
    ("byhour-24", "FREQ=DAILY;BYHOUR=24", ["BYHOUR", "24", "0..23"], False),
    ("bymonth-13", "FREQ=YEARLY;BYMONTH=13", ["BYMONTH", "13"], False),
    ("bymonthday-0", "FREQ=MONTHLY;BYMONTHDAY=0", ["BYMONTHDAY", "0"], False),
    ("byday-unknown", "FREQ=WEEKLY;BYDAY=XX", ["BYDAY", "XX"], False),
    ("byday-sign-without-number", "FREQ=MONTHLY;BYDAY=+MO", ["sign but no number"], False),
    ("wkst-unknown", "FREQ=WEEKLY;WKST=ZZ", ["WKST=ZZ", "not a weekday"], False),
]


@pytest.mark.parametrize(
    ("text", "words", "all_day"),
    [case[1:] for case in REFUSALS],
    ids=[case[0] for case in REFUSALS],
)
def test_refusal_names_the_field_and_the_problem(
    text: str, words: list[str], all_day: bool
) -> None:
    with pytest.raises(InvalidSchedule) as caught:
        compile_schedule(ALL_DAY_START if all_day else START, rrule=text, all_day=all_day)
    assert caught.value.field == "rrule"
    for word in words:
        assert word.lower() in caught.value.reason.lower(), caught.value.reason
    assert str(caught.value).startswith("rrule: ")


def test_text_over_1024_bytes_is_refused() -> None:
    # docs/design.md, "Bounds": an RRULE over 1 KiB is refused. Padding with valid-looking
    # content so that only the length is at fault.
    text = "FREQ=MONTHLY;BYMONTHDAY=" + ",".join(["1"] * 600)
    assert len(text.encode()) > 1024
    with pytest.raises(InvalidSchedule) as caught:
        compile_schedule(START, rrule=text)
    assert caught.value.field == "rrule"
    assert "1024 bytes" in caught.value.reason


def test_length_is_counted_in_bytes_not_characters() -> None:
    # 400 characters but over 1024 bytes in UTF-8 (each "€" is 3 bytes).
    text = "FREQ=DAILY;X=" + "€" * 400
    assert len(text) < 1024 < len(text.encode())
    with pytest.raises(InvalidSchedule) as caught:
        compile_schedule(START, rrule=text)
    assert "1024 bytes" in caught.value.reason


def test_too_many_exdates_is_refused() -> None:
    limits = Limits(max_exdates=3)
    exdates = tuple(datetime(2026, 3, d, 9, 0) for d in range(3, 7))
    with pytest.raises(InvalidSchedule) as caught:
        compile_schedule(START, rrule="FREQ=DAILY", exdates=exdates, limits=limits)
    assert caught.value.field == "exdates"
    assert "at most 3" in caught.value.reason
    # At the limit it is accepted.
    compile_schedule(START, rrule="FREQ=DAILY", exdates=exdates[:3], limits=limits)


def test_default_exdate_limit_is_100() -> None:
    exdates = tuple(START + timedelta(days=i) for i in range(1, 102))
    with pytest.raises(InvalidSchedule) as caught:
        compile_schedule(START, rrule="FREQ=DAILY", exdates=exdates)
    assert caught.value.field == "exdates"
    compile_schedule(START, rrule="FREQ=DAILY", exdates=exdates[:100])


@pytest.mark.parametrize(
    ("text", "spacing"),
    [("FREQ=SECONDLY", 1), ("FREQ=MINUTELY", 60), ("FREQ=MINUTELY;INTERVAL=15", 900)],
)
def test_sub_hourly_rules_accepted_when_minimum_spacing_allows(text: str, spacing: int) -> None:
    # docs/design.md, "Bounds": FREQ=SECONDLY and MINUTELY pass a configured minimum
    # spacing.
    limits = Limits(min_spacing_s=1)
    schedule = compile_schedule(START, rrule=text, limits=limits)
    first = list(islice(iter_occurrences(schedule, ZoneInfo("UTC"), limits=limits), 3))
    assert [(b.utc - a.utc).total_seconds() for a, b in pairwise(first)] == [  # type: ignore[operator]
        spacing,
        spacing,
    ]


def test_hourly_byminute_accepted_when_spacing_allows() -> None:
    limits = Limits(min_spacing_s=600)
    schedule = compile_schedule(START, rrule="FREQ=HOURLY;BYMINUTE=0,10", limits=limits)
    got = [o.local for o in islice(iter_occurrences(schedule, ZoneInfo("UTC"), limits=limits), 3)]
    assert got == [
        datetime(2026, 3, 2, 9, 0),
        datetime(2026, 3, 2, 9, 10),
        datetime(2026, 3, 2, 10, 0),
    ]


def test_hourly_is_accepted_under_the_default_spacing() -> None:
    # 3600 s apart is exactly the default minimum, not under it.
    compile_schedule(START, rrule="FREQ=HOURLY")


@pytest.mark.parametrize(
    "text",
    [
        "RRULE:FREQ=WEEKLY;BYDAY=MO,WE",
        "rrule:freq=weekly;byday=mo,we",
        "FREQ=weekly;ByDay=Mo,We",
        "  RRULE:FREQ=WEEKLY;BYDAY=MO,WE  ",
        "BYDAY=MO,WE;FREQ=WEEKLY",  # RFC 5545: "MUST accept rule parts ordered in any sequence"
    ],
)
def test_prefix_case_and_order_accepted(text: str) -> None:
    plain = compile_schedule(START, rrule="FREQ=WEEKLY;BYDAY=MO,WE")
    schedule = compile_schedule(START, rrule=text)
    assert schedule.rule == plain.rule
    # Mon 2, Wed 4, Mon 9 March 2026 at 09:00 EST (UTC-05:00).
    assert [o.utc for o in islice(iter_occurrences(schedule, NY), 3)] == [
        datetime(2026, 3, 2, 14, tzinfo=UTC),
        datetime(2026, 3, 4, 14, tzinfo=UTC),
        datetime(2026, 3, 9, 13, tzinfo=UTC),  # after 2026-03-08: 09:00 EDT (UTC-04:00)
    ]


def test_until_utc_and_all_day_until_date_are_accepted() -> None:
    compile_schedule(START, rrule="FREQ=DAILY;UNTIL=20271231T235959Z")
    schedule = compile_schedule(ALL_DAY_START, rrule="FREQ=DAILY;UNTIL=20260304", all_day=True)
    # UNTIL bounds inclusively (RFC 5545 §3.3.10): March 2, 3 and 4.
    assert [o.local.day for o in iter_occurrences(schedule, NY)] == [2, 3, 4]


def test_february_29_is_accepted() -> None:
    # BYMONTH=2;BYMONTHDAY=29 exists in leap years: 2028-02-29 is the next after 2026.
    schedule = compile_schedule(START, rrule="FREQ=YEARLY;BYMONTH=2;BYMONTHDAY=29")
    assert next_occurrence(schedule, NY, NOW) == datetime(2028, 2, 29, 14, tzinfo=UTC)  # EST


def test_yearly_bymonth_large_ordinal_is_refused_not_crash() -> None:
    # RFC 5545 §3.3.10: "The numeric value in a BYDAY rule part with the FREQ rule part set
    # to YEARLY corresponds to an offset within the month when the BYMONTH rule part is
    # present". March has no 47th Monday, so the rule has no occurrence: docs/design.md,
    # "Bounds", wants a clear refusal (a rule with no occurrence left), never an unhandled
    # error (which the API would answer with a 500).
    # The engine already refuses an ordinal past +-5 for FREQ=MONTHLY ("BYDAY ordinals
    # within a month range from -5 to 5"); the same holds within a BYMONTH month.
    with pytest.raises(InvalidSchedule) as caught:
        compile_schedule(START, rrule="FREQ=YEARLY;BYMONTH=3;BYDAY=47MO")
    assert caught.value.field == "rrule"


# ---------------------------------------------------------------------------------------
# Bounded cost. python-dateutil searches up to year 9999 for a rule that never matches;
# the engine bounds the search (recurrence.py), so these return None. No timing assertion
# (docs/design.md, "Tests and benchmarks": benchmarks live in bench/); the generous timeout
# only turns a hang into a failure.

NEVER = [
    "FREQ=YEARLY;BYWEEKNO=1;BYMONTH=6",  # ISO week 1 is always in late December/January
    "FREQ=YEARLY;BYYEARDAY=366;BYMONTH=1",  # day 366 is December 31 of a leap year
    "FREQ=MONTHLY;BYMONTHDAY=31;BYDAY=1MO",  # a first Monday is day 1-7
]

# Never-matching rules that are refused up front, before any search (rrule.py): an
# ordinal past 5 within a month, and a BYSETPOS past the size of every period's set.
REFUSED_AS_NEVER = [
    "FREQ=YEARLY;BYMONTH=12;BYDAY=6MO",  # December has at most five Mondays
    "FREQ=WEEKLY;BYDAY=MO;BYSETPOS=2",  # a one-element weekly set has no second element
    "FREQ=DAILY;BYMONTHDAY=1;BYSETPOS=2",  # likewise for a day
    "FREQ=HOURLY;BYHOUR=1;BYSETPOS=2",  # likewise for an hour
]


@pytest.mark.parametrize("text", REFUSED_AS_NEVER)
def test_rule_that_can_never_match_is_refused_up_front(text: str) -> None:
    with pytest.raises(InvalidSchedule) as caught:
        compile_schedule(START, rrule=text, limits=Limits(min_spacing_s=0))
    assert caught.value.field == "rrule"


@pytest.mark.timeout(120)
@pytest.mark.parametrize("text", NEVER)
def test_rule_that_never_matches_is_refused_and_a_stored_one_has_no_next(text: str) -> None:
    # Refused at acceptance after a search bounded by the window, not by a clock (issue
    # 14); were one stored anyway (accepted under another engine), it has no occurrence.
    with pytest.raises(InvalidSchedule) as caught:
        compile_schedule(START, rrule=text)
    assert caught.value.field == "rrule"
    assert "has no occurrence" in caught.value.reason
    stored = compile_schedule(START, rrule=text, accept=False)
    assert next_occurrence(stored, NY, NOW) is None


@pytest.mark.timeout(120)
def test_rule_that_matches_rarely_finds_the_far_occurrence() -> None:
    # February 29 on a Monday: 2016-02-29 was one, the next is 2044-02-29 (28 years
    # later: leap days repeat their weekday every 28 years within a century).
    assert datetime(2044, 2, 29).strftime("%a") == "Mon"
    schedule = compile_schedule(START, rrule="FREQ=YEARLY;BYMONTH=2;BYMONTHDAY=29;BYDAY=MO")
    # 09:00 EST (UTC-05:00) in February.
    assert next_occurrence(schedule, NY, NOW) == datetime(2044, 2, 29, 14, tzinfo=UTC)


def test_tiny_iteration_limit_raises_expansion_limit_exceeded() -> None:
    # A rule with COUNT counts from its start: 44 daily candidates lie before `after`.
    schedule = compile_schedule(START, rrule="FREQ=DAILY;COUNT=50")
    tiny = Limits(max_iterations=10)
    with pytest.raises(ExpansionLimitExceeded) as caught:
        next_occurrence(schedule, NY, datetime(2026, 4, 15, tzinfo=UTC), limits=tiny)
    assert isinstance(caught.value, InvalidSchedule)
    assert caught.value.field == "rrule"
    assert "too expensive" in caught.value.reason
    assert "10 iterations" in caught.value.reason


def test_tiny_iteration_limit_also_bounds_compile() -> None:
    # compile_schedule expands the first candidates to check their spacing (twice a day:
    # not whole days apart, so all 51 are looked at).
    with pytest.raises(ExpansionLimitExceeded):
        compile_schedule(START, rrule="FREQ=DAILY;BYHOUR=9,21", limits=Limits(max_iterations=10))


@pytest.mark.parametrize(
    ("text", "spacing_s", "accepted"),
    [
        # Monday and Thursday at 09:00: 3 and 4 days apart (RFC 5545 §3.3.10, BYDAY).
        ("FREQ=WEEKLY;BYDAY=MO,TH", 86400, True),
        ("FREQ=WEEKLY;BYDAY=MO,TH", 3 * 86400, True),
        ("FREQ=WEEKLY;BYDAY=MO,TH", 3 * 86400 + 1, False),
        # Every day at 09:00: exactly one day apart; "closer than" is strict (past a
        # day the rule's nominal spacing already refuses it).
        ("FREQ=DAILY", 86400, True),
        ("FREQ=DAILY", 86401, False),
        # 09:00 and 09:30: not whole days apart, 30 minutes.
        ("FREQ=DAILY;BYMINUTE=0,30", 1800, True),
        ("FREQ=DAILY;BYMINUTE=0,30", 1801, False),
    ],
)
def test_spacing_of_rules_whole_days_apart(text: str, spacing_s: int, accepted: bool) -> None:
    limits = Limits(min_spacing_s=spacing_s)
    if accepted:
        compile_schedule(START, rrule=text, limits=limits)
    else:
        with pytest.raises(InvalidSchedule, match="minimum spacing"):
            compile_schedule(START, rrule=text, limits=limits)


def test_daily_across_a_dst_gap_is_a_day_apart() -> None:
    # 02:30 every day does not exist in New York on 2026-03-08 (RFC 5545 §3.3.5: the
    # candidate is the wall-clock time; the gap is resolved per occurrence afterwards).
    start = datetime(2026, 3, 6, 2, 30)
    schedule = compile_schedule(start, rrule="FREQ=DAILY", limits=Limits(min_spacing_s=86400))
    firsts = list(islice(iter_occurrences(schedule, NY, after=datetime(2026, 3, 6, tzinfo=UTC)), 4))
    assert [o.local.date().day for o in firsts] == [6, 7, 8, 9]


@given(
    freq=st.sampled_from(["DAILY", "WEEKLY", "MONTHLY", "YEARLY"]),
    interval=st.integers(1, 3),
    byday=st.none()
    | st.lists(
        st.sampled_from(["MO", "TU", "WE", "TH", "FR", "SA", "SU"]),
        min_size=1,
        max_size=4,
        unique=True,
    ),
    bymonthday=st.none() | st.lists(st.integers(1, 31), min_size=1, max_size=3, unique=True),
    count=st.none() | st.integers(1, 60),
    spacing_s=st.sampled_from([0, 1, 3600, 43200, 86400]),
)
@settings(max_examples=150, deadline=None)
def test_whole_day_shortcut_decides_as_the_full_scan(
    freq: str,
    interval: int,
    byday: list[str] | None,
    bymonthday: list[int] | None,
    count: int | None,
    spacing_s: int,
) -> None:
    # The shortcut only skips looking at candidates no rule of this shape can have too
    # close: it must accept and refuse exactly what looking at all of them does.
    from unittest import mock

    from reminder_core.domain import recurrence

    parts = [f"FREQ={freq}", f"INTERVAL={interval}"]
    if byday:
        parts.append("BYDAY=" + ",".join(byday))
    if bymonthday and freq in ("MONTHLY", "YEARLY"):
        parts.append("BYMONTHDAY=" + ",".join(map(str, bymonthday)))
    if count is not None:
        parts.append(f"COUNT={count}")
    text = ";".join(parts)
    limits = Limits(min_spacing_s=spacing_s)

    def outcome() -> str:
        try:
            compile_schedule(START, rrule=text, limits=limits)
        except InvalidSchedule as exc:
            return f"{exc.field}: {exc.reason}"
        return "accepted"

    shortcut = outcome()
    with mock.patch.object(recurrence, "_whole_days_apart", return_value=False):
        full = outcome()
    assert shortcut == full


def test_count_with_many_candidates_is_bounded_by_iterations() -> None:
    # A rule with COUNT counts from its start (recurrence.py), so a start long ago costs
    # iterations; the limit stops it instead of spinning.
    schedule = compile_schedule(datetime(1990, 1, 1, 9, 0), rrule="FREQ=DAILY;COUNT=1000")
    with pytest.raises(ExpansionLimitExceeded):
        next_occurrence(schedule, NY, NOW, limits=Limits(max_iterations=500))


@pytest.mark.parametrize(
    ("text", "canonical"),
    [
        ("rrule:freq=weekly;byday=mo,we", "FREQ=WEEKLY;BYDAY=MO,WE"),
        ("FREQ = DAILY; COUNT = 03", "FREQ=DAILY;COUNT=3"),
        ("WKST=SU;BYDAY=-1FR,MO;FREQ=MONTHLY;INTERVAL=1", "FREQ=MONTHLY;BYDAY=MO,-1FR;WKST=SU"),
        ("FREQ=DAILY;UNTIL=20271231t235959z", "FREQ=DAILY;UNTIL=20271231T235959Z"),
    ],
)
def test_rules_are_kept_in_canonical_rfc_5545_form(text: str, canonical: str) -> None:
    # New-user trial: lenient spellings were stored verbatim; RFC 5545 §3.3.10 text is
    # upper case with no spaces, and the parsed rule is the same either way.
    schedule = compile_schedule(START, rrule=text, limits=Limits(min_spacing_s=0))
    assert schedule.rule is not None
    assert schedule.rule.text == canonical
    again = compile_schedule(START, rrule=canonical, limits=Limits(min_spacing_s=0))
    assert again.rule == schedule.rule


@pytest.mark.parametrize(
    "text",
    [
        # Found by the new-user trial: dateutil rejects these as empty sets (a 500 before).
        "FREQ=HOURLY;INTERVAL=2;BYHOUR=9",
        "FREQ=HOURLY;INTERVAL=24;BYHOUR=9",
        # python-dateutil miscounts negative ISO weeks: refused, not misfired.
        "FREQ=YEARLY;BYWEEKNO=-52;BYDAY=MO",
    ],
)
def test_rules_dateutil_cannot_expand_are_refused(text: str) -> None:
    # START is 08:xx: an every-other-hour rule from it never reaches 09:00.
    with pytest.raises(InvalidSchedule) as caught:
        compile_schedule(START.replace(hour=8, minute=30), rrule=text)
    assert caught.value.field == "rrule"


@pytest.mark.timeout(120)
def test_a_rule_that_matches_once_in_decades_at_sub_daily_frequency_is_accepted() -> None:
    # February 29 on a Monday at 13:30, as an hourly-spaced SECONDLY rule: dateutil walks
    # every day between matches, within the search window. Issue 14: this used to be
    # refused or not depending on machine load (a 0.3-0.5 s wall-clock limit); the search
    # is bounded by the window, so it is accepted and its next occurrence found. Next
    # Monday February 29 after 2016: 2044 (see test_rule_that_matches_rarely_...).
    rule = "FREQ=SECONDLY;INTERVAL=3600;BYMONTH=2;BYMONTHDAY=29;BYDAY=MO;BYHOUR=13;BYMINUTE=30"
    schedule = compile_schedule(START.replace(hour=13, minute=30), rrule=rule)
    # 13:30 EST (UTC-05:00) in February.
    assert next_occurrence(schedule, NY, NOW) == datetime(2044, 2, 29, 18, 30, tzinfo=UTC)


def test_exdates_need_a_rule() -> None:
    with pytest.raises(InvalidSchedule) as caught:
        compile_schedule(START, exdates=(START,))
    assert caught.value.field == "exdates"
