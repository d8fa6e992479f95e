"""The recurring-reminder API of issue 3 against the real database (docs/design.md,
"Recurrence and time", "REST API").

Every expected instant is derived by hand, next to the test, from the zone rules below,
RFC 5545 (§3.3.5 local times across DST changes, §3.3.10 RRULE, §3.8.5 EXDATE) and the
issue text; weekdays come from the Gregorian calendar. Zone rules (IANA tz database):

- America/New_York: EST = UTC-5, EDT = UTC-4. Since 2007 DST starts at 02:00 on the
  second Sunday of March (2029-03-11, 2030-03-10: 02:00 EST -> 03:00 EDT, so 02:00-02:59
  does not exist) and ends at 02:00 on the first Sunday of November (2029-11-04,
  2030-11-03: 02:00 EDT -> 01:00 EST, so 01:00-01:59 occurs twice).
- Europe/Paris: CET = UTC+1, CEST = UTC+2; EU summer time from 01:00Z on the last Sunday
  of March (2030-03-31: 02:00 CET -> 03:00 CEST) to 01:00Z on the last Sunday of October
  (2030-10-27: 03:00 CEST -> 02:00 CET, so 02:00-02:59 occurs twice).
- Asia/Tokyo: JST = UTC+9, no DST.
- Australia/Lord_Howe: LHST = UTC+10:30, LHDT = UTC+11 (a 30-minute DST); since 2008 DST
  starts at 02:00 on the first Sunday of October (2030-10-06: 02:00 -> 02:30, so
  02:00-02:29 does not exist) ("R LH 2008 ma - O Su>=1 2 0:30").

DST policies (docs/design.md, "DST policies"): `shift` reads a time in the gap with the
offset in force before the gap (RFC 5545 §3.3.5); `skip` drops it and does not count it
(RFC 5545 §3.3.10); `first` / `last` / `both` pick the readings of a time that occurs
twice.

The app runs on a fixed clock: NOW = 2029-06-01 12:00Z, a Friday; that is 08:00 EDT in
New York, 14:00 CEST in Paris and 21:00 JST in Tokyo. Weekdays used: 2029-05-01 Tuesday,
2029-06-04 Monday, 2029-06-13 Wednesday, 2029-06-18 Monday, 2029-06-29 Friday (the last
Friday of June 2029), 2029-11-10 Saturday, 2030-03-08 Friday, 2030-07-01 Monday.
"""

from __future__ import annotations

import json
import uuid
from concurrent.futures import ThreadPoolExecutor
from datetime import datetime, time, timedelta
from typing import Any

import httpx
import pytest
from fastapi.testclient import TestClient
from sqlalchemy import Engine, text

from reminder_core.settings import Settings
from tests.conftest import table_counts, utc
from tests.integration.api_support import (
    NOW,
    PROBLEM_JSON,
    URL,
    Clock,
    TokenFor,
    bearer,
    build_app,
)

PREVIEW = "/v1/occurrences:preview"
NY = "America/New_York"


@pytest.fixture
def alice(token_for: TokenFor) -> dict[str, str]:
    return bearer(token_for("alice"))


def instant(value: str | None) -> datetime | None:
    """Parse an ISO 8601 instant from a response; it must carry an offset."""
    if value is None:
        return None
    parsed = datetime.fromisoformat(value)
    assert parsed.tzinfo is not None, f"{value!r} has no UTC offset"
    return parsed


def recurring(
    start_local: str = "2029-05-01T09:00", rrule: str | None = "FREQ=DAILY", **extra: Any
) -> dict[str, Any]:
    """A valid daily reminder body in America/New_York; `rrule=None` makes it one-time,
    `extra` adds or overrides fields (an explicit None in `extra` is sent as null)."""
    body: dict[str, Any] = {
        "title": "Standup",
        "start_local": start_local,
        "timezone": NY,
        "rrule": rrule,
    }
    body.update(extra)
    return {k: v for k, v in body.items() if v is not None or k in extra}


def create(client: TestClient, headers: dict[str, str], body: dict[str, Any]) -> dict[str, Any]:
    resp = client.post(URL, json=body, headers=headers)
    assert resp.status_code == 201, resp.text
    out: dict[str, Any] = resp.json()
    return out


def assert_problem(
    resp: httpx.Response, status: int, field: str | tuple[str, ...] | None = None
) -> dict[str, Any]:
    """RFC 9457 problem+json; `errors` (extension member) names the field at fault.

    A field matches itself, its nested members ("dst.nonexistent") and its items
    ("exdates[0]", "exdates.0"). A tuple accepts any of its fields.
    """
    assert resp.status_code == status, resp.text
    assert resp.headers["content-type"].split(";")[0].strip() == PROBLEM_JSON
    problem: dict[str, Any] = resp.json()
    assert problem["status"] == status
    for member in ("type", "title", "detail"):
        assert isinstance(problem[member], str), member
        assert problem[member], member
    if field is not None:
        wanted = (field,) if isinstance(field, str) else field
        named = [e["field"] for e in problem["errors"]]
        assert any(
            f == w or f.startswith(w + ".") or f.startswith(w + "[") for f in named for w in wanted
        ), problem
        assert all(e["message"] for e in problem["errors"]), problem  # the reason is given
    return problem


ROW_COLUMNS = (
    "user_id, title, body, start_local, all_day, timezone, rrule, exdates, dst_nonexistent,"
    " dst_ambiguous, misfire_policy, max_lateness_s, next_run_utc, status, version,"
    " claimed_by, claimed_at, last_error, updated_at"
)


def row(db: Engine, reminder_id: str | uuid.UUID) -> Any:
    with db.connect() as conn:
        return conn.execute(
            text(f"SELECT {ROW_COLUMNS} FROM reminders WHERE id = :id"),
            {"id": uuid.UUID(str(reminder_id))},
        ).one()


def set_claimed(db: Engine, reminder_id: str) -> None:
    """Put a reminder in `claimed`, as the coordinator does (docs/design.md,
    "Reminder states")."""
    with db.begin() as conn:
        conn.execute(
            text(
                "UPDATE reminders SET status = 'claimed', claimed_by = 'coordinator-1',"
                " claimed_at = :at WHERE id = :id"
            ),
            {"at": NOW, "id": uuid.UUID(reminder_id)},
        )


def set_completed(db: Engine, reminder_id: str) -> None:
    with db.begin() as conn:
        conn.execute(
            text("UPDATE reminders SET status = 'completed', next_run_utc = NULL WHERE id = :id"),
            {"id": uuid.UUID(reminder_id)},
        )


def app_with(db: Engine, settings: Settings, clock: Clock, **overrides: Any) -> TestClient:
    return TestClient(build_app(settings.model_copy(update=overrides), db, clock))


# --------------------------------------------------------------------------------------
# 1. Create recurring reminders: 201 and next_run_utc derived from the zone rules
# --------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "rrule", ["FREQ=DAILY", "RRULE:FREQ=DAILY", "rrule:FREQ=DAILY", "  RRULE:FREQ=DAILY  "]
)
def test_rrule_with_or_without_prefix(
    client: TestClient, db: Engine, alice: dict[str, str], rrule: str
) -> None:
    # Issue 3: RRULE text "with or without the RRULE: prefix" (the property name of RFC
    # 5545 §3.8.5.3, case-insensitive per §3.1). The start lies in the past: a recurring
    # reminder continues from now. 2029-06-01 09:00 EDT = 13:00Z, after NOW (08:00 EDT).
    resp = client.post(URL, json=recurring(rrule=rrule), headers=alice)

    assert resp.status_code == 201, resp.text
    out = resp.json()
    assert resp.headers["etag"] == '"1"'
    assert instant(out["next_run_utc"]) == utc(2029, 6, 1, 13, 0)
    assert out["rrule"] == "FREQ=DAILY"  # the prefix is syntax, not part of the rule
    stored = row(db, out["id"])
    assert stored.rrule == "FREQ=DAILY"
    assert stored.next_run_utc == utc(2029, 6, 1, 13, 0)
    assert stored.status == "pending"
    assert table_counts(db) == {"delivery_log": 0, "outbox": 0, "queue_messages": 0, "reminders": 1}


@pytest.mark.parametrize(
    ("start_local", "rrule", "expected"),
    [
        # Today's 07:00 EDT (11:00Z) is before NOW: the next one is 2029-06-02 07:00 EDT.
        ("2029-05-01T07:00", "FREQ=DAILY", utc(2029, 6, 2, 11, 0)),
        # docs/design.md, "next_run_utc": at creation, the first occurrence at or after
        # now: 08:00 EDT = NOW exactly.
        ("2029-05-01T08:00", "FREQ=DAILY", NOW),
        # Friday NOW -> next Monday 2029-06-04 08:30 EDT = 12:30Z.
        ("2029-05-01T08:30", "FREQ=WEEKLY;BYDAY=MO,WE", utc(2029, 6, 4, 12, 30)),
        # Every 2 weeks on MO, WE from Tuesday 2029-05-01 (week of Monday 2029-04-30, WKST
        # MO): active weeks start 04-30, 05-14, 05-28, 06-11; 05-28 week's days passed
        # (Mon 05-28, Wed 05-30), so the next is Monday 2029-06-11 08:30 EDT = 12:30Z.
        ("2029-05-01T08:30", "FREQ=WEEKLY;INTERVAL=2;BYDAY=MO,WE", utc(2029, 6, 11, 12, 30)),
        # Last Friday of each month (BYDAY=-1FR): June 2029's Fridays are 1, 8, 15, 22, 29.
        ("2029-05-01T17:00", "FREQ=MONTHLY;BYDAY=-1FR", utc(2029, 6, 29, 21, 0)),
        # Every weekday at 08:30: Friday 08:30 EDT = 12:30Z, after NOW.
        ("2029-05-01T08:30", "FREQ=WEEKLY;BYDAY=MO,TU,WE,TH,FR", utc(2029, 6, 1, 12, 30)),
        # FREQ=HOURLY is exactly the default minimum spacing (3600 s): accepted.
        # 07:15, 08:15 EDT ... -> 08:15 EDT = 12:15Z.
        ("2029-06-01T07:15", "FREQ=HOURLY", utc(2029, 6, 1, 12, 15)),
        # COUNT=40 from 2029-05-01: May 1..31 are instances 1..31, June 1 is 32 <= 40.
        ("2029-05-01T09:00", "FREQ=DAILY;COUNT=40", utc(2029, 6, 1, 13, 0)),
        # UNTIL is inclusive when synchronized (RFC 5545 §3.3.10): 13:00Z is the last one.
        ("2029-05-01T09:00", "FREQ=DAILY;UNTIL=20290601T130000Z", utc(2029, 6, 1, 13, 0)),
        # Yearly on the start's month and day (RFC 5545: missing parts come from DTSTART):
        # 2029-07-01 09:00 EDT = 13:00Z.
        ("2020-07-01T09:00", "FREQ=YEARLY", utc(2029, 7, 1, 13, 0)),
    ],
    ids=[
        "daily-passed-today",
        "daily-exactly-now",
        "weekly-mo-we",
        "biweekly-mo-we",
        "last-friday",
        "weekdays",
        "hourly-at-min-spacing",
        "count-not-reached",
        "until-inclusive",
        "yearly",
    ],
)
def test_next_run_of_a_rule(
    client: TestClient, alice: dict[str, str], start_local: str, rrule: str, expected: datetime
) -> None:
    resp = client.post(URL, json=recurring(start_local, rrule), headers=alice)

    assert resp.status_code == 201, resp.text
    assert instant(resp.json()["next_run_utc"]) == expected


def test_exdates_are_left_out_and_echoed(
    client: TestClient, db: Engine, alice: dict[str, str]
) -> None:
    # RFC 5545 §3.8.5.1: EXDATE removes those instances. 2029-06-01 and 06-02 at 09:00 are
    # excluded, so the next is 2029-06-03 09:00 EDT = 13:00Z.
    body = recurring(exdates=["2029-06-01T09:00", "2029-06-02T09:00:00"])

    out = create(client, alice, body)

    assert instant(out["next_run_utc"]) == utc(2029, 6, 3, 13, 0)
    assert out["exdates"] == ["2029-06-01T09:00:00", "2029-06-02T09:00:00"]
    stored = row(db, out["id"])
    assert stored.exdates == [datetime(2029, 6, 1, 9, 0), datetime(2029, 6, 2, 9, 0)]
    assert stored.next_run_utc == utc(2029, 6, 3, 13, 0)


def test_exdate_not_on_the_rule_is_422_and_nothing_stored(
    client: TestClient, db: Engine, alice: dict[str, str]
) -> None:
    # An EXDATE at 10:00 matches no 09:00 instance (RFC 5545 §3.8.5.1 removes instances
    # whose start equals it), so it would exclude nothing: issue 14 asks for a 422 naming it.
    before = table_counts(db)
    resp = client.post(URL, json=recurring(exdates=["2029-06-02T09:00", "2029-06-01T10:00"]),
                       headers=alice)  # fmt: skip

    problem = assert_problem(resp, 422, "exdates[1]")
    assert "2029-06-01T10:00" in problem["detail"]
    assert "09:00" in problem["detail"]  # the rule's time that day
    assert table_counts(db) == before


def test_full_echo_of_a_recurring_reminder(
    client: TestClient, db: Engine, alice: dict[str, str]
) -> None:
    body = {
        "title": "Water the plants",
        "body": "Balcony too",
        "start_local": "2029-05-01T18:00",
        "timezone": "Europe/Paris",
        "rrule": "RRULE:FREQ=WEEKLY;BYDAY=FR",
        "exdates": ["2029-06-01T18:00"],
        "dst": {"nonexistent": "skip", "ambiguous": "both"},
        "misfire": {"policy": "all", "max_lateness_s": 600},
    }

    resp = client.post(URL, json=body, headers=alice)

    assert resp.status_code == 201, resp.text
    out = resp.json()
    # Fridays at 18:00 CEST (UTC+2); Friday 2029-06-01 is excluded -> 2029-06-08 16:00Z.
    assert instant(out["next_run_utc"]) == utc(2029, 6, 8, 16, 0)
    assert out["title"] == "Water the plants"
    assert out["body"] == "Balcony too"
    assert out["start_local"] == "2029-05-01T18:00:00"
    assert out["timezone"] == "Europe/Paris"
    assert out["rrule"] == "FREQ=WEEKLY;BYDAY=FR"
    assert out["exdates"] == ["2029-06-01T18:00:00"]
    assert out["all_day"] is False
    assert out["dst"] == {"nonexistent": "skip", "ambiguous": "both"}
    assert out["misfire"] == {"policy": "all", "max_lateness_s": 600}
    assert out["status"] == "pending"
    assert out["version"] == 1
    stored = row(db, out["id"])
    assert (stored.dst_nonexistent, stored.dst_ambiguous) == ("skip", "both")
    assert (stored.misfire_policy, stored.max_lateness_s) == ("all", 600)
    # GET answers the same representation.
    assert client.get(f"{URL}/{out['id']}", headers=alice).json() == out


def test_policies_default_to_design_values(client: TestClient, alice: dict[str, str]) -> None:
    # docs/design.md, "DST policies", "Missed runs": dst defaults shift / first; misfire
    # defaults latest with a 1-hour cap.
    out = create(client, alice, recurring())

    assert out["dst"] == {"nonexistent": "shift", "ambiguous": "first"}
    assert out["misfire"] == {"policy": "latest", "max_lateness_s": 3600}
    assert out["all_day"] is False
    assert out["exdates"] == []


@pytest.mark.parametrize(
    "misfire",
    [
        {"policy": "latest", "max_lateness_s": 0},
        {"policy": "skip", "max_lateness_s": 30 * 86400},  # the schema's upper bound
        {"policy": "all"},
    ],
)
def test_misfire_policies_are_accepted_and_stored(
    client: TestClient, db: Engine, alice: dict[str, str], misfire: dict[str, Any]
) -> None:
    out = create(client, alice, recurring(misfire=misfire))

    expected = {"max_lateness_s": 3600, **misfire}
    assert out["misfire"] == expected
    stored = row(db, out["id"])
    assert (stored.misfire_policy, stored.max_lateness_s) == (
        expected["policy"],
        expected["max_lateness_s"],
    )


# --- all-day reminders ------------------------------------------------------------------


@pytest.mark.parametrize(
    ("body", "expected"),
    [
        # One-time all-day on 2029-06-05: the default 09:00 local, EDT -> 13:00Z.
        ({"start_local": "2029-06-05"}, utc(2029, 6, 5, 13, 0)),
        # A birthday since 2020: yearly on June 5 -> 2029-06-05 09:00 EDT = 13:00Z.
        ({"start_local": "2020-06-05", "rrule": "FREQ=YEARLY"}, utc(2029, 6, 5, 13, 0)),
        # Daily from today: today's 09:00 EDT (13:00Z) is still ahead of NOW (08:00 EDT).
        ({"start_local": "2029-06-01", "rrule": "FREQ=DAILY"}, utc(2029, 6, 1, 13, 0)),
        # UNTIL is a DATE for an all-day start (RFC 5545 §3.3.10).
        (
            {"start_local": "2029-06-01", "rrule": "FREQ=DAILY;UNTIL=20290630"},
            utc(2029, 6, 1, 13, 0),
        ),
        # Exdates of an all-day reminder are dates: today excluded -> 2029-06-02 13:00Z.
        (
            {"start_local": "2029-06-01", "rrule": "FREQ=DAILY", "exdates": ["2029-06-01"]},
            utc(2029, 6, 2, 13, 0),
        ),
        # Winter: 2029-12-25 09:00 EST (UTC-5) = 14:00Z.
        ({"start_local": "2029-12-25"}, utc(2029, 12, 25, 14, 0)),
    ],
    ids=["one-time", "yearly", "daily-today", "until-date", "exdate-date", "winter"],
)
def test_all_day_fires_at_nine_local(
    client: TestClient, db: Engine, alice: dict[str, str], body: dict[str, Any], expected: datetime
) -> None:
    resp = client.post(
        URL, json={"title": "Birthday", "timezone": NY, "all_day": True, **body}, headers=alice
    )

    assert resp.status_code == 201, resp.text
    out = resp.json()
    assert out["all_day"] is True
    assert out["start_local"] == body["start_local"]  # echoed as a date
    assert out["exdates"] == body.get("exdates", [])
    assert instant(out["next_run_utc"]) == expected
    assert row(db, out["id"]).all_day is True


def test_all_day_follows_the_profile_zone(client: TestClient, token_for: TokenFor) -> None:
    # bob follows Europe/Paris: 2029-06-05 09:00 CEST (UTC+2) = 07:00Z.
    out = create(
        client,
        bearer(token_for("bob")),
        {"title": "Birthday", "start_local": "2029-06-05", "all_day": True},
    )

    assert out["timezone"] is None
    assert instant(out["next_run_utc"]) == utc(2029, 6, 5, 7, 0)


@pytest.mark.parametrize(
    ("body", "expected"),
    [
        # ALL_DAY_LOCAL_TIME=07:30: 2029-06-05 07:30 EDT = 11:30Z.
        ({"start_local": "2029-06-05"}, utc(2029, 6, 5, 11, 30)),
        # Daily from today: today's 07:30 EDT (11:30Z) has passed at NOW (12:00Z), so the
        # first is 2029-06-02 07:30 EDT = 11:30Z.
        ({"start_local": "2029-06-01", "rrule": "FREQ=DAILY"}, utc(2029, 6, 2, 11, 30)),
    ],
    ids=["one-time", "daily-passed-today"],
)
def test_all_day_time_is_configurable(
    db: Engine,
    settings: Settings,
    clock: Clock,
    alice: dict[str, str],
    body: dict[str, Any],
    expected: datetime,
) -> None:
    with app_with(db, settings, clock, all_day_local_time=time(7, 30)) as c:
        resp = c.post(
            URL, json={"title": "x", "timezone": NY, "all_day": True, **body}, headers=alice
        )

    assert resp.status_code == 201, resp.text
    assert instant(resp.json()["next_run_utc"]) == expected


def test_one_time_all_day_today_after_its_time_is_past(
    db: Engine, settings: Settings, clock: Clock, alice: dict[str, str]
) -> None:
    # With the all-day time at 07:30, today's all-day reminder fired at 11:30Z, before NOW:
    # a one-time reminder in the past is refused (docs/design.md, "next_run_utc").
    with app_with(db, settings, clock, all_day_local_time=time(7, 30)) as c:
        resp = c.post(
            URL,
            json={"title": "x", "timezone": NY, "all_day": True, "start_local": "2029-06-01"},
            headers=alice,
        )

    assert_problem(resp, 422, "start_local")
    assert table_counts(db)["reminders"] == 0


# --- fixed timezone vs the profile's ----------------------------------------------------


@pytest.mark.parametrize(
    ("user", "timezone", "expected"),
    [
        # bob follows Europe/Paris: NOW is 14:00 CEST, today's 09:00 has passed:
        # 2029-06-02 09:00 CEST (UTC+2) = 07:00Z.
        ("bob", None, utc(2029, 6, 2, 7, 0)),
        # bob with a fixed Asia/Tokyo: NOW is 21:00 JST: 2029-06-02 09:00 JST = 00:00Z.
        ("bob", "Asia/Tokyo", utc(2029, 6, 2, 0, 0)),
        # alice follows New York: 09:00 EDT today = 13:00Z.
        ("alice", None, utc(2029, 6, 1, 13, 0)),
        # alice with a fixed Europe/Paris: as bob's profile zone.
        ("alice", "Europe/Paris", utc(2029, 6, 2, 7, 0)),
    ],
)
def test_zone_fixed_or_from_the_profile(
    client: TestClient,
    db: Engine,
    token_for: TokenFor,
    user: str,
    timezone: str | None,
    expected: datetime,
) -> None:
    body = {"title": "Daily", "start_local": "2029-05-01T09:00", "rrule": "FREQ=DAILY"}
    if timezone is not None:
        body["timezone"] = timezone

    out = create(client, bearer(token_for(user)), body)

    # null = follow the profile (docs/design.md, "Data model")
    assert out["timezone"] == timezone
    assert instant(out["next_run_utc"]) == expected
    assert row(db, out["id"]).timezone == timezone


# --- DST policies -----------------------------------------------------------------------

DST_CASES = [
    # (zone, start_local, dst, expected next_run_utc) -- a daily rule starting that day.
    # 2030-03-10 is the US spring-forward day: 02:30 does not exist.
    # shift: read with the offset before the gap (EST, RFC 5545 §3.3.5): 02:30+5h = 07:30Z.
    (NY, "2030-03-10T02:30", {"nonexistent": "shift"}, utc(2030, 3, 10, 7, 30)),
    # skip: dropped (RFC 5545 §3.3.10) -> next day 02:30 EDT = 06:30Z.
    (NY, "2030-03-10T02:30", {"nonexistent": "skip"}, utc(2030, 3, 11, 6, 30)),
    # 2030-11-03 is the US fall-back day: 01:30 occurs in EDT (05:30Z) then in EST (06:30Z).
    (NY, "2030-11-03T01:30", {"ambiguous": "first"}, utc(2030, 11, 3, 5, 30)),
    (NY, "2030-11-03T01:30", {"ambiguous": "last"}, utc(2030, 11, 3, 6, 30)),
    # both: two occurrences; the first at or after now is the EDT one.
    (NY, "2030-11-03T01:30", {"ambiguous": "both"}, utc(2030, 11, 3, 5, 30)),
    # 2030-03-31 is the EU spring-forward day: Paris 02:30 does not exist.
    # shift: CET (UTC+1) -> 01:30Z; skip -> 2030-04-01 02:30 CEST (UTC+2) = 00:30Z.
    ("Europe/Paris", "2030-03-31T02:30", {"nonexistent": "shift"}, utc(2030, 3, 31, 1, 30)),
    ("Europe/Paris", "2030-03-31T02:30", {"nonexistent": "skip"}, utc(2030, 4, 1, 0, 30)),
    # 2030-10-27 is the EU fall-back day: Paris 02:30 is 00:30Z (CEST) then 01:30Z (CET).
    ("Europe/Paris", "2030-10-27T02:30", {"ambiguous": "first"}, utc(2030, 10, 27, 0, 30)),
    ("Europe/Paris", "2030-10-27T02:30", {"ambiguous": "last"}, utc(2030, 10, 27, 1, 30)),
    # 2030-10-06 Lord Howe: 02:00 LHST -> 02:30 LHDT, so 02:15 does not exist.
    # shift: LHST (UTC+10:30) -> 02:15 - 10:30 = 2030-10-05 15:45Z.
    # skip: next day 02:15 LHDT (UTC+11) = 2030-10-06 15:15Z.
    (
        "Australia/Lord_Howe",
        "2030-10-06T02:15",
        {"nonexistent": "shift"},
        utc(2030, 10, 5, 15, 45),
    ),
    ("Australia/Lord_Howe", "2030-10-06T02:15", {"nonexistent": "skip"}, utc(2030, 10, 6, 15, 15)),
]


@pytest.mark.parametrize(
    ("zone", "start_local", "dst", "expected"),
    DST_CASES,
    ids=[
        "ny-gap-shift",
        "ny-gap-skip",
        "ny-overlap-first",
        "ny-overlap-last",
        "ny-overlap-both",
        "paris-gap-shift",
        "paris-gap-skip",
        "paris-overlap-first",
        "paris-overlap-last",
        "lord-howe-gap-shift",
        "lord-howe-gap-skip",
    ],
)
def test_dst_policy_decides_next_run(
    client: TestClient,
    db: Engine,
    alice: dict[str, str],
    zone: str,
    start_local: str,
    dst: dict[str, str],
    expected: datetime,
) -> None:
    body = recurring(start_local, timezone=zone, dst=dst)

    out = create(client, alice, body)

    assert instant(out["next_run_utc"]) == expected
    assert out["dst"] == {"nonexistent": "shift", "ambiguous": "first", **dst}
    assert row(db, out["id"]).next_run_utc == expected


def test_dst_gap_in_the_profile_zone(client: TestClient, token_for: TokenFor) -> None:
    # bob (Europe/Paris profile), no fixed zone: as "paris-gap-shift" above, 01:30Z.
    out = create(
        client,
        bearer(token_for("bob")),
        {"title": "x", "start_local": "2030-03-31T02:30", "rrule": "FREQ=DAILY"},
    )

    assert instant(out["next_run_utc"]) == utc(2030, 3, 31, 1, 30)


def test_min_spacing_is_configurable(
    db: Engine, settings: Settings, clock: Clock, alice: dict[str, str]
) -> None:
    # MIN_RECURRENCE_SPACING_S=1 admits FREQ=SECONDLY;INTERVAL=5 (issue 3: "minimum spacing
    # configurable"). From 07:59:58 EDT every 5 s: 07:59:58, 08:00:03; NOW = 08:00:00 EDT,
    # so the first at or after now is 08:00:03 EDT = 12:00:03Z.
    body = recurring("2029-06-01T07:59:58", "FREQ=SECONDLY;INTERVAL=5")
    with app_with(db, settings, clock, min_recurrence_spacing_s=1) as c:
        resp = c.post(URL, json=body, headers=alice)
        minutely = c.post(URL, json=recurring("2029-06-01T07:59", "FREQ=MINUTELY"), headers=alice)

    assert resp.status_code == 201, resp.text
    assert instant(resp.json()["next_run_utc"]) == utc(2029, 6, 1, 12, 0, 3)
    # Every minute from 07:59 EDT: 08:00 EDT = NOW.
    assert minutely.status_code == 201, minutely.text
    assert instant(minutely.json()["next_run_utc"]) == NOW


# --------------------------------------------------------------------------------------
# 2. Refusals: 422 problem+json naming the field, nothing stored
# --------------------------------------------------------------------------------------

REC = recurring("2030-07-01T09:00")  # a valid daily reminder starting Monday 2030-07-01


def _rule_of_length(n: int) -> str:
    """A valid rule of exactly n characters (n even, >= 22): FREQ=YEARLY;BYMONTH=01,1,1..."""
    rule = "FREQ=YEARLY;BYMONTH=01" + ",1" * ((n - 22) // 2)
    if len(rule) < n:
        rule = "FREQ=YEARLY;BYMONTH=1" + ",1" * ((n - 21) // 2)
    assert len(rule) == n
    return rule


def daily_exdates(n: int) -> list[str]:
    """n distinct exdates at 09:00 from 2030-07-02 on."""
    return [(datetime(2030, 7, 2, 9, 0) + timedelta(days=i)).isoformat() for i in range(n)]


BAD_RECURRING: list[tuple[str, Any, str | tuple[str, ...]]] = [
    # (id, body, field) -- each answered 422 (issue 3 "Refused with 422 ... nothing stored")
    ("rrule-unparsable", {**REC, "rrule": "every monday"}, "rrule"),
    ("rrule-unknown-freq", {**REC, "rrule": "FREQ=FORTNIGHTLY"}, "rrule"),
    ("rrule-no-freq", {**REC, "rrule": "BYDAY=MO"}, "rrule"),
    ("rrule-empty", {**REC, "rrule": ""}, "rrule"),
    ("rrule-prefix-only", {**REC, "rrule": "RRULE:"}, "rrule"),
    ("rrule-unknown-part", {**REC, "rrule": "FREQ=DAILY;COLOUR=RED"}, "rrule"),
    ("rrule-bad-byday", {**REC, "rrule": "FREQ=WEEKLY;BYDAY=XX"}, "rrule"),
    ("rrule-not-a-string", {**REC, "rrule": 5}, "rrule"),
    # RFC 5545 §3.3.10: INTERVAL is a positive integer (python-dateutil loops on 0).
    ("interval-0", {**REC, "rrule": "FREQ=DAILY;INTERVAL=0"}, "rrule"),
    ("interval-negative", {**REC, "rrule": "FREQ=DAILY;INTERVAL=-1"}, "rrule"),
    ("count-0", {**REC, "rrule": "FREQ=DAILY;COUNT=0"}, "rrule"),
    # RFC 5545 §3.3.10: COUNT and UNTIL MUST NOT occur in the same rule.
    ("count-and-until", {**REC, "rrule": "FREQ=DAILY;COUNT=3;UNTIL=20301231T000000Z"}, "rrule"),
    # docs/design.md, "Bounds": DTSTART inside the RRULE.
    ("dtstart-part", {**REC, "rrule": "FREQ=DAILY;DTSTART=20300701T090000"}, "rrule"),
    ("dtstart-line", {**REC, "rrule": "DTSTART:20300701T090000\nRRULE:FREQ=DAILY"}, "rrule"),
    # docs/design.md, "Bounds": FREQ=SECONDLY or MINUTELY refused at the default minimum
    # spacing (1 h).
    ("freq-minutely", {**REC, "rrule": "FREQ=MINUTELY"}, "rrule"),
    ("freq-minutely-interval-59", {**REC, "rrule": "FREQ=MINUTELY;INTERVAL=59"}, "rrule"),
    ("freq-secondly", {**REC, "rrule": "FREQ=SECONDLY"}, "rrule"),
    # A daily rule made denser than the spacing by BYMINUTE: 09:00 and 09:30.
    ("dense-byminute", {**REC, "rrule": "FREQ=DAILY;BYMINUTE=0,30"}, "rrule"),
    # RFC 5545 §3.3.10: with a zoned DTSTART, UNTIL "MUST be specified in UTC time format".
    ("until-floating", {**REC, "rrule": "FREQ=DAILY;UNTIL=20301231T235959"}, "rrule"),
    # ... and UNTIL "MUST have the same value type as DTSTART": not a DATE for a date-time.
    ("until-date-for-timed", {**REC, "rrule": "FREQ=DAILY;UNTIL=20301231"}, "rrule"),
    ("until-not-a-date", {**REC, "rrule": "FREQ=DAILY;UNTIL=20300231T000000Z"}, "rrule"),
    # February 30 never occurs (RFC 5545 §3.3.10 ignores invalid dates).
    ("february-30", {**REC, "rrule": "FREQ=YEARLY;BYMONTH=2;BYMONTHDAY=30"}, "rrule"),
    ("april-31-monthly", {**REC, "rrule": "FREQ=MONTHLY;BYMONTH=4;BYMONTHDAY=31"}, "rrule"),
    # Day 366 is December 31 of a leap year, never in January: no occurrence ever, found
    # by a bounded search (docs/design.md, "Bounds"), not a static check.
    ("yearday-366-in-january", {**REC, "rrule": "FREQ=YEARLY;BYYEARDAY=366;BYMONTH=1"}, "rrule"),
    # No occurrence in the future (docs/design.md, "Bounds"). From 2029-05-01 09:00 EDT
    # daily: COUNT=31 ends on 2029-05-31; UNTIL 2029-06-01 12:59:59Z ends before 06-01
    # 09:00 EDT (13:00Z).
    ("count-in-the-past", recurring(rrule="FREQ=DAILY;COUNT=31"), "rrule"),
    ("until-in-the-past", recurring(rrule="FREQ=DAILY;UNTIL=20290601T125959Z"), "rrule"),
    # An exclusion set removing every occurrence (COUNT=2: 07-01 and 07-02, both excluded).
    (
        "all-excluded-count",
        {**REC, "rrule": "FREQ=DAILY;COUNT=2", "exdates": ["2030-07-01T09:00", "2030-07-02T09:00"]},
        ("rrule", "exdates"),
    ),
    (
        "all-excluded-until",
        {
            **REC,
            "rrule": "FREQ=DAILY;UNTIL=20300702T130000Z",  # 07-02 09:00 EDT
            "exdates": ["2030-07-01T09:00", "2030-07-02T09:00"],
        },
        ("rrule", "exdates"),
    ),
    # Unknown zone.
    ("unknown-timezone", {**REC, "timezone": "Mars/Olympus"}, "timezone"),
    ("timezone-not-a-zone", {**REC, "timezone": "EST5EDT/../../x"}, "timezone"),
    # Too many exdates: the default limit is 100.
    ("exdates-101", {**REC, "exdates": daily_exdates(101)}, "exdates"),
    ("exdates-not-a-list", {**REC, "exdates": "2030-07-02T09:00"}, "exdates"),
    ("exdate-not-a-string", {**REC, "exdates": [20300702]}, "exdates"),
    ("exdate-malformed", {**REC, "exdates": ["next tuesday"]}, "exdates"),
    ("exdate-with-offset", {**REC, "exdates": ["2030-07-02T09:00Z"]}, "exdates"),
    ("exdate-not-real", {**REC, "exdates": ["2030-07-02T09:00", "2030-02-30T09:00"]}, "exdates"),
    ("exdate-date-for-timed", {**REC, "exdates": ["2030-07-02"]}, "exdates"),
    # all_day needs a date (issue 3: "all_day with a date").
    ("all-day-datetime-start", {**REC, "all_day": True}, "start_local"),
    ("all-day-not-a-date", {**REC, "all_day": True, "start_local": "2030-02-30"}, "start_local"),
    (
        "all-day-datetime-exdate",
        {**REC, "all_day": True, "start_local": "2030-07-01", "exdates": ["2030-07-02T09:00"]},
        "exdates",
    ),
    (
        "all-day-until-datetime",
        {
            **REC,
            "all_day": True,
            "start_local": "2030-07-01",
            "rrule": "FREQ=DAILY;UNTIL=20301231T000000Z",
        },
        "rrule",
    ),
    (
        "all-day-hourly",
        {**REC, "all_day": True, "start_local": "2030-07-01", "rrule": "FREQ=HOURLY"},
        "rrule",
    ),
    # A one-time start in a DST gap under `skip` never occurs (RFC 5545 §3.3.10).
    (
        "one-time-gap-skip",
        {**REC, "rrule": None, "start_local": "2030-03-10T02:30", "dst": {"nonexistent": "skip"}},
        "start_local",
    ),
    # Unknown policy values.
    ("dst-nonexistent-unknown", {**REC, "dst": {"nonexistent": "later"}}, "dst.nonexistent"),
    ("dst-ambiguous-unknown", {**REC, "dst": {"ambiguous": "middle"}}, "dst.ambiguous"),
    ("dst-not-an-object", {**REC, "dst": "shift"}, "dst"),
    ("dst-null-member", {**REC, "dst": {"nonexistent": None}}, "dst.nonexistent"),
    ("misfire-unknown", {**REC, "misfire": {"policy": "burst"}}, "misfire.policy"),
    ("lateness-negative", {**REC, "misfire": {"max_lateness_s": -1}}, "misfire.max_lateness_s"),
    (
        "lateness-over-30-days",
        {**REC, "misfire": {"max_lateness_s": 30 * 86400 + 1}},
        "misfire.max_lateness_s",
    ),
    (
        "lateness-not-a-number",
        {**REC, "misfire": {"max_lateness_s": "soon"}},
        "misfire.max_lateness_s",
    ),
    # Unknown nested fields.
    ("dst-unknown-field", {**REC, "dst": {"nonexistent": "shift", "colour": "red"}}, "dst.colour"),
    (
        "misfire-unknown-field",
        {**REC, "misfire": {"policy": "all", "burst": True}},
        "misfire.burst",
    ),
    ("unknown-top-field", {**REC, "recurrence": "daily"}, "recurrence"),
]


@pytest.mark.parametrize(
    ("payload", "field"),
    [pytest.param(p, f, id=i) for i, p, f in BAD_RECURRING],
)
def test_bad_recurring_body_is_422_and_nothing_stored(
    client: TestClient, db: Engine, alice: dict[str, str], payload: Any, field: Any
) -> None:
    payload = {k: v for k, v in payload.items() if v is not None}
    before = table_counts(db)

    resp = client.post(URL, json=payload, headers=alice)

    assert_problem(resp, 422, field)
    assert table_counts(db) == before


@pytest.mark.parametrize(
    ("change", "named"),
    [
        ({"rrule": "FREQ=DAILY;INTERVAL=0"}, "INTERVAL"),
        ({"rrule": "FREQ=DAILY;DTSTART=20300701T090000"}, "DTSTART"),
        ({"rrule": "FREQ=MINUTELY"}, "MINUTELY"),
        ({"rrule": "FREQ=SECONDLY"}, "SECONDLY"),
        ({"rrule": "FREQ=DAILY;UNTIL=20301231T235959"}, "UNTIL"),
        ({"rrule": "FREQ=YEARLY;BYMONTH=2;BYMONTHDAY=30"}, "BYMONTHDAY"),
        ({"timezone": "Mars/Olympus"}, "Mars/Olympus"),
        ({"exdates": daily_exdates(101)}, "100"),
    ],
    ids=["interval", "dtstart", "minutely", "secondly", "until", "february-30", "zone", "exdates"],
)
def test_refusal_message_names_the_problem(
    client: TestClient, alice: dict[str, str], change: dict[str, Any], named: str
) -> None:
    # Issue 3: "Refused with 422 and a message naming the problem".
    resp = client.post(URL, json={**REC, **change}, headers=alice)

    problem = assert_problem(resp, 422, next(iter(change)))
    assert named.lower() in problem["detail"].lower(), problem


@pytest.mark.parametrize(
    "rule", ["FREQ=DAILY;INTERVAL=²", "FREQ=DAILY;COUNT=³", "FREQ=DAILY;BYHOUR=٣"]
)
def test_non_ascii_digits_in_interval_or_count_are_422(
    db: Engine, settings: Settings, clock: Clock, alice: dict[str, str], rule: str
) -> None:
    # RFC 5545 §3.3.10: INTERVAL and COUNT are 1*DIGIT, and DIGIT is %x30-39 (RFC 5234).
    before = table_counts(db)
    with TestClient(build_app(settings, db, clock), raise_server_exceptions=False) as c:
        resp = c.post(URL, json={**REC, "rrule": rule}, headers=alice)

    assert_problem(resp, 422, "rrule")
    assert table_counts(db) == before


@pytest.mark.parametrize(
    "rule",
    # 1025 ASCII characters; 613 characters that are 1213 bytes in UTF-8 ("é" is 2 bytes).
    [_rule_of_length(1025), "FREQ=DAILY;X=" + "é" * 600],
    ids=["1025-chars", "over-1kib-in-bytes"],
)
def test_rrule_over_1_kib_is_422(
    client: TestClient, db: Engine, alice: dict[str, str], rule: str
) -> None:
    # docs/design.md, "Bounds": an RRULE over 1 KiB is refused, and the message says so.
    resp = client.post(URL, json={**REC, "rrule": rule}, headers=alice)

    problem = assert_problem(resp, 422, "rrule")
    assert "1024" in problem["detail"], problem
    assert table_counts(db)["reminders"] == 0


def test_rrule_of_exactly_1024_chars_is_accepted(client: TestClient, alice: dict[str, str]) -> None:
    # The boundary of "RRULE text over 1 KiB": 1024 characters is allowed. The rule is
    # yearly in January on the start's day of month (1): 2031-01-01 09:00 EST = 14:00Z.
    rule = _rule_of_length(1024)

    resp = client.post(URL, json={**REC, "rrule": rule}, headers=alice)

    assert resp.status_code == 201, resp.text
    assert instant(resp.json()["next_run_utc"]) == utc(2031, 1, 1, 14, 0)


def test_max_exdates_is_configurable(
    db: Engine, settings: Settings, clock: Clock, alice: dict[str, str]
) -> None:
    two = ["2030-07-02T09:00", "2030-07-03T09:00"]
    with app_with(db, settings, clock, max_exdates=2) as c:
        accepted = c.post(URL, json={**REC, "exdates": two}, headers=alice)
        before = table_counts(db)
        refused = c.post(URL, json={**REC, "exdates": [*two, "2030-07-04T09:00"]}, headers=alice)

    assert accepted.status_code == 201, accepted.text
    assert_problem(refused, 422, "exdates")
    assert table_counts(db) == before


def test_default_exdate_limit_admits_100(client: TestClient, alice: dict[str, str]) -> None:
    # 100 distinct exdates (the default MAX_EXDATES) are accepted: 2030-07-02 .. 2030-10-09,
    # so from 2030-07-01 09:00 EDT the first is 07-01 = 13:00Z.
    exdates = daily_exdates(100)

    resp = client.post(URL, json={**REC, "exdates": exdates}, headers=alice)

    assert resp.status_code == 201, resp.text
    assert len(resp.json()["exdates"]) == 100
    assert instant(resp.json()["next_run_utc"]) == utc(2030, 7, 1, 13, 0)


# --------------------------------------------------------------------------------------
# 3. PATCH /v1/reminders/{id} (If-Match on the version ETag)
# --------------------------------------------------------------------------------------


def patch(
    client: TestClient,
    rid: str,
    body: dict[str, Any],
    headers: dict[str, str],
    if_match: str | None = None,
) -> httpx.Response:
    extra = {"If-Match": if_match} if if_match is not None else {}
    resp: httpx.Response = client.patch(f"{URL}/{rid}", json=body, headers={**headers, **extra})
    return resp


def test_patch_with_current_if_match(
    client: TestClient, clock: Clock, db: Engine, alice: dict[str, str]
) -> None:
    created = create(client, alice, recurring())
    clock.now = utc(2029, 6, 1, 12, 5)

    resp = patch(client, created["id"], {"title": "Daily standup"}, alice, '"1"')

    assert resp.status_code == 200, resp.text
    out = resp.json()
    assert out["version"] == 2
    assert resp.headers["etag"] == '"2"'
    assert out["title"] == "Daily standup"
    # A title change does not move the schedule.
    assert out["next_run_utc"] == created["next_run_utc"]
    assert instant(out["updated_at"]) == utc(2029, 6, 1, 12, 5)
    stored = row(db, created["id"])
    assert (stored.title, stored.version) == ("Daily standup", 2)
    assert stored.next_run_utc == utc(2029, 6, 1, 13, 0)
    # GET carries the new ETag.
    assert client.get(f"{URL}/{created['id']}", headers=alice).headers["etag"] == '"2"'


@pytest.mark.parametrize("if_match", ['"1"', '"7", "1"', "*"], ids=["exact", "list", "star"])
def test_if_match_forms_that_match(
    client: TestClient, alice: dict[str, str], if_match: str
) -> None:
    # RFC 9110 §13.1.1: true when "*" or one of the listed entity tags matches.
    rid = create(client, alice, recurring())["id"]

    resp = patch(client, rid, {"body": "notes"}, alice, if_match)

    assert resp.status_code == 200, resp.text
    assert resp.json()["version"] == 2


@pytest.mark.parametrize("if_match", ['"2"', '"0"', 'W/"1"'], ids=["future", "older", "weak"])
def test_stale_if_match_is_412_and_changes_nothing(
    client: TestClient, db: Engine, alice: dict[str, str], if_match: str
) -> None:
    # RFC 9110 §13.1.1: If-Match uses the strong comparison (§8.8.3.2), so a weak tag
    # W/"1" never matches; a non-matching tag answers 412 and the method is not applied.
    rid = create(client, alice, recurring())["id"]
    before = row(db, rid)

    resp = patch(client, rid, {"title": "changed", "rrule": "FREQ=WEEKLY"}, alice, if_match)

    assert_problem(resp, 412)
    assert row(db, rid) == before


def test_stale_if_match_after_another_change(
    client: TestClient, db: Engine, alice: dict[str, str]
) -> None:
    rid = create(client, alice, recurring())["id"]
    first = patch(client, rid, {"title": "first writer"}, alice, '"1"')
    assert first.status_code == 200, first.text
    before = row(db, rid)

    lost_update = patch(client, rid, {"title": "second writer"}, alice, '"1"')

    assert_problem(lost_update, 412)
    assert row(db, rid) == before
    assert row(db, rid).title == "first writer"


def test_concurrent_patches_with_one_version_apply_once(
    client: TestClient, db: Engine, alice: dict[str, str]
) -> None:
    rid = create(client, alice, recurring())["id"]
    n = 6

    def attempt(i: int) -> httpx.Response:
        return patch(client, rid, {"title": f"writer {i}"}, alice, '"1"')

    with ThreadPoolExecutor(max_workers=n) as pool:
        responses = list(pool.map(attempt, range(n)))

    statuses = sorted(r.status_code for r in responses)
    assert statuses == [200] + [412] * (n - 1), [r.text for r in responses]
    winner = next(r for r in responses if r.status_code == 200).json()
    stored = row(db, rid)
    assert (stored.title, stored.version) == (winner["title"], 2)


def test_patch_without_if_match_is_applied(
    client: TestClient, db: Engine, alice: dict[str, str]
) -> None:
    rid = create(client, alice, recurring())["id"]

    resp = patch(client, rid, {"body": "agenda", "misfire": {"policy": "skip"}}, alice)

    assert resp.status_code == 200, resp.text
    out = resp.json()
    assert (out["body"], out["version"]) == ("agenda", 2)
    assert out["misfire"] == {"policy": "skip", "max_lateness_s": 3600}
    assert instant(out["next_run_utc"]) == utc(2029, 6, 1, 13, 0)  # not a schedule change
    stored = row(db, rid)
    assert (stored.body, stored.misfire_policy, stored.version) == ("agenda", "skip", 2)


def test_patch_body_null_clears_it(client: TestClient, alice: dict[str, str]) -> None:
    rid = create(client, alice, recurring(body="old notes"))["id"]

    resp = patch(client, rid, {"body": None}, alice, '"1"')

    assert resp.status_code == 200, resp.text
    assert resp.json()["body"] is None


def test_schedule_change_recomputes_and_releases_a_claim(
    client: TestClient, clock: Clock, db: Engine, alice: dict[str, str]
) -> None:
    # Issue 3: "a schedule change recomputes next_run_utc and supersedes an occurrence that
    # is claimed but not yet sent".
    rid = create(client, alice, recurring())["id"]  # daily 09:00 EDT, next 06-01 13:00Z
    set_claimed(db, rid)
    clock.now = utc(2029, 6, 3, 12, 0)  # Sunday 08:00 EDT

    resp = patch(
        client, rid, {"start_local": "2029-05-01T10:00", "rrule": "FREQ=WEEKLY;BYDAY=MO"}, alice
    )

    assert resp.status_code == 200, resp.text
    out = resp.json()
    # Mondays 10:00 from now (Sunday 2029-06-03): Monday 2029-06-04 10:00 EDT = 14:00Z.
    assert instant(out["next_run_utc"]) == utc(2029, 6, 4, 14, 0)
    assert (out["status"], out["version"]) == ("pending", 2)
    assert out["rrule"] == "FREQ=WEEKLY;BYDAY=MO"
    stored = row(db, rid)
    assert (stored.status, stored.claimed_by, stored.claimed_at) == ("pending", None, None)
    assert stored.next_run_utc == utc(2029, 6, 4, 14, 0)
    assert stored.start_local == datetime(2029, 5, 1, 10, 0)


def test_title_change_keeps_a_claim(client: TestClient, db: Engine, alice: dict[str, str]) -> None:
    # A title is rendered at send time; the claimed occurrence stays claimed.
    rid = create(client, alice, recurring())["id"]
    set_claimed(db, rid)

    resp = patch(client, rid, {"title": "renamed"}, alice, '"1"')

    assert resp.status_code == 200, resp.text
    stored = row(db, rid)
    assert (stored.status, stored.claimed_by) == ("claimed", "coordinator-1")
    assert stored.next_run_utc == utc(2029, 6, 1, 13, 0)


@pytest.mark.parametrize(
    ("change", "expected"),
    [
        # Exclude today's 09:00 -> 2029-06-02 09:00 EDT = 13:00Z.
        ({"exdates": ["2029-06-01T09:00"]}, utc(2029, 6, 2, 13, 0)),
        # Move to Paris: NOW is 14:00 CEST, today's 09:00 passed -> 06-02 07:00Z.
        ({"timezone": "Europe/Paris"}, utc(2029, 6, 2, 7, 0)),
        # Tokyo: NOW is 21:00 JST -> 2029-06-02 09:00 JST = 00:00Z.
        ({"timezone": "Asia/Tokyo"}, utc(2029, 6, 2, 0, 0)),
        # All-day from 2029-06-05 (date): 09:00 EDT = 13:00Z.
        ({"all_day": True, "start_local": "2029-06-05"}, utc(2029, 6, 5, 13, 0)),
        # A new start time only: 07:00 today has passed -> 2029-06-02 07:00 EDT = 11:00Z.
        ({"start_local": "2029-05-01T07:00"}, utc(2029, 6, 2, 11, 0)),
        # rrule null makes it one-time at its start_local: 2029-06-10 09:00 EDT = 13:00Z.
        ({"rrule": None, "start_local": "2029-06-10T09:00"}, utc(2029, 6, 10, 13, 0)),
    ],
    ids=["exdates", "timezone-paris", "timezone-tokyo", "all-day", "start-time", "one-time"],
)
def test_schedule_changes(
    client: TestClient,
    db: Engine,
    alice: dict[str, str],
    change: dict[str, Any],
    expected: datetime,
) -> None:
    rid = create(client, alice, recurring())["id"]

    resp = patch(client, rid, change, alice, '"1"')

    assert resp.status_code == 200, resp.text
    out = resp.json()
    assert instant(out["next_run_utc"]) == expected
    assert row(db, rid).next_run_utc == expected
    for name, value in change.items():
        if name != "start_local" and name != "exdates":
            assert out[name] == value, name


def test_rrule_null_makes_it_one_time(
    client: TestClient, db: Engine, alice: dict[str, str]
) -> None:
    # Start 2029-06-01 09:00 EDT = 13:00Z is still ahead of NOW: as a one-time reminder it
    # fires then, once.
    rid = create(client, alice, recurring("2029-06-01T09:00"))["id"]

    resp = patch(client, rid, {"rrule": None}, alice, '"1"')

    assert resp.status_code == 200, resp.text
    assert resp.json()["rrule"] is None
    assert instant(resp.json()["next_run_utc"]) == utc(2029, 6, 1, 13, 0)
    stored = row(db, rid)
    assert (stored.rrule, stored.next_run_utc) == (None, utc(2029, 6, 1, 13, 0))
    occurrences = client.get(f"{URL}/{rid}/occurrences?limit=5", headers=alice).json()["items"]
    assert [instant(o["run_time_utc"]) for o in occurrences] == [utc(2029, 6, 1, 13, 0)]


def test_timezone_null_follows_the_profile_again(
    client: TestClient, db: Engine, token_for: TokenFor
) -> None:
    # bob: fixed Tokyo, then null -> his profile's Europe/Paris: 06-02 09:00 CEST = 07:00Z.
    bob = bearer(token_for("bob"))
    rid = create(client, bob, recurring(timezone="Asia/Tokyo"))["id"]

    resp = patch(client, rid, {"timezone": None}, bob, '"1"')

    assert resp.status_code == 200, resp.text
    assert resp.json()["timezone"] is None
    assert instant(resp.json()["next_run_utc"]) == utc(2029, 6, 2, 7, 0)
    assert row(db, rid).timezone is None


def test_dst_policy_change_recomputes(
    client: TestClient, db: Engine, alice: dict[str, str]
) -> None:
    # Daily 02:30 from the US spring-forward day: shift -> 07:30Z; changed to skip, the
    # gap day is dropped -> 2030-03-11 02:30 EDT = 06:30Z (as in DST_CASES).
    rid = create(client, alice, recurring("2030-03-10T02:30"))["id"]

    resp = patch(client, rid, {"dst": {"nonexistent": "skip"}}, alice, '"1"')

    assert resp.status_code == 200, resp.text
    assert resp.json()["dst"]["nonexistent"] == "skip"
    assert instant(resp.json()["next_run_utc"]) == utc(2030, 3, 11, 6, 30)
    assert row(db, rid).dst_nonexistent == "skip"


def test_schedule_change_of_a_paused_reminder_stays_paused(
    client: TestClient, db: Engine, alice: dict[str, str]
) -> None:
    rid = create(client, alice, recurring())["id"]
    assert client.post(f"{URL}/{rid}/pause", headers=alice).status_code == 200

    resp = patch(client, rid, {"start_local": "2029-05-01T10:00"}, alice)

    assert resp.status_code == 200, resp.text
    assert resp.json()["status"] == "paused"
    assert row(db, rid).status == "paused"


def test_patch_of_a_cancelled_reminder_is_409(
    client: TestClient, db: Engine, alice: dict[str, str]
) -> None:
    rid = create(client, alice, recurring())["id"]
    assert client.delete(f"{URL}/{rid}", headers=alice).status_code == 200
    before = row(db, rid)

    resp = patch(client, rid, {"title": "revived"}, alice, '"2"')

    assert_problem(resp, 409)
    assert row(db, rid) == before


@pytest.mark.parametrize("name", ["title", "start_local", "all_day", "dst", "misfire"])
def test_patch_null_for_a_required_field_is_422(
    client: TestClient, db: Engine, alice: dict[str, str], name: str
) -> None:
    rid = create(client, alice, recurring())["id"]
    before = row(db, rid)

    resp = patch(client, rid, {name: None}, alice, '"1"')

    assert_problem(resp, 422, name)
    assert row(db, rid) == before


def test_patch_another_users_reminder_is_404(
    client: TestClient, db: Engine, alice: dict[str, str], token_for: TokenFor
) -> None:
    rid = create(client, alice, recurring())["id"]
    before = row(db, rid)

    resp = patch(client, rid, {"title": "mine now"}, bearer(token_for("bob")), '"1"')

    assert_problem(resp, 404)
    assert "Standup" not in resp.text
    assert row(db, rid) == before


BAD_PATCHES: list[tuple[str, dict[str, Any], str | tuple[str, ...]]] = [
    ("freq-minutely", {"rrule": "FREQ=MINUTELY"}, "rrule"),
    ("interval-0", {"rrule": "FREQ=DAILY;INTERVAL=0"}, "rrule"),
    ("unparsable", {"rrule": "whenever"}, "rrule"),
    ("february-30", {"rrule": "FREQ=YEARLY;BYMONTH=2;BYMONTHDAY=30"}, "rrule"),
    ("rrule-over-1kib", {"rrule": _rule_of_length(1026)}, "rrule"),
    ("unknown-timezone", {"timezone": "Mars/Olympus"}, "timezone"),
    ("malformed-start", {"start_local": "soon"}, "start_local"),
    ("malformed-exdate", {"exdates": ["2029-06-02 09:00"]}, "exdates"),
    # The start 2029-05-01 09:00 is in the past: as a one-time reminder it is refused.
    ("one-time-in-the-past", {"rrule": None}, "start_local"),
    # COUNT=31 from 2029-05-01 ended on 2029-05-31.
    ("no-future-occurrence", {"rrule": "FREQ=DAILY;COUNT=31"}, "rrule"),
    ("all-day-with-datetime", {"all_day": True, "start_local": "2029-06-05T09:00"}, "start_local"),
    ("dst-unknown", {"dst": {"nonexistent": "later"}}, "dst.nonexistent"),
    ("misfire-unknown", {"misfire": {"policy": "burst"}}, "misfire.policy"),
    ("unknown-field", {"colour": "red"}, "colour"),
    ("blank-title", {"title": "  "}, "title"),
]


@pytest.mark.parametrize(("change", "field"), [pytest.param(c, f, id=i) for i, c, f in BAD_PATCHES])
def test_invalid_patch_is_422_and_row_unchanged(
    client: TestClient, db: Engine, alice: dict[str, str], change: dict[str, Any], field: Any
) -> None:
    rid = create(client, alice, recurring())["id"]
    set_claimed(db, rid)  # not even the claim is released
    before = row(db, rid)

    resp = patch(client, rid, {"title": "would change", **change}, alice, '"1"')

    assert_problem(resp, 422, field)
    assert row(db, rid) == before
    assert table_counts(db)["reminders"] == 1


# --------------------------------------------------------------------------------------
# 4. Pause and resume
# --------------------------------------------------------------------------------------


def test_pause_and_pause_again(client: TestClient, db: Engine, alice: dict[str, str]) -> None:
    rid = create(client, alice, recurring())["id"]

    first = client.post(f"{URL}/{rid}/pause", headers=alice)
    again = client.post(f"{URL}/{rid}/pause", headers=alice)

    assert first.status_code == 200, first.text
    assert (first.json()["status"], first.json()["version"]) == ("paused", 2)
    assert first.headers["etag"] == '"2"'
    assert again.status_code == 200, again.text
    assert (again.json()["status"], again.json()["version"]) == ("paused", 2)
    stored = row(db, rid)
    assert (stored.status, stored.version) == ("paused", 2)


def test_pausing_a_claimed_reminder_clears_the_claim(
    client: TestClient, db: Engine, alice: dict[str, str]
) -> None:
    rid = create(client, alice, recurring())["id"]
    set_claimed(db, rid)

    resp = client.post(f"{URL}/{rid}/pause", headers=alice)

    assert resp.status_code == 200, resp.text
    stored = row(db, rid)
    assert (stored.status, stored.claimed_by, stored.claimed_at) == ("paused", None, None)
    assert stored.version == 2


def test_resume_one_time_keeps_its_time(
    client: TestClient, db: Engine, alice: dict[str, str]
) -> None:
    rid = create(client, alice, recurring("2029-07-01T09:00", None))["id"]
    client.post(f"{URL}/{rid}/pause", headers=alice)

    resp = client.post(f"{URL}/{rid}/resume", headers=alice)

    assert resp.status_code == 200, resp.text
    out = resp.json()
    assert (out["status"], out["version"]) == ("pending", 3)
    assert resp.headers["etag"] == '"3"'
    # 2029-07-01 09:00 EDT = 13:00Z, unchanged.
    assert instant(out["next_run_utc"]) == utc(2029, 7, 1, 13, 0)
    assert row(db, rid).status == "pending"


@pytest.mark.parametrize(
    ("start_local", "rrule", "resume_at", "expected"),
    [
        # Daily 09:00; resumed Tuesday 2029-06-05 11:00 EDT (15:00Z): 06-01..06-05 passed
        # during the pause and are not sent; next 2029-06-06 09:00 EDT = 13:00Z.
        ("2029-05-01T09:00", "FREQ=DAILY", utc(2029, 6, 5, 15, 0), utc(2029, 6, 6, 13, 0)),
        # Resumed exactly at an occurrence (06-05 09:00 EDT = 13:00Z): at or after now.
        ("2029-05-01T09:00", "FREQ=DAILY", utc(2029, 6, 5, 13, 0), utc(2029, 6, 5, 13, 0)),
        # Mondays and Wednesdays 08:30; resumed Wednesday 2029-06-13 09:00 EDT (13:00Z),
        # after that day's 08:30: next Monday 2029-06-18 08:30 EDT = 12:30Z.
        (
            "2029-05-01T08:30",
            "FREQ=WEEKLY;BYDAY=MO,WE",
            utc(2029, 6, 13, 13, 0),
            utc(2029, 6, 18, 12, 30),
        ),
        # Resumed after the fall-back (2029-11-04): Saturday 2029-11-10 07:00 EST (12:00Z);
        # 09:00 stays 09:00 local, now EST (UTC-5): 14:00Z.
        ("2029-05-01T09:00", "FREQ=DAILY", utc(2029, 11, 10, 12, 0), utc(2029, 11, 10, 14, 0)),
    ],
    ids=["daily", "at-an-occurrence", "weekly", "after-fall-back"],
)
def test_resume_recurring_continues_from_now(
    client: TestClient,
    clock: Clock,
    db: Engine,
    alice: dict[str, str],
    start_local: str,
    rrule: str,
    resume_at: datetime,
    expected: datetime,
) -> None:
    rid = create(client, alice, recurring(start_local, rrule))["id"]
    assert client.post(f"{URL}/{rid}/pause", headers=alice).status_code == 200
    clock.now = resume_at

    resp = client.post(f"{URL}/{rid}/resume", headers=alice)

    assert resp.status_code == 200, resp.text
    out = resp.json()
    assert (out["status"], out["version"]) == ("pending", 3)
    assert instant(out["next_run_utc"]) == expected
    stored = row(db, rid)
    assert (stored.status, stored.next_run_utc) == ("pending", expected)


def test_paused_reminder_previews_from_now(
    client: TestClient, clock: Clock, alice: dict[str, str]
) -> None:
    # While paused, the preview shows what resuming now would give (see the "daily" case).
    rid = create(client, alice, recurring())["id"]
    client.post(f"{URL}/{rid}/pause", headers=alice)
    clock.now = utc(2029, 6, 5, 15, 0)

    resp = client.get(f"{URL}/{rid}/occurrences?limit=2", headers=alice)

    assert resp.status_code == 200, resp.text
    assert [instant(o["run_time_utc"]) for o in resp.json()["items"]] == [
        utc(2029, 6, 6, 13, 0),
        utc(2029, 6, 7, 13, 0),
    ]


def test_resume_after_the_rule_ended_completes_it(
    client: TestClient, clock: Clock, db: Engine, alice: dict[str, str]
) -> None:
    # COUNT=3 from 2029-06-01: 06-01, 06-02, 06-03 at 09:00 EDT. Resumed on 06-10, none is
    # left: the reminder is completed (issue 3: "completed when the rule is exhausted").
    rid = create(client, alice, recurring("2029-06-01T09:00", "FREQ=DAILY;COUNT=3"))["id"]
    client.post(f"{URL}/{rid}/pause", headers=alice)
    clock.now = utc(2029, 6, 10, 12, 0)

    resp = client.post(f"{URL}/{rid}/resume", headers=alice)

    assert resp.status_code == 200, resp.text
    assert resp.json()["status"] == "completed"
    assert resp.json()["next_run_utc"] is None
    assert row(db, rid).status == "completed"


def test_resume_of_a_pending_reminder_changes_nothing(
    client: TestClient, db: Engine, alice: dict[str, str]
) -> None:
    rid = create(client, alice, recurring())["id"]
    before = row(db, rid)

    resp = client.post(f"{URL}/{rid}/resume", headers=alice)

    assert resp.status_code == 200, resp.text
    assert resp.json()["status"] == "pending"
    assert row(db, rid) == before


@pytest.mark.parametrize("final", ["completed", "cancelled"])
@pytest.mark.parametrize("action", ["pause", "resume"])
def test_pause_or_resume_of_a_finished_reminder_is_409(
    client: TestClient, db: Engine, alice: dict[str, str], final: str, action: str
) -> None:
    rid = create(client, alice, recurring())["id"]
    if final == "completed":
        set_completed(db, rid)
    else:
        assert client.delete(f"{URL}/{rid}", headers=alice).status_code == 200
    before = row(db, rid)

    resp = client.post(f"{URL}/{rid}/{action}", headers=alice)

    assert_problem(resp, 409)
    assert row(db, rid) == before


@pytest.mark.parametrize("action", ["pause", "resume"])
def test_pause_or_resume_another_users_reminder_is_404(
    client: TestClient, db: Engine, alice: dict[str, str], token_for: TokenFor, action: str
) -> None:
    rid = create(client, alice, recurring())["id"]
    before = row(db, rid)

    resp = client.post(f"{URL}/{rid}/{action}", headers=bearer(token_for("bob")))

    assert_problem(resp, 404)
    assert row(db, rid) == before


# --------------------------------------------------------------------------------------
# 5. GET /v1/reminders/{id}/occurrences
# --------------------------------------------------------------------------------------


def expected_item(
    run_time_utc: datetime | None,
    local: str,
    rule_local: str,
    *,
    shifted: bool = False,
    skipped: bool = False,
) -> dict[str, Any]:
    return {
        "run_time_utc": run_time_utc,
        "local": local,
        "rule_local": rule_local,
        "shifted": shifted,
        "skipped": skipped,
    }


def items_of(resp: httpx.Response) -> list[dict[str, Any]]:
    assert resp.status_code == 200, resp.text
    items = resp.json()["items"]
    for item in items:
        assert set(item) == {"run_time_utc", "local", "rule_local", "shifted", "skipped"}
        item["run_time_utc"] = instant(item["run_time_utc"])
    return list(items)


# Daily 02:30 in New York from Friday 2030-03-08, across the spring-forward gap (03-10).
GAP_SHIFT = [
    # 03-08 and 03-09: EST (UTC-5): 02:30 + 5h = 07:30Z.
    expected_item(utc(2030, 3, 8, 7, 30), "2030-03-08T02:30:00-05:00", "2030-03-08T02:30:00"),
    expected_item(utc(2030, 3, 9, 7, 30), "2030-03-09T02:30:00-05:00", "2030-03-09T02:30:00"),
    # 03-10 02:30 does not exist; shift (RFC 5545 §3.3.5) reads it in EST -> 07:30Z, which
    # the clocks then show as 03:30 EDT.
    expected_item(
        utc(2030, 3, 10, 7, 30), "2030-03-10T03:30:00-04:00", "2030-03-10T02:30:00", shifted=True
    ),
    # 03-11: EDT (UTC-4): 02:30 + 4h = 06:30Z.
    expected_item(utc(2030, 3, 11, 6, 30), "2030-03-11T02:30:00-04:00", "2030-03-11T02:30:00"),
]


def test_occurrences_across_a_dst_gap_shifted(client: TestClient, alice: dict[str, str]) -> None:
    rid = create(client, alice, recurring("2030-03-08T02:30"))["id"]

    resp = client.get(f"{URL}/{rid}/occurrences?limit=4", headers=alice)

    assert resp.json()["timezone"] == NY
    assert items_of(resp) == GAP_SHIFT


def test_occurrences_across_a_dst_gap_skipped(client: TestClient, alice: dict[str, str]) -> None:
    # skip (RFC 5545 §3.3.10): 03-10 02:30 is listed, flagged, with no instant.
    rid = create(client, alice, recurring("2030-03-08T02:30", dst={"nonexistent": "skip"}))["id"]

    items = items_of(client.get(f"{URL}/{rid}/occurrences?limit=5", headers=alice))

    assert len(items) == 5
    assert items[0:2] == GAP_SHIFT[0:2]
    skipped = items[2]
    assert skipped["run_time_utc"] is None
    assert (skipped["skipped"], skipped["shifted"]) == (True, False)
    assert skipped["rule_local"] == "2030-03-10T02:30:00"
    assert skipped["local"].startswith("2030-03-10T02:30")
    assert items[3] == GAP_SHIFT[3]
    # 03-12 02:30 EDT = 06:30Z.
    assert items[4] == expected_item(
        utc(2030, 3, 12, 6, 30), "2030-03-12T02:30:00-04:00", "2030-03-12T02:30:00"
    )


@pytest.mark.parametrize(
    ("ambiguous", "on_the_day"),
    [
        # 2030-11-03 01:30 is 05:30Z (EDT, UTC-4) and 06:30Z (EST, UTC-5).
        ("first", [(utc(2030, 11, 3, 5, 30), "2030-11-03T01:30:00-04:00")]),
        ("last", [(utc(2030, 11, 3, 6, 30), "2030-11-03T01:30:00-05:00")]),
        (
            "both",
            [
                (utc(2030, 11, 3, 5, 30), "2030-11-03T01:30:00-04:00"),
                (utc(2030, 11, 3, 6, 30), "2030-11-03T01:30:00-05:00"),
            ],
        ),
    ],
)
def test_occurrences_across_a_dst_overlap(
    client: TestClient,
    alice: dict[str, str],
    ambiguous: str,
    on_the_day: list[tuple[datetime, str]],
) -> None:
    rid = create(client, alice, recurring("2030-11-02T01:30", dst={"ambiguous": ambiguous}))["id"]

    items = items_of(client.get(f"{URL}/{rid}/occurrences?limit=5", headers=alice))

    # 11-02 01:30 EDT = 05:30Z; after the overlap, 01:30 EST = 06:30Z each day.
    expected = [
        expected_item(utc(2030, 11, 2, 5, 30), "2030-11-02T01:30:00-04:00", "2030-11-02T01:30:00")
    ]
    expected += [expected_item(t, lo, "2030-11-03T01:30:00") for t, lo in on_the_day]
    for day in (4, 5, 6):
        expected.append(
            expected_item(
                utc(2030, 11, day, 6, 30),
                f"2030-11-{day:02d}T01:30:00-05:00",
                f"2030-11-{day:02d}T01:30:00",
            )
        )
    assert items == expected[:5]


def test_occurrences_in_a_30_minute_dst_zone(client: TestClient, alice: dict[str, str]) -> None:
    # Australia/Lord_Howe, daily 02:15 from 2030-10-05 (LHST, UTC+10:30 -> 15:45Z the day
    # before). 10-06 02:15 is in the 02:00-02:30 gap: shifted, read in LHST -> 10-05 15:45Z,
    # shown as 02:45 LHDT (+11:00). 10-07 02:15 LHDT = 10-06 15:15Z.
    body = recurring("2030-10-05T02:15", timezone="Australia/Lord_Howe")
    rid = create(client, alice, body)["id"]

    items = items_of(client.get(f"{URL}/{rid}/occurrences?limit=3", headers=alice))

    assert items == [
        expected_item(utc(2030, 10, 4, 15, 45), "2030-10-05T02:15:00+10:30", "2030-10-05T02:15:00"),
        expected_item(
            utc(2030, 10, 5, 15, 45),
            "2030-10-06T02:45:00+11:00",
            "2030-10-06T02:15:00",
            shifted=True,
        ),
        expected_item(utc(2030, 10, 6, 15, 15), "2030-10-07T02:15:00+11:00", "2030-10-07T02:15:00"),
    ]


def test_occurrences_start_at_next_run_and_respect_exdates(
    client: TestClient, alice: dict[str, str]
) -> None:
    # Daily 09:00 EDT from the past, 06-02 excluded: 06-01, 06-03, 06-04 at 13:00Z.
    rid = create(client, alice, recurring(exdates=["2029-06-02T09:00"]))["id"]

    items = items_of(client.get(f"{URL}/{rid}/occurrences?limit=3", headers=alice))

    assert [i["run_time_utc"] for i in items] == [
        utc(2029, 6, 1, 13, 0),
        utc(2029, 6, 3, 13, 0),
        utc(2029, 6, 4, 13, 0),
    ]
    assert [i["local"] for i in items] == [
        "2029-06-01T09:00:00-04:00",
        "2029-06-03T09:00:00-04:00",
        "2029-06-04T09:00:00-04:00",
    ]


def test_occurrences_default_limit_and_rule_end(client: TestClient, alice: dict[str, str]) -> None:
    daily = create(client, alice, recurring())["id"]
    counted = create(client, alice, recurring("2029-06-01T09:00", "FREQ=DAILY;COUNT=3"))["id"]

    default = items_of(client.get(f"{URL}/{daily}/occurrences", headers=alice))
    ended = items_of(client.get(f"{URL}/{counted}/occurrences?limit=10", headers=alice))

    # Without ?limit= the documented default applies (the OpenAPI description at /docs).
    spec = client.get("/openapi.json").json()
    params = spec["paths"][f"{URL}/{{reminder_id}}/occurrences"]["get"]["parameters"]
    documented = next(p for p in params if p["name"] == "limit")["schema"]["default"]
    assert len(default) == documented
    # COUNT=3: only three exist (06-01..06-03 at 13:00Z).
    assert [i["run_time_utc"] for i in ended] == [utc(2029, 6, d, 13, 0) for d in (1, 2, 3)]


def test_occurrences_of_a_profile_zone_reminder(client: TestClient, token_for: TokenFor) -> None:
    bob = bearer(token_for("bob"))
    rid = create(
        client, bob, {"title": "x", "start_local": "2029-05-01T09:00", "rrule": "FREQ=DAILY"}
    )["id"]

    resp = client.get(f"{URL}/{rid}/occurrences?limit=1", headers=bob)

    assert resp.json()["timezone"] == "Europe/Paris"
    # 2029-06-02 09:00 CEST = 07:00Z.
    assert items_of(resp) == [
        expected_item(utc(2029, 6, 2, 7, 0), "2029-06-02T09:00:00+02:00", "2029-06-02T09:00:00")
    ]


@pytest.mark.parametrize("final", ["cancelled", "completed"])
def test_occurrences_of_a_finished_reminder_are_empty(
    client: TestClient, db: Engine, alice: dict[str, str], final: str
) -> None:
    rid = create(client, alice, recurring())["id"]
    if final == "cancelled":
        assert client.delete(f"{URL}/{rid}", headers=alice).status_code == 200
    else:
        set_completed(db, rid)

    resp = client.get(f"{URL}/{rid}/occurrences?limit=5", headers=alice)

    assert resp.status_code == 200, resp.text
    assert resp.json()["items"] == []


@pytest.mark.parametrize("limit", ["0", "101", "-1", "ten"])
def test_occurrences_limit_out_of_range_is_422(
    client: TestClient, alice: dict[str, str], limit: str
) -> None:
    rid = create(client, alice, recurring())["id"]

    resp = client.get(f"{URL}/{rid}/occurrences?limit={limit}", headers=alice)

    assert_problem(resp, 422, "limit")


def test_occurrences_limit_100_is_accepted(client: TestClient, alice: dict[str, str]) -> None:
    rid = create(client, alice, recurring())["id"]

    items = items_of(client.get(f"{URL}/{rid}/occurrences?limit=100", headers=alice))

    assert len(items) == 100
    times = [i["run_time_utc"] for i in items]
    assert times == sorted(times)
    assert len(set(times)) == 100


def test_occurrences_of_another_users_reminder_is_404(
    client: TestClient, alice: dict[str, str], token_for: TokenFor
) -> None:
    rid = create(client, alice, recurring())["id"]

    resp = client.get(f"{URL}/{rid}/occurrences", headers=bearer(token_for("bob")))

    assert_problem(resp, 404)


# --------------------------------------------------------------------------------------
# 6. POST /v1/occurrences:preview (a schedule that is not saved)
# --------------------------------------------------------------------------------------


def test_preview_has_the_same_shape_and_stores_nothing(
    client: TestClient, db: Engine, alice: dict[str, str]
) -> None:
    body = {"start_local": "2030-03-08T02:30", "timezone": NY, "rrule": "FREQ=DAILY", "limit": 4}

    resp = client.post(PREVIEW, json=body, headers=alice)

    assert resp.json()["timezone"] == NY
    assert items_of(resp) == GAP_SHIFT
    assert table_counts(db) == {"delivery_log": 0, "outbox": 0, "queue_messages": 0, "reminders": 0}


def test_preview_starts_from_now(client: TestClient, alice: dict[str, str]) -> None:
    # Daily 09:00 from the past: today's 09:00 EDT (13:00Z) is the first at or after NOW.
    body = {"start_local": "2029-05-01T09:00", "timezone": NY, "rrule": "FREQ=DAILY", "limit": 2}

    items = items_of(client.post(PREVIEW, json=body, headers=alice))

    assert [i["run_time_utc"] for i in items] == [utc(2029, 6, 1, 13, 0), utc(2029, 6, 2, 13, 0)]


def test_preview_skip_and_all_day_and_profile_zone(client: TestClient, token_for: TokenFor) -> None:
    bob = bearer(token_for("bob"))
    # Paris, all-day daily from 2030-03-30 (09:00 local): 03-30 09:00 CET = 08:00Z;
    # 03-31 (the EU change day, 09:00 is after it) 09:00 CEST = 07:00Z.
    all_day = items_of(
        client.post(
            PREVIEW,
            json={"start_local": "2030-03-30", "all_day": True, "rrule": "FREQ=DAILY", "limit": 2},
            headers=bob,
        )
    )
    # Paris, daily 02:30 with skip from 2030-03-30: 03-30 02:30 CET = 01:30Z; 03-31 skipped;
    # 04-01 02:30 CEST = 00:30Z.
    skip = items_of(
        client.post(
            PREVIEW,
            json={
                "start_local": "2030-03-30T02:30",
                "rrule": "FREQ=DAILY",
                "dst": {"nonexistent": "skip"},
                "limit": 3,
            },
            headers=bob,
        )
    )

    assert all_day == [
        expected_item(utc(2030, 3, 30, 8, 0), "2030-03-30T09:00:00+01:00", "2030-03-30T09:00:00"),
        expected_item(utc(2030, 3, 31, 7, 0), "2030-03-31T09:00:00+02:00", "2030-03-31T09:00:00"),
    ]
    assert [i["run_time_utc"] for i in skip] == [
        utc(2030, 3, 30, 1, 30),
        None,
        utc(2030, 4, 1, 0, 30),
    ]
    assert [i["skipped"] for i in skip] == [False, True, False]


@pytest.mark.parametrize(
    ("body", "field"),
    [
        ({"start_local": "2030-07-01T09:00", "timezone": NY, "rrule": "FREQ=MINUTELY"}, "rrule"),
        (
            {"start_local": "2030-07-01T09:00", "timezone": NY, "rrule": "FREQ=DAILY;INTERVAL=0"},
            "rrule",
        ),
        ({"start_local": "2030-07-01T09:00", "timezone": "Mars/Olympus"}, "timezone"),
        ({"start_local": "tomorrow", "timezone": NY}, "start_local"),
        ({"start_local": "2030-07-01T09:00", "timezone": NY, "limit": 0}, "limit"),
        ({"start_local": "2030-07-01T09:00", "timezone": NY, "limit": 101}, "limit"),
        ({"start_local": "2030-07-01T09:00", "timezone": NY, "colour": "red"}, "colour"),
        ({"timezone": NY}, "start_local"),
    ],
    ids=[
        "minutely",
        "interval-0",
        "timezone",
        "start",
        "limit-0",
        "limit-101",
        "unknown",
        "missing",
    ],
)
def test_invalid_preview_is_422(
    client: TestClient, db: Engine, alice: dict[str, str], body: dict[str, Any], field: str
) -> None:
    resp = client.post(PREVIEW, json=body, headers=alice)

    assert_problem(resp, 422, field)
    assert table_counts(db)["reminders"] == 0


# --- authentication ---------------------------------------------------------------------


def assert_unauthorized(resp: httpx.Response) -> None:
    assert_problem(resp, 401)
    assert resp.headers["www-authenticate"].startswith("Bearer")  # RFC 6750 §3


@pytest.mark.parametrize(
    "content",
    [
        b'{"start_local":',
        b"\xff",
        json.dumps({"start_local": "2030-07-01T09:00", "rrule": "FREQ=SECONDLY"}).encode(),
        json.dumps({"colour": "red"}).encode(),
    ],
    ids=["malformed-json", "not-utf8", "invalid-rule", "unknown-field"],
)
def test_unauthenticated_preview_is_401(client: TestClient, content: bytes) -> None:
    resp = client.post(PREVIEW, content=content, headers={"Content-Type": "application/json"})

    assert_unauthorized(resp)


@pytest.mark.parametrize(
    ("method", "suffix", "content"),
    [
        ("PATCH", "", b'{"title":'),
        ("PATCH", "", json.dumps({"title": "stolen"}).encode()),
        ("POST", "/pause", None),
        ("POST", "/resume", None),
        ("GET", "/occurrences?limit=0", None),
        ("GET", "/occurrences", None),
    ],
    ids=["patch-malformed", "patch", "pause", "resume", "occurrences-bad-limit", "occurrences"],
)
def test_unauthenticated_calls_are_401_and_change_nothing(
    client: TestClient,
    db: Engine,
    alice: dict[str, str],
    method: str,
    suffix: str,
    content: bytes | None,
) -> None:
    rid = create(client, alice, recurring())["id"]
    before = row(db, rid)

    resp = client.request(
        method,
        f"{URL}/{rid}{suffix}",
        content=content,
        headers={"Content-Type": "application/json", "If-Match": '"1"'},
    )

    assert_unauthorized(resp)
    assert row(db, rid) == before


def test_patch_of_one_policy_field_keeps_the_others(
    client: TestClient, alice: dict[str, str]
) -> None:
    body = {
        **REC,
        "dst": {"nonexistent": "skip", "ambiguous": "last"},
        "misfire": {"policy": "skip", "max_lateness_s": 600},
    }
    created = create(client, alice, body)

    resp = client.patch(
        f"{URL}/{created['id']}",
        json={"dst": {"ambiguous": "both"}, "misfire": {"max_lateness_s": 120}},
        headers=alice,
    )

    assert resp.status_code == 200, resp.text
    assert resp.json()["dst"] == {"nonexistent": "skip", "ambiguous": "both"}
    assert resp.json()["misfire"] == {"policy": "skip", "max_lateness_s": 120}


def test_an_all_day_reminder_made_timed_keeps_its_fire_time(
    client: TestClient, alice: dict[str, str]
) -> None:
    # All-day reminders fire at 09:00 local by default; turning all_day off without a new
    # start_local keeps 09:00 (2030-07-01T09:00 EDT = 13:00Z), not midnight.
    created = create(
        client,
        alice,
        {"title": "t", "start_local": "2030-07-01", "all_day": True, "rrule": "FREQ=DAILY"},
    )

    resp = client.patch(f"{URL}/{created['id']}", json={"all_day": False}, headers=alice)

    assert resp.status_code == 200, resp.text
    assert resp.json()["start_local"] == "2030-07-01T09:00:00"
    assert instant(resp.json()["next_run_utc"]) == utc(2030, 7, 1, 13, 0, 0)


@pytest.mark.parametrize(
    ("method", "path"), [("POST", "/pause"), ("POST", "/resume"), ("DELETE", "")]
)
def test_state_changes_honour_if_match(
    client: TestClient, alice: dict[str, str], method: str, path: str
) -> None:
    # RFC 9110 §13.1.1: a stale entity tag answers 412 and changes nothing; the current
    # one lets the change through (new-user trial: pause ignored a stale If-Match).
    rid = create(client, alice, recurring())["id"]
    if path == "/resume":
        client.post(f"{URL}/{rid}/pause", headers=alice)
    before = client.get(f"{URL}/{rid}", headers=alice)
    version = before.headers["ETag"]

    stale = client.request(method, f"{URL}/{rid}{path}", headers={**alice, "If-Match": '"99"'})

    assert stale.status_code == 412, stale.text
    assert client.get(f"{URL}/{rid}", headers=alice).json() == before.json()
    ok = client.request(method, f"{URL}/{rid}{path}", headers={**alice, "If-Match": version})
    assert ok.status_code == 200, ok.text
    expected = {"/pause": "paused", "/resume": "pending", "": "cancelled"}[path]
    assert ok.json()["status"] == expected
