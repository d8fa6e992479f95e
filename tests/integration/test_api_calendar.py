"""Issue 14 through the REST API: exclusions that stay true when a reminder moves,
previews from any instant, refused query parameters and strict booleans.

Expected values come from the issue text, RFC 5545 (§3.3.10 RRULE, §3.8.5.1 EXDATE) and
the Gregorian calendar: 2026-12-01 is a Tuesday, 2026-12-25 a Friday, 2027-01-05 a
Tuesday. Europe/Paris is CET (UTC+1) in December and January, so 08:30 local is 07:30Z
and 09:00 local is 08:00Z; its summer time starts on 2027-03-28 (last Sunday of March),
02:00 CET -> 03:00 CEST (UTC+2).
"""

from __future__ import annotations

from datetime import datetime
from typing import Any

import pytest
from fastapi.testclient import TestClient
from sqlalchemy import Engine, text

from reminder_core.settings import Settings
from tests.conftest import table_counts, utc
from tests.integration.api_support import PROBLEM_JSON, URL, Clock, TokenFor, bearer, build_app

PREVIEW = "/v1/occurrences:preview"
# A Monday morning before the Standup's start (the README's example, docs/api.md).
BEFORE_START = utc(2026, 11, 30, 12, 0)
STANDUP = {
    "title": "Standup",
    "start_local": "2026-12-01T08:30",
    "timezone": "Europe/Paris",
    "rrule": "FREQ=WEEKLY;BYDAY=MO,TU,WE,TH,FR",
    "exdates": ["2026-12-25T08:30"],
}
SCHEDULE = {k: v for k, v in STANDUP.items() if k != "title"}  # a preview body


@pytest.fixture
def client(db: Engine, settings: Settings) -> Any:
    with TestClient(build_app(settings, db, Clock(BEFORE_START))) as c:
        yield c


@pytest.fixture
def alice(token_for: TokenFor) -> dict[str, str]:
    return bearer(token_for("alice"))


def problem_of(resp: Any, status: int, field: str) -> dict[str, Any]:
    assert resp.status_code == status, resp.text
    assert resp.headers["content-type"].split(";")[0] == PROBLEM_JSON
    problem: dict[str, Any] = resp.json()
    assert field in [e["field"] for e in problem["errors"]], problem
    return problem


def locals_of(client: TestClient, headers: dict[str, str], reminder_id: str) -> list[str]:
    resp = client.get(f"{URL}/{reminder_id}/occurrences?limit=100", headers=headers)
    assert resp.status_code == 200, resp.text
    return [item["rule_local"] for item in resp.json()["items"]]


def test_moving_the_standup_refuses_to_drop_its_exclusion(
    client: TestClient, db: Engine, alice: dict[str, str]
) -> None:
    # Issue 14, item 5: PATCH start_local 08:30 -> 09:00 kept the 08:30 exclusion, which
    # then matched nothing, and Christmas fired at 09:00.
    created = client.post(URL, json=STANDUP, headers=alice)
    assert created.status_code == 201, created.text
    reminder = created.json()
    assert "2026-12-25T08:30:00" not in locals_of(client, alice, reminder["id"])
    before = table_counts(db)

    resp = client.patch(
        f"{URL}/{reminder['id']}", json={"start_local": "2026-12-01T09:00"}, headers=alice
    )

    problem = problem_of(resp, 422, "exdates")
    assert "2026-12-25T08:30" in problem["detail"]
    assert "09:00" in problem["detail"]  # what the new schedule does that day
    assert table_counts(db) == before
    unchanged = client.get(f"{URL}/{reminder['id']}", headers=alice).json()
    assert unchanged["version"] == reminder["version"]
    assert unchanged["start_local"] == "2026-12-01T08:30:00"


def test_moving_the_standup_with_its_exclusion_never_fires_on_christmas(
    client: TestClient, alice: dict[str, str]
) -> None:
    reminder = client.post(URL, json=STANDUP, headers=alice).json()

    resp = client.patch(
        f"{URL}/{reminder['id']}",
        json={"start_local": "2026-12-01T09:00", "exdates": ["2026-12-25T09:00"]},
        headers=alice,
    )

    assert resp.status_code == 200, resp.text
    assert resp.json()["exdates"] == ["2026-12-25T09:00:00"]
    listed = locals_of(client, alice, reminder["id"])
    # Weekdays from Tuesday 2026-12-01 at 09:00: 18 of them up to Thursday 12-24, then
    # Monday 12-28; never Friday 12-25.
    assert listed[0] == "2026-12-01T09:00:00"
    assert "2026-12-24T09:00:00" in listed
    assert "2026-12-28T09:00:00" in listed
    assert not any(item.startswith("2026-12-25") for item in listed)


@pytest.mark.parametrize(
    ("change", "kept"),
    [
        # The rule's days change but 2026-12-25T08:30 (a Friday) is still an occurrence:
        # the exclusion is kept as it is.
        pytest.param(
            {"rrule": "FREQ=WEEKLY;BYDAY=TU,FR"}, ["2026-12-25T08:30:00"], id="still-true"
        ),
        # The start moves to 2027-01-04 (a Monday), after Christmas 2026: that exclusion
        # can never fire again and is dropped (docs/api.md, "Exclusions").
        pytest.param({"start_local": "2027-01-04T08:30"}, [], id="before-a-later-start"),
    ],
)
def test_a_change_keeps_the_exclusions_that_stay_true(
    client: TestClient, alice: dict[str, str], change: dict[str, str], kept: list[str]
) -> None:
    reminder = client.post(URL, json=STANDUP, headers=alice).json()

    resp = client.patch(f"{URL}/{reminder['id']}", json=change, headers=alice)

    assert resp.status_code == 200, resp.text
    assert resp.json()["exdates"] == kept
    assert not set(kept) & set(locals_of(client, alice, reminder["id"]))


def test_an_exclusion_the_rule_never_reaches_is_422_on_create(
    client: TestClient, db: Engine, alice: dict[str, str]
) -> None:
    # Issue 14: exdates ["2027-01-05T09:00"] on the 08:30 rule can never match.
    before = table_counts(db)
    body = {**STANDUP, "exdates": ["2027-01-05T09:00"]}

    problem = problem_of(client.post(URL, json=body, headers=alice), 422, "exdates[0]")

    assert "2027-01-05T09:00" in problem["detail"]
    assert "08:30" in problem["detail"]
    assert table_counts(db) == before


@pytest.mark.parametrize(
    ("rrule", "exdate", "why"),
    [
        # COUNT=3 from Tuesday 2026-12-01: Dec 1, 2, 3; Friday Dec 4 is not an instance.
        ("FREQ=WEEKLY;BYDAY=MO,TU,WE,TH,FR;COUNT=3", "2026-12-04T08:30", "after COUNT"),
        # UNTIL 2026-12-10 08:00Z: the last instance is Wednesday Dec 9.
        ("FREQ=DAILY;UNTIL=20261210T080000Z", "2026-12-11T08:30", "after UNTIL"),
        ("FREQ=DAILY", "2026-11-30T08:30", "before the start"),
        # Saturday 2026-12-05 is no weekday.
        ("FREQ=WEEKLY;BYDAY=MO,TU,WE,TH,FR", "2026-12-05T08:30", "not on the rule's days"),
    ],
)
def test_exclusions_that_match_no_instance_are_422(
    client: TestClient, alice: dict[str, str], rrule: str, exdate: str, why: str
) -> None:
    body = {**STANDUP, "rrule": rrule, "exdates": [exdate]}
    problem = problem_of(client.post(URL, json=body, headers=alice), 422, "exdates[0]")
    assert exdate in problem["detail"], why


def test_preview_from_any_instant(client: TestClient, alice: dict[str, str]) -> None:
    # Issue 14, item 6: "March next year" without paging. Weekdays at 08:30 Paris from
    # 2027-03-25 (a Thursday): Thu 25, Fri 26 (CET, 07:30Z), Mon 29 (CEST since Sunday
    # the 28th, so 06:30Z).
    body = {**SCHEDULE, "from": "2027-03-25T00:00:00Z", "limit": 3}

    resp = client.post(PREVIEW, json=body, headers=alice)

    assert resp.status_code == 200, resp.text
    items = resp.json()["items"]
    assert [i["rule_local"] for i in items] == [
        "2027-03-25T08:30:00",
        "2027-03-26T08:30:00",
        "2027-03-29T08:30:00",
    ]
    assert [datetime.fromisoformat(i["run_time_utc"]) for i in items] == [
        utc(2027, 3, 25, 7, 30),
        utc(2027, 3, 26, 7, 30),
        utc(2027, 3, 29, 6, 30),
    ]


def test_preview_from_the_past(client: TestClient, alice: dict[str, str]) -> None:
    # A rule that ended before now can still be looked at from a past instant.
    body = {**SCHEDULE, "start_local": "2020-01-06T08:30", "exdates": [],
            "rrule": "FREQ=WEEKLY;BYDAY=MO;COUNT=2", "from": "2020-01-01T00:00Z"}  # fmt: skip

    resp = client.post(PREVIEW, json=body, headers=alice)

    assert resp.status_code == 200, resp.text
    # Mondays 2020-01-06 and 2020-01-13.
    assert [i["rule_local"] for i in resp.json()["items"]] == [
        "2020-01-06T08:30:00",
        "2020-01-13T08:30:00",
    ]


@pytest.mark.parametrize(
    "value",
    [
        "2027-03-25T00:00:00",  # no offset: not an instant
        "2027-03-25",
        # Found by the break-it trial: the ends of the datetime range overflowed into a
        # 500, and numbers were read as Unix timestamps.
        "9999-12-31T23:59:59Z",
        "0001-01-01T00:00:00Z",
        "9999-12-31T22:59:59-02:00",
        20300601,
        1.9e9,
        "1900000000",
        True,
    ],
)
def test_preview_from_must_be_an_instant_in_range(
    client: TestClient, alice: dict[str, str], value: object
) -> None:
    body = {**SCHEDULE, "from": value}
    problem_of(client.post(PREVIEW, json=body, headers=alice), 422, "from")


@pytest.mark.parametrize(
    ("method", "path", "name"),
    [
        ("POST", PREVIEW + "?limit=100000", "limit"),
        ("GET", URL + "?limt=5", "limt"),
    ],
)
def test_unknown_query_parameters_are_422(
    client: TestClient, db: Engine, alice: dict[str, str], method: str, path: str, name: str
) -> None:
    # Issue 14, item 6: `?limit=100000` on the preview was silently ignored.
    before = table_counts(db)
    resp = client.request(method, path, json=SCHEDULE if method == "POST" else None, headers=alice)
    problem = problem_of(resp, 422, name)
    assert "not a query parameter" in problem["detail"]
    assert table_counts(db) == before


@pytest.mark.parametrize("value", ["yes", "true", 1, "1"])
def test_all_day_must_be_a_json_boolean(
    client: TestClient, db: Engine, alice: dict[str, str], value: object
) -> None:
    # Issue 14, item 7: "all_day": "yes" was accepted as true.
    before = table_counts(db)
    body = {"title": "Bins", "start_local": "2026-12-02", "timezone": "Europe/Paris",
            "rrule": "FREQ=WEEKLY", "all_day": value}  # fmt: skip
    problem_of(client.post(URL, json=body, headers=alice), 422, "all_day")
    assert table_counts(db) == before


def test_a_trailing_semicolon_is_accepted(client: TestClient, alice: dict[str, str]) -> None:
    # Issue 14, item 7: common in the wild; stored in canonical form without it.
    resp = client.post(URL, json={**STANDUP, "rrule": "FREQ=WEEKLY;BYDAY=MO,TU,WE,TH,FR;"},
                       headers=alice)  # fmt: skip
    assert resp.status_code == 201, resp.text
    assert resp.json()["rrule"] == "FREQ=WEEKLY;BYDAY=MO,TU,WE,TH,FR"


def test_a_schedule_change_drops_the_count_progress(
    client: TestClient, db: Engine, alice: dict[str, str]
) -> None:
    # The progress counts instances of the old rule (recurrence.CountProgress): after a
    # PATCH of the rule it would count the wrong ones, so it is cleared.
    body = {**STANDUP, "rrule": "FREQ=DAILY;COUNT=10", "exdates": []}
    reminder = client.post(URL, json=body, headers=alice).json()
    kept = '{"local": "2026-12-01T08:30:00", "counted": 0, "zone": "Europe/Paris"}'
    with db.begin() as conn:
        conn.execute(
            text("UPDATE reminders SET count_progress = CAST(:p AS jsonb) WHERE id = :id"),
            {"p": kept, "id": reminder["id"]},
        )

    resp = client.patch(
        f"{URL}/{reminder['id']}", json={"rrule": "FREQ=DAILY;COUNT=5"}, headers=alice
    )

    assert resp.status_code == 200, resp.text
    with db.connect() as conn:
        stored = conn.execute(
            text("SELECT count_progress FROM reminders WHERE id = :id"), {"id": reminder["id"]}
        ).scalar_one()
    assert stored is None
