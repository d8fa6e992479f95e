"""Issue 17, "Calendars in and out": the per-user iCalendar feed and the .ics import,
through the REST API on the real database.

Sources of the expected values: RFC 5545 (§3.3.5: a local time skipped by a DST change
is read with the offset before the gap, a repeated one as its first reading; §3.8.5.1:
EXDATE removes the instance that starts at it; §3.3.10 COUNT) and the zones' rules:
America/New_York leaves summer time on the first Sunday of November (2029-11-04, 02:00
EDT -> 01:00 EST) and enters it on the second Sunday of March (2030-03-10, 02:00 EST ->
03:00 EDT); Europe/London enters BST on the last Sunday of March (2030-03-31, 01:00 GMT
-> 02:00 BST); Europe/Paris is CET (UTC+1) in December and January. 2029-12-03 is a
Monday. The feed is also expanded by recurring-ical-events (written by others), which
must give the instants of our own preview.
"""

from __future__ import annotations

import asyncio
import logging
from datetime import UTC, datetime, timedelta
from typing import Any

import icalendar
import pytest
import recurring_ical_events
from fastapi.testclient import TestClient
from prometheus_client import REGISTRY
from sqlalchemy import Engine

from reminder_core.settings import Settings
from tests.conftest import table_counts, utc
from tests.integration.api_support import PROBLEM_JSON, URL, Clock, TokenFor, bearer, build_app

FEED = "/v1/calendar-feed"
IMPORT = "/v1/reminders:import"
PREVIEW = "/v1/occurrences:preview"
ICS = {"Content-Type": "text/calendar"}

#: The test set, each with its instants derived by hand (module docstring).
CASES: dict[str, tuple[dict[str, Any], list[datetime]]] = {
    # Fall-back night: 01:30 happens twice on 2029-11-04; the first reading (EDT, -4).
    "ny-fall-back": (
        {"start_local": "2029-11-02T01:30", "timezone": "America/New_York",
         "rrule": "FREQ=DAILY;COUNT=5"},
        [utc(2029, 11, 2, 5, 30), utc(2029, 11, 3, 5, 30), utc(2029, 11, 4, 5, 30),
         utc(2029, 11, 5, 6, 30), utc(2029, 11, 6, 6, 30)],
    ),
    # Spring-forward night: 02:30 does not exist on 2030-03-10; read with EST (-5).
    "ny-spring-forward": (
        {"start_local": "2030-03-09T02:30", "timezone": "America/New_York",
         "rrule": "FREQ=DAILY;COUNT=3"},
        [utc(2030, 3, 9, 7, 30), utc(2030, 3, 10, 7, 30), utc(2030, 3, 11, 6, 30)],
    ),
    # London's gap: 01:30 does not exist on 2030-03-31; read with GMT (+0).
    "london-gap": (
        {"start_local": "2030-03-30T01:30", "timezone": "Europe/London",
         "rrule": "FREQ=DAILY;COUNT=3"},
        [utc(2030, 3, 30, 1, 30), utc(2030, 3, 31, 1, 30), utc(2030, 4, 1, 0, 30)],
    ),
    # Sundays at 09:00 across the change: GMT then BST.
    "london-weekly": (
        {"start_local": "2030-03-24T09:00", "timezone": "Europe/London",
         "rrule": "FREQ=WEEKLY;COUNT=3"},
        [utc(2030, 3, 24, 9, 0), utc(2030, 3, 31, 8, 0), utc(2030, 4, 7, 8, 0)],
    ),
    # Six Mondays, two excluded (Christmas Eve and New Year's Eve).
    "paris-exdates": (
        {"start_local": "2029-12-03T08:30", "timezone": "Europe/Paris",
         "rrule": "FREQ=WEEKLY;BYDAY=MO;COUNT=6",
         "exdates": ["2029-12-24T08:30", "2029-12-31T08:30"]},
        [utc(2029, 12, 3, 7, 30), utc(2029, 12, 10, 7, 30), utc(2029, 12, 17, 7, 30),
         utc(2030, 1, 7, 7, 30)],
    ),
    # One-time, in the profile's zone (alice: America/New_York, EDT in July).
    "one-time-profile-zone": (
        {"start_local": "2030-07-01T09:00"},
        [utc(2030, 7, 1, 13, 0)],
    ),
}  # fmt: skip

WINDOW = (datetime(2029, 6, 1), datetime(2031, 1, 1))


@pytest.fixture
def alice(token_for: TokenFor) -> dict[str, str]:
    return bearer(token_for("alice"))


@pytest.fixture
def bob(token_for: TokenFor) -> dict[str, str]:
    return bearer(token_for("bob"))


def create_cases(client: TestClient, headers: dict[str, str]) -> dict[str, str]:
    """Title -> id of each reminder of CASES, created for the user of `headers`."""
    ids = {}
    for title, (schedule, _) in CASES.items():
        resp = client.post(URL, json=schedule | {"title": title}, headers=headers)
        assert resp.status_code == 201, resp.text
        ids[title] = resp.json()["id"]
    return ids


def feed_url(client: TestClient, headers: dict[str, str]) -> str:
    resp = client.post(FEED, headers=headers)
    assert resp.status_code == 201, resp.text
    url: str = resp.json()["url"]
    assert url.endswith(".ics")
    return url


def fetch(client: TestClient, url: str) -> bytes:
    resp = client.get(url)  # no bearer: the secret is the credential
    assert resp.status_code == 200, resp.text
    assert resp.headers["content-type"] == "text/calendar; charset=utf-8"
    return resp.content


def expanded(ics: bytes) -> dict[str, list[datetime]]:
    """UID -> the UTC instants recurring-ical-events expands from the feed."""
    calendar = icalendar.Calendar.from_ical(ics)
    found: dict[str, list[datetime]] = {}
    for event in recurring_ical_events.of(calendar).between(*WINDOW):
        found.setdefault(str(event["UID"]), []).append(event["DTSTART"].dt.astimezone(UTC))
    return {uid: sorted(times) for uid, times in found.items()}


def previewed(client: TestClient, headers: dict[str, str], reminder_id: str) -> list[datetime]:
    """Our preview of the stored schedule of a reminder, from before its start."""
    r = client.get(f"{URL}/{reminder_id}", headers=headers).json()
    body = {k: r[k] for k in ("start_local", "timezone", "rrule", "exdates", "all_day", "dst")}
    body = {k: v for k, v in body.items() if v is not None}
    start = datetime.fromisoformat(r["start_local"])
    body |= {"from": (start - timedelta(days=2)).isoformat() + "Z", "limit": 20}
    resp = client.post(PREVIEW, json=body, headers=headers)
    assert resp.status_code == 200, resp.text
    return [datetime.fromisoformat(i["run_time_utc"]) for i in resp.json()["items"]]


def problem_of(resp: Any, status: int) -> dict[str, Any]:
    assert resp.status_code == status, resp.text
    assert resp.headers["content-type"].split(";")[0] == PROBLEM_JSON
    problem: dict[str, Any] = resp.json()
    assert problem["status"] == status
    return problem


# --------------------------------------------------------------------------------------
# The feed
# --------------------------------------------------------------------------------------


def test_feed_expands_to_our_preview_and_the_hand_derived_instants(
    client: TestClient, alice: dict[str, str]
) -> None:
    ids = create_cases(client, alice)
    ics = fetch(client, feed_url(client, alice))

    calendar = icalendar.Calendar.from_ical(ics)
    assert calendar["VERSION"] == "2.0"
    zones = {str(tz["TZID"]) for tz in calendar.walk("VTIMEZONE")}
    assert zones == {"America/New_York", "Europe/London", "Europe/Paris"}
    events = {str(e["UID"]): e for e in calendar.walk("VEVENT")}
    assert set(events) == set(ids.values())
    by_uid = expanded(ics)
    for title, (_, expected) in CASES.items():
        rid = ids[title]
        event = events[rid]
        assert str(event["SUMMARY"]) == title
        (alarm,) = event.walk("VALARM")
        assert str(alarm["ACTION"]) == "DISPLAY"
        assert alarm["TRIGGER"].dt == timedelta(0)  # at the start (RFC 5545 §3.8.6.3)
        assert by_uid[rid] == expected, title
        assert previewed(client, alice, rid) == expected, title


def test_feed_dtstart_keeps_the_stored_zone_and_wall_time(
    client: TestClient, alice: dict[str, str]
) -> None:
    ids = create_cases(client, alice)
    calendar = icalendar.Calendar.from_ical(fetch(client, feed_url(client, alice)))
    events = {str(e["UID"]): e for e in calendar.walk("VEVENT")}
    spring = events[ids["ny-spring-forward"]]
    # The stored wall time, not the shifted one, with its TZID (RFC 5545 §3.3.5).
    assert spring["DTSTART"].params["TZID"] == "America/New_York"
    assert spring["DTSTART"].dt.replace(tzinfo=None) == datetime(2030, 3, 9, 2, 30)
    assert spring["RRULE"].to_ical() == b"FREQ=DAILY;COUNT=3"
    paris = events[ids["paris-exdates"]]
    exdates = (
        [d.dt for group in paris["EXDATE"] for d in group.dts]
        if isinstance(paris["EXDATE"], list)
        else [d.dt for d in paris["EXDATE"].dts]
    )
    assert [(d.replace(tzinfo=None), str(d.tzinfo)) for d in exdates] == [
        (datetime(2029, 12, 24, 8, 30), "Europe/Paris"),
        (datetime(2029, 12, 31, 8, 30), "Europe/Paris"),
    ]


def test_another_users_reminders_never_appear(
    client: TestClient, alice: dict[str, str], bob: dict[str, str]
) -> None:
    ids = create_cases(client, alice)
    bobs = client.post(
        URL, json={"title": "Bob's", "start_local": "2030-01-01T09:00"}, headers=bob
    ).json()["id"]
    alice_uids = {str(e["UID"]) for e in icalendar.Calendar.from_ical(
        fetch(client, feed_url(client, alice))).walk("VEVENT")}  # fmt: skip
    bob_uids = {str(e["UID"]) for e in icalendar.Calendar.from_ical(
        fetch(client, feed_url(client, bob))).walk("VEVENT")}  # fmt: skip
    assert alice_uids == set(ids.values())
    assert bob_uids == {bobs}


def test_cancelled_and_paused_reminders_leave_the_feed(
    client: TestClient, alice: dict[str, str]
) -> None:
    ids = create_cases(client, alice)
    url = feed_url(client, alice)
    assert client.delete(f"{URL}/{ids['london-gap']}", headers=alice).status_code == 200
    assert client.post(f"{URL}/{ids['ny-fall-back']}/pause", headers=alice).status_code == 200
    uids = {str(e["UID"]) for e in icalendar.Calendar.from_ical(fetch(client, url)).walk("VEVENT")}
    assert uids == set(ids.values()) - {ids["london-gap"], ids["ny-fall-back"]}


def test_rotated_and_revoked_secrets_answer_404(
    client: TestClient, db: Engine, alice: dict[str, str]
) -> None:
    first = feed_url(client, alice)
    second = feed_url(client, alice)  # rotation
    assert first != second
    problem = problem_of(client.get(first), 404)
    assert "feed" in problem["detail"]
    fetch(client, second)
    with db.connect() as conn:  # only a digest is stored, never the secret
        stored = (
            conn.exec_driver_sql(
                "select secret_sha256 from calendar_feeds where user_id = %s", ("alice",)
            )
            .scalars()
            .all()
        )
    secret = second.rsplit("/", 1)[1].removesuffix(".ics")
    assert len(stored) == 1
    assert bytes(stored[0]) != secret.encode()
    assert len(bytes(stored[0])) == 32  # SHA-256 (FIPS 180-4): 256 bits
    assert client.delete(FEED, headers=alice).status_code == 204
    problem_of(client.get(second), 404)
    assert client.delete(FEED, headers=alice).status_code == 204  # revoking twice is fine
    problem_of(client.get(f"{FEED}/{'x' * 43}.ics"), 404)  # never made


def test_feed_management_needs_a_bearer(client: TestClient) -> None:
    problem_of(client.post(FEED), 401)
    problem_of(client.delete(FEED), 401)
    problem_of(client.post(IMPORT, content=b"BEGIN:VCALENDAR", headers=ICS), 401)


# --------------------------------------------------------------------------------------
# The import
# --------------------------------------------------------------------------------------


def test_import_of_the_feed_creates_the_same_schedules(
    client: TestClient, alice: dict[str, str], bob: dict[str, str]
) -> None:
    ids = create_cases(client, alice)
    ics = fetch(client, feed_url(client, alice))

    resp = client.post(IMPORT, content=ics, headers=bob | ICS)

    assert resp.status_code == 201, resp.text
    report = resp.json()
    assert report["count"] == len(CASES) == len(report["created"])
    imported = {client.get(f"{URL}/{i}", headers=bob).json()["title"]: i for i in report["created"]}
    assert set(imported) == set(CASES)
    for title, (_, expected) in CASES.items():
        if title == "one-time-profile-zone":
            continue  # exported with alice's zone as its TZID; bob's zone is Paris
        assert previewed(client, bob, imported[title]) == expected, title
        assert previewed(client, bob, imported[title]) == previewed(client, alice, ids[title])
    one_time = client.get(f"{URL}/{imported['one-time-profile-zone']}", headers=bob).json()
    assert (one_time["start_local"], one_time["timezone"]) == (
        "2030-07-01T09:00:00", "America/New_York"
    )  # fmt: skip


def vcalendar(*events: str) -> bytes:
    body = "".join(f"BEGIN:VEVENT\r\n{e.strip()}\r\nEND:VEVENT\r\n" for e in events)
    text = f"BEGIN:VCALENDAR\r\nVERSION:2.0\r\nPRODID:-//tests//EN\r\n{body}END:VCALENDAR\r\n"
    return text.encode()


GOOD = "UID:good-1\r\nDTSTART;TZID=Europe/London:20300105T090000\r\nSUMMARY:Good"


def test_import_with_one_bad_event_stores_nothing(
    client: TestClient, db: Engine, alice: dict[str, str]
) -> None:
    ics = vcalendar(
        GOOD,
        # RFC 5545 §3.3.10: BYWEEKNO "MUST NOT be used when the FREQ rule part is set to
        # anything other than YEARLY".
        "UID:bad-2\r\nDTSTART;TZID=Europe/London:20300105T090000\r\n"
        "RRULE:FREQ=MONTHLY;BYWEEKNO=1\r\nSUMMARY:Bad rule",
        "UID:bad-3\r\nDTSTART:20300105T090000Z\r\nSUMMARY:Bad rdate\r\nRDATE:20300106T090000Z",
        "UID:good-4\r\nDTSTART:20300105T090000Z\r\nSUMMARY:Good in UTC",
    )
    before = table_counts(db)

    problem = problem_of(client.post(IMPORT, content=ics, headers=alice | ICS), 422)

    assert table_counts(db) == before
    fields = [e["field"] for e in problem["errors"]]
    assert fields == ["events[1]", "events[2]"]
    assert "bad-2" in problem["errors"][0]["message"]
    assert "BYWEEKNO" in problem["errors"][0]["message"]
    assert "RDATE" in problem["errors"][1]["message"]


def test_import_refuses_an_unknown_tzid_instead_of_reading_it_floating(
    client: TestClient, db: Engine, alice: dict[str, str]
) -> None:
    # Found by a new user's trial: icalendar leaves an unresolvable TZID's time without a
    # zone, which read as floating would fire in the profile's zone.
    ics = vcalendar("UID:mars\r\nDTSTART;TZID=Mars/Base:20300105T090000\r\nSUMMARY:Mars")
    before = table_counts(db)
    problem = problem_of(client.post(IMPORT, content=ics, headers=alice | ICS), 422)
    assert table_counts(db) == before
    assert problem["errors"][0]["field"] == "events[0]"
    assert "Mars/Base" in problem["errors"][0]["message"]


def test_import_reads_utc_floating_and_all_day_starts(
    client: TestClient, alice: dict[str, str]
) -> None:
    ics = vcalendar(
        "UID:u\r\nDTSTART:20300105T090000Z\r\nSUMMARY:UTC",
        "UID:f\r\nDTSTART:20300105T090000\r\nSUMMARY:Floating",
        "UID:d\r\nDTSTART;VALUE=DATE:20300105\r\nRRULE:FREQ=YEARLY;COUNT=2\r\nSUMMARY:Day",
    )
    resp = client.post(IMPORT, content=ics, headers=alice | ICS)
    assert resp.status_code == 201, resp.text
    got = [client.get(f"{URL}/{i}", headers=alice).json() for i in resp.json()["created"]]
    shapes = [(r["title"], r["start_local"], r["timezone"], r["all_day"]) for r in got]
    assert shapes == [
        ("UTC", "2030-01-05T09:00:00", "UTC", False),  # a UTC time stays in UTC
        ("Floating", "2030-01-05T09:00:00", None, False),  # floating: the profile's zone
        ("Day", "2030-01-05", None, True),
    ]
    # 09:00Z; 09:00 in New York in January (EST, -5) is 14:00Z.
    assert got[0]["next_run_utc"] == "2030-01-05T09:00:00Z"
    assert got[1]["next_run_utc"] == "2030-01-05T14:00:00Z"


@pytest.mark.parametrize(
    ("body", "status"),
    [
        (b"this is not a calendar", 400),
        (b"BEGIN:VCALENDAR\r\nBEGIN:VEVENT\r\n", 400),
        (b"\xff\xfe\x00B", 400),  # not UTF-8
        (b"BEGIN:VCALENDAR\r\nVERSION:2.0\r\nEND:VCALENDAR\r\n", 422),  # no event
        (b"BEGIN:VCALENDAR\r\nEND:VCALENDAR\r\nBEGIN:VCALENDAR\r\nEND:VCALENDAR\r\n", 400),
    ],
)
def test_malformed_ics_is_a_problem_never_a_500(
    client: TestClient, db: Engine, alice: dict[str, str], body: bytes, status: int
) -> None:
    before = table_counts(db)
    problem_of(client.post(IMPORT, content=body, headers=alice | ICS), status)
    assert table_counts(db) == before


def test_broken_event_properties_are_refused_by_name(
    client: TestClient, alice: dict[str, str]
) -> None:
    ics = vcalendar("UID:x\r\nDTSTART:garbage\r\nSUMMARY:Broken", GOOD)
    problem = problem_of(client.post(IMPORT, content=ics, headers=alice | ICS), 422)
    assert [e["field"] for e in problem["errors"]] == ["events[0]"]
    assert "DTSTART" in problem["errors"][0]["message"]


def test_import_needs_text_calendar(client: TestClient, alice: dict[str, str]) -> None:
    plain = alice | {"Content-Type": "text/plain"}
    resp = client.post(IMPORT, content=vcalendar(GOOD), headers=plain)
    problem_of(resp, 415)
    assert resp.headers["accept"] == "text/calendar"


def test_import_limit_of_events(client: TestClient, db: Engine, alice: dict[str, str]) -> None:
    # docs/api.md: at most 500 events per import; 501 minimal events fit in 64 KiB.
    event = "UID:n\r\nDTSTART:20300105T090000Z\r\nSUMMARY:n"
    before = table_counts(db)
    problem = problem_of(
        client.post(IMPORT, content=vcalendar(*[event] * 501), headers=alice | ICS), 422
    )
    assert "500" in problem["detail"]
    assert table_counts(db) == before
    resp = client.post(IMPORT, content=vcalendar(*[event] * 500), headers=alice | ICS)
    assert resp.status_code == 201, resp.text
    assert resp.json()["count"] == 500


# --------------------------------------------------------------------------------------
# Found by a trial of the product (issue 17)
# --------------------------------------------------------------------------------------


def test_a_29_february_start_keeps_the_feed_working(
    client: TestClient, alice: dict[str, str]
) -> None:
    # The feed's VTIMEZONE range ran to "the same date ten years on", which 2042 lacks
    # (the test clock is 2029-06-01: the start is the latest date).
    leap = {"start_local": "2032-02-29T09:00", "timezone": "Europe/London",
            "rrule": "FREQ=YEARLY;COUNT=2", "title": "Leap day"}  # fmt: skip
    made = client.post(URL, json=leap, headers=alice)
    assert made.status_code == 201, made.text
    calendar = icalendar.Calendar.from_ical(fetch(client, feed_url(client, alice)))
    assert [str(e["SUMMARY"]) for e in calendar.walk("VEVENT")] == ["Leap day"]
    assert {str(t["TZID"]) for t in calendar.walk("VTIMEZONE")} == {"Europe/London"}
    # RFC 5545 §3.3.10: a yearly rule on 29 February recurs only in leap years.
    occurrences = recurring_ical_events.of(calendar).between(
        datetime(2032, 1, 1), datetime(2037, 1, 1)
    )
    assert [e["DTSTART"].dt.date().isoformat() for e in occurrences] == [
        "2032-02-29",
        "2036-02-29",
    ]


def test_head_on_the_feed_answers_like_get(client: TestClient, alice: dict[str, str]) -> None:
    url = feed_url(client, alice)
    head = client.head(url)
    assert head.status_code == 200
    assert head.headers["content-type"] == "text/calendar; charset=utf-8"
    assert head.content == b""
    assert client.head(f"{FEED}/{'x' * 43}.ics").status_code == 404


def test_import_skips_a_byte_order_mark_and_titles_an_untitled_event(
    client: TestClient, alice: dict[str, str]
) -> None:
    # Outlook writes a UTF-8 BOM; SUMMARY is optional in a VEVENT (RFC 5545 §3.6.1).
    ics = "\ufeff".encode() + vcalendar(GOOD, "UID:bare\r\nDTSTART:20300105T090000Z")
    resp = client.post(IMPORT, content=ics, headers=alice | ICS)
    assert resp.status_code == 201, resp.text
    titles = [
        client.get(f"{URL}/{i}", headers=alice).json()["title"] for i in resp.json()["created"]
    ]
    assert titles == ["Good", "(no title)"]


def test_import_is_idempotent_on_its_key(
    client: TestClient, db: Engine, alice: dict[str, str], bob: dict[str, str]
) -> None:
    # Found by a trial: the same file posted twice with one Idempotency-Key made every
    # reminder twice. As for POST /v1/reminders: same key and body → the first answer.
    ics = vcalendar(GOOD, "UID:two\r\nDTSTART:20300106T090000Z\r\nSUMMARY:Two")
    keyed = alice | ICS | {"Idempotency-Key": "import-1"}
    first = client.post(IMPORT, content=ics, headers=keyed)
    assert first.status_code == 201, first.text
    assert first.json()["replayed"] is False
    before = table_counts(db)
    again = client.post(IMPORT, content=ics, headers=keyed)
    assert again.status_code == 200, again.text
    assert again.json()["created"] == first.json()["created"]
    assert again.json()["replayed"] is True
    other = vcalendar("UID:x\r\nDTSTART:20300107T090000Z\r\nSUMMARY:Other")
    problem_of(client.post(IMPORT, content=other, headers=keyed), 409)
    assert table_counts(db) == before
    # Another user's key space is their own.
    bobs = client.post(IMPORT, content=ics, headers=keyed | bob)
    assert bobs.status_code == 201, bobs.text


def test_an_import_whose_client_leaves_before_its_body_is_no_server_error(
    db: Engine, settings: Settings, clock: Clock, token_for: TokenFor,
    caplog: pytest.LogCaptureFixture,
) -> None:  # fmt: skip
    """Found by an adversarial trial: a client that timed out while uploading its
    calendar made `request.body()` raise ClientDisconnect, logged as "unhandled error" and
    counted 500 (a 5xx alert for a client's timeout). Now: nothing stored, no error log,
    counted 499 (nginx's "client closed request")."""
    app = build_app(settings, db, clock)
    before = table_counts(db)
    scope = {
        "type": "http", "asgi": {"version": "3.0"}, "http_version": "1.1", "method": "POST",
        "scheme": "http", "path": IMPORT, "raw_path": IMPORT.encode(), "query_string": b"",
        "root_path": "", "client": ("127.0.0.1", 1), "server": ("127.0.0.1", 80),
        "headers": [(b"host", b"t"), (b"content-type", b"text/calendar"),
                    (b"content-length", b"5000"),
                    (b"authorization", f"Bearer {token_for('alice')}".encode())],
    }  # fmt: skip
    answers: list[int] = []

    async def receive() -> dict[str, Any]:
        return {"type": "http.disconnect"}  # the client is gone before any body

    async def send(message: dict[str, Any]) -> None:
        if message["type"] == "http.response.start":
            answers.append(message["status"])

    def requests_counted(status: str) -> float:
        return REGISTRY.get_sample_value(
            "reminders_api_requests_total",
            {"method": "POST", "route": IMPORT, "status": status},
        ) or 0.0  # fmt: skip

    counted_499, counted_500 = requests_counted("499"), requests_counted("500")
    with caplog.at_level(logging.INFO):
        asyncio.run(app(scope, receive, send))
    assert answers == [499]
    assert requests_counted("499") == counted_499 + 1
    assert requests_counted("500") == counted_500
    assert not [r for r in caplog.records if r.levelno >= logging.WARNING]
    assert table_counts(db) == before
