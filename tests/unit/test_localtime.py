"""Local wall-clock time → UTC, with the DST policies of docs/design.md, "DST policies".

Expected instants come from RFC 5545 §3.3.5's worked examples:
- "TZID=America/New_York:20071104T013000 indicates November 4, 2007 at 1:30 A.M. EDT
  (UTC-04:00)" — the first of the two 01:30s;
- "TZID=America/New_York:20070311T023000 indicates March 11, 2007 at 3:30 A.M. EDT
  (UTC-04:00), one hour after 1:30 A.M. EST (UTC-05:00)" — a time in the gap is read
  with the offset before the gap.
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta, timezone
from zoneinfo import ZoneInfo

import pytest

from reminder_core.domain.localtime import (
    exists,
    idempotency_key,
    load_zone,
    local_to_utc,
    parse_idempotency_key,
    parse_start_local,
)
from reminder_core.domain.schedule import first_run_utc
from reminder_core.errors import InvalidSchedule

NY = ZoneInfo("America/New_York")


def z(*args: int) -> datetime:
    return datetime(*args, tzinfo=UTC)  # type: ignore[misc]


def test_ambiguous_first_is_the_edt_reading_rfc5545_3_3_5() -> None:
    # 01:30 EDT = 05:30Z
    assert local_to_utc(datetime(2007, 11, 4, 1, 30), NY) == [z(2007, 11, 4, 5, 30)]


def test_ambiguous_last_is_the_est_reading() -> None:
    # 01:30 EST (UTC-05:00) = 06:30Z, one hour after the first reading.
    got = local_to_utc(datetime(2007, 11, 4, 1, 30), NY, ambiguous="last")
    assert got == [z(2007, 11, 4, 6, 30)]


def test_ambiguous_both_gives_both_readings_in_order() -> None:
    got = local_to_utc(datetime(2007, 11, 4, 1, 30), NY, ambiguous="both")
    assert got == [z(2007, 11, 4, 5, 30), z(2007, 11, 4, 6, 30)]


def test_gap_shift_uses_offset_before_the_gap_rfc5545_3_3_5() -> None:
    # 02:30 read at EST (UTC-05:00) = 07:30Z = 03:30 EDT.
    got = local_to_utc(datetime(2007, 3, 11, 2, 30), NY)
    assert got == [z(2007, 3, 11, 7, 30)]
    assert got[0].astimezone(NY).strftime("%H:%M %Z") == "03:30 EDT"


def test_gap_skip_drops_the_instance_rfc5545_3_3_10() -> None:
    assert local_to_utc(datetime(2007, 3, 11, 2, 30), NY, nonexistent="skip") == []


def test_ordinary_time_has_one_reading() -> None:
    # 2007-07-04 12:00 EDT (UTC-04:00) = 16:00Z.
    assert local_to_utc(datetime(2007, 7, 4, 12, 0), NY) == [z(2007, 7, 4, 16, 0)]


def test_exists_is_false_only_inside_the_gap() -> None:
    assert not exists(datetime(2007, 3, 11, 2, 0), NY)
    assert not exists(datetime(2007, 3, 11, 2, 59), NY)
    assert exists(datetime(2007, 3, 11, 3, 0), NY)
    assert exists(datetime(2007, 11, 4, 1, 30), NY)


def test_southern_hemisphere_gap() -> None:
    # Australia/Sydney springs forward 2026-10-04 02:00 AEST → 03:00 AEDT; 02:30 is read
    # with AEST (UTC+10:00): 2026-10-03T16:30Z.
    got = local_to_utc(datetime(2026, 10, 4, 2, 30), ZoneInfo("Australia/Sydney"))
    assert got == [z(2026, 10, 3, 16, 30)]


@pytest.mark.parametrize("text", ["2026-03-08T02:30", "2026-03-08T02:30:15"])
def test_parse_start_local_accepts_minutes_and_seconds(text: str) -> None:
    parsed = parse_start_local(text)
    assert parsed.tzinfo is None
    assert parsed.isoformat().startswith(text)


@pytest.mark.parametrize(
    "text",
    [
        "2026-03-08T02:30Z",
        "2026-03-08T02:30+01:00",
        "2026-03-08 02:30",
        "2026-03-08",
        "2026-03-08T02:30:15.5",
        "tomorrow",
        "2026-02-30T09:00",
        "2026-13-01T09:00",
        "",
    ],
)
def test_parse_start_local_refuses_other_forms(text: str) -> None:
    with pytest.raises(InvalidSchedule) as err:
        parse_start_local(text)
    assert err.value.field == "start_local"


@pytest.mark.parametrize(
    "name", ["Mars/Olympus", "../../etc/passwd", "/etc/localtime", "localtime", "x" * 80, ""]
)
def test_load_zone_refuses_unknown_or_unsafe_names(name: str) -> None:
    with pytest.raises(InvalidSchedule) as err:
        load_zone(name)
    assert err.value.field == "timezone"


def test_first_run_refuses_the_past_and_accepts_now() -> None:
    now = z(2030, 1, 1, 12, 0, 0)
    assert first_run_utc(datetime(2030, 1, 1, 12, 0), ZoneInfo("UTC"), now=now) == now
    with pytest.raises(InvalidSchedule, match="in the past"):
        first_run_utc(datetime(2030, 1, 1, 11, 59, 59), ZoneInfo("UTC"), now=now)


def test_first_run_with_both_readings_picks_the_one_still_ahead() -> None:
    # Created between the two 01:30s of 2007-11-04 in New York: the EST one is still due.
    now = z(2007, 11, 4, 6, 0)
    got = first_run_utc(datetime(2007, 11, 4, 1, 30), NY, now=now, ambiguous="both")
    assert got == z(2007, 11, 4, 6, 30)


def test_first_run_in_gap_with_skip_is_refused() -> None:
    with pytest.raises(InvalidSchedule, match="does not exist"):
        first_run_utc(datetime(2007, 3, 11, 2, 30), NY, now=z(2007, 1, 1), nonexistent="skip")


def test_idempotency_key_is_stable_and_utc() -> None:
    rid = "01a22efc-25a1-7835-acd8-614923c58e3c"
    paris = datetime(2026, 12, 1, 10, 0, tzinfo=ZoneInfo("Europe/Paris"))
    assert idempotency_key(rid, paris) == f"{rid}-20261201T090000Z"
    assert idempotency_key(rid, paris) == idempotency_key(rid, paris.astimezone(UTC))
    # A fixed offset and the zone database's own UTC name the same instant the same way.
    eastern = datetime(2026, 12, 1, 4, 0, tzinfo=timezone(timedelta(hours=-5)))
    assert idempotency_key(rid, eastern) == f"{rid}-20261201T090000Z"
    zoned_utc = datetime(2026, 12, 1, 9, 0, 59, 999999, tzinfo=ZoneInfo("UTC"))
    assert idempotency_key(rid, zoned_utc) == f"{rid}-20261201T090059Z"


def test_an_idempotency_key_names_its_occurrence_back() -> None:
    # The key's documented form: "<reminder_id>-<YYYYMMDDTHHMMSSZ>", to the second.
    rid = "0192A4B5-6C7D-7E8F-9A0B-1C2D3E4F5A6B"
    at = datetime(2026, 3, 29, 1, 30, 15, 250000, tzinfo=UTC)
    key = idempotency_key(rid.lower(), at)
    assert key == "0192a4b5-6c7d-7e8f-9a0b-1c2d3e4f5a6b-20260329T013015Z"
    assert parse_idempotency_key(key) == (rid.lower(), at.replace(microsecond=0))
    assert parse_idempotency_key(key.replace(rid.lower(), rid)) == (
        rid.lower(),
        at.replace(microsecond=0),
    )


@pytest.mark.parametrize(
    "key",
    [
        "",
        "not-a-key",
        "0192a4b5-6c7d-7e8f-9a0b-1c2d3e4f5a6b",
        "0192a4b5-6c7d-7e8f-9a0b-1c2d3e4f5a6b-20261399T013015Z",  # no 99th day
        "0192a4b5-6c7d-7e8f-9a0b-1c2d3e4f5a6b-20260329T013015Z-extra",
        "0192a4b5_6c7d_7e8f_9a0b_1c2d3e4f5a6b-20260329T013015Z",
    ],
)
def test_other_texts_are_no_idempotency_key(key: str) -> None:
    assert parse_idempotency_key(key) is None
