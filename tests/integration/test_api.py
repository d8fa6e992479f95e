"""The REST API of reminder_api against the real database (issue 2; docs/design.md,
"Data model" to "Interfaces").

Every expected value comes from a source named next to it: the issue text, docs/design.md,
RFC 9457 (problem details), RFC 6750 (bearer tokens), RFC 7519 (JWT), RFC 5545 §3.3.5
(local times across DST changes) and the published UTC offsets of the IANA zones used:

- America/New_York: EST = UTC-5, EDT = UTC-4. Since 2007 (US Energy Policy Act of 2005)
  DST starts at 02:00 on the second Sunday of March (2030-03-10) and ends at 02:00 on the
  first Sunday of November (2030-11-03).
- Europe/Paris: CET = UTC+1, CEST = UTC+2 (EU summer time: last Sunday of March to last
  Sunday of October), so July is UTC+2 and January UTC+1.
- Asia/Tokyo: JST = UTC+9 all year (no DST since 1951).

The app runs on a fixed clock (NOW) so that "past" and "future" do not depend on the day
the tests run; NOW is chosen after today's date, so a start_local that is in the past for
the app but in the future for the wall clock proves the app reads its clock, not the
wall clock.
"""

from __future__ import annotations

import base64
import json
import uuid
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from datetime import UTC, datetime, timedelta
from typing import Any

import httpx
import jwt
import pytest
from fastapi.testclient import TestClient
from freezegun import freeze_time
from sqlalchemy import Engine, text

from reminder_core.db.session import make_engine
from reminder_core.settings import Settings
from reminder_core.tokens import mint_token
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
from tests.support.workloads import fresh_database


def instant(value: str) -> datetime:
    """Parse an ISO 8601 instant from a response; it must carry an offset."""
    parsed = datetime.fromisoformat(value)
    assert parsed.tzinfo is not None, f"{value!r} has no UTC offset"
    return parsed


def new_york(start_local: str = "2030-07-01T09:00", **extra: Any) -> dict[str, Any]:
    """A valid one-time reminder body in America/New_York."""
    return {
        "title": "Call the dentist",
        "start_local": start_local,
        "timezone": "America/New_York",
        **extra,
    }


def assert_problem(resp: httpx.Response, status: int, field: str | None = None) -> dict[str, Any]:
    """RFC 9457: problem+json with type, title, status (equal to the HTTP status, §3.1.2)
    and detail; `errors` (our extension member, §3.2) names the field at fault."""
    assert resp.status_code == status, resp.text
    assert resp.headers["content-type"].split(";")[0].strip() == PROBLEM_JSON
    problem = resp.json()
    assert problem["status"] == status
    for member in ("type", "title", "detail"):
        assert isinstance(problem[member], str), member
        assert problem[member], member
    if field is not None:
        # A repeated query parameter is named with its index ("status.0").
        fields = [e["field"] for e in problem["errors"]]
        assert any(f == field or f.startswith(field + ".") for f in fields), problem
    return problem


def row(db: Engine, reminder_id: str | uuid.UUID) -> Any:
    with db.connect() as conn:
        return conn.execute(
            text(
                "SELECT user_id, title, body, start_local, timezone, next_run_utc, status,"
                " version, client_request_id, created_at, updated_at"
                " FROM reminders WHERE id = :id"
            ),
            {"id": uuid.UUID(str(reminder_id))},
        ).one()


def reminder_count(db: Engine) -> int:
    return table_counts(db)["reminders"]


# --------------------------------------------------------------------------------------
# 1. Create a one-time reminder
# --------------------------------------------------------------------------------------


def test_create_with_explicit_zone(client: TestClient, db: Engine, token_for: TokenFor) -> None:
    resp = client.post(
        URL, json=new_york(body="Bring the insurance card"), headers=bearer(token_for("alice"))
    )

    assert resp.status_code == 201, resp.text
    out = resp.json()
    rid = uuid.UUID(out["id"])
    # RFC 9110 §15.3.2: 201 with Location naming the new resource; ETag is the version.
    assert resp.headers["location"] == f"{URL}/{rid}"
    assert resp.headers["etag"] == '"1"'
    assert out["version"] == 1
    assert out["status"] == "pending"
    assert out["title"] == "Call the dentist"
    assert out["body"] == "Bring the insurance card"
    assert out["timezone"] == "America/New_York"
    # start_local is echoed as a local date-time without offset (issue 2).
    echoed = datetime.fromisoformat(out["start_local"])
    assert echoed == datetime(2030, 7, 1, 9, 0)
    assert echoed.tzinfo is None
    # 2030-07-01 is inside US DST: 09:00 EDT (UTC-4) = 13:00Z.
    assert instant(out["next_run_utc"]) == utc(2030, 7, 1, 13, 0)
    assert instant(out["created_at"]) == NOW

    stored = row(db, rid)
    assert stored.user_id == "alice"
    assert stored.title == "Call the dentist"
    assert stored.start_local == datetime(2030, 7, 1, 9, 0)
    assert stored.timezone == "America/New_York"
    assert stored.next_run_utc == utc(2030, 7, 1, 13, 0)
    assert stored.status == "pending"
    assert stored.version == 1
    # One transaction writes the reminder only (docs/design.md, "Producer never waits"):
    # no outbox row, no delivery.
    assert table_counts(db) == {"delivery_log": 0, "outbox": 0, "queue_messages": 0, "reminders": 1}


def test_location_header_resolves_to_the_created_reminder(
    client: TestClient, token_for: TokenFor
) -> None:
    headers = bearer(token_for("alice"))
    created = client.post(URL, json=new_york(), headers=headers)
    assert created.status_code == 201

    fetched = client.get(created.headers["location"], headers=headers)

    assert fetched.status_code == 200
    assert fetched.json() == created.json()


def test_profile_zone_used_when_timezone_omitted(
    client: TestClient, db: Engine, token_for: TokenFor
) -> None:
    # alice follows America/New_York (profile); 2030-01-15 is winter: 09:00 EST = 14:00Z.
    resp = client.post(
        URL,
        json={"title": "Pay rent", "start_local": "2030-01-15T09:00"},
        headers=bearer(token_for("alice")),
    )

    assert resp.status_code == 201, resp.text
    out = resp.json()
    # docs/design.md, "Data model": NULL = follow the profile's zone.
    assert out["timezone"] is None
    assert instant(out["next_run_utc"]) == utc(2030, 1, 15, 14, 0)
    stored = row(db, out["id"])
    assert stored.timezone is None
    assert stored.next_run_utc == utc(2030, 1, 15, 14, 0)


def test_profile_zone_is_per_user(client: TestClient, db: Engine, token_for: TokenFor) -> None:
    # bob follows Europe/Paris; July is CEST (UTC+2): 09:00 local = 07:00Z.
    resp = client.post(
        URL,
        json={"title": "Croissants", "start_local": "2030-07-01T09:00"},
        headers=bearer(token_for("bob")),
    )

    assert resp.status_code == 201, resp.text
    assert instant(resp.json()["next_run_utc"]) == utc(2030, 7, 1, 7, 0)
    assert row(db, resp.json()["id"]).user_id == "bob"


def test_explicit_zone_wins_over_profile(client: TestClient, token_for: TokenFor) -> None:
    # bob's profile says Paris, but a fixed zone is given: Tokyo (UTC+9) 09:00 = 00:00Z.
    resp = client.post(
        URL,
        json={"title": "Call Tokyo", "start_local": "2030-07-01T09:00", "timezone": "Asia/Tokyo"},
        headers=bearer(token_for("bob")),
    )

    assert resp.status_code == 201, resp.text
    assert resp.json()["timezone"] == "Asia/Tokyo"
    assert instant(resp.json()["next_run_utc"]) == utc(2030, 7, 1, 0, 0)


def test_user_without_profile_is_refused_even_with_a_timezone(
    client: TestClient, db: Engine, token_for: TokenFor
) -> None:
    # Without a profile there is no address: every occurrence would fail (new-user trial).
    resp = client.post(
        URL,
        json={"title": "x", "start_local": "2030-07-01T09:00", "timezone": "Asia/Tokyo"},
        headers=bearer(token_for("carol")),
    )

    assert_problem(resp, 422, "user")
    assert reminder_count(db) == 0


@pytest.mark.parametrize("email", ["not an email", "a@example.com\r\nBcc: evil@example.com"])
def test_profile_with_an_unusable_email_is_503_and_stores_nothing(
    client: TestClient, db: Engine, settings: Settings, token_for: TokenFor, email: str
) -> None:
    # New-user trial: such a profile was accepted (201) and the sender then wrote an .eml
    # to "not an email", or failed five times with tracebacks on the CR/LF one.
    # docs/configuration.md, Profile service: no usable email is broken data, 503.
    profiles = settings.effective_profiles_file
    data = json.loads(profiles.read_text())
    data["zoe"] = {"email": email, "timezone": "UTC"}
    profiles.write_text(json.dumps(data))

    resp = client.post(
        URL,
        json={"title": "x", "start_local": "2030-07-01T09:00"},
        headers=bearer(token_for("zoe")),
    )

    problem = assert_problem(resp, 503)
    assert "no usable email" in problem["detail"]
    assert reminder_count(db) == 0


def test_profile_with_an_unknown_zone_is_503_saying_the_profile_is_broken(
    client: TestClient, db: Engine, settings: Settings, token_for: TokenFor
) -> None:
    # New-user trial: "timezone": "Nowhere/Zone" in the profiles file answered 422 naming
    # `timezone`, a field the client never sent. docs/configuration.md, Profile service: broken
    # data is 503 problem+json, never an error of the request, whichever the source.
    profiles = settings.effective_profiles_file
    data = json.loads(profiles.read_text())
    data["zoe"] = {"email": "zoe@example.com", "timezone": "Nowhere/Zone"}
    profiles.write_text(json.dumps(data))

    resp = client.post(
        URL,
        json={"title": "x", "start_local": "2030-07-01T09:00"},
        headers=bearer(token_for("zoe")),
    )

    problem = assert_problem(resp, 503)
    assert problem["type"].endswith("/unavailable")
    assert "profile has an invalid timezone" in problem["detail"]
    assert "Nowhere/Zone" in problem["detail"]
    assert "errors" not in problem  # no request field is at fault
    assert reminder_count(db) == 0


@pytest.mark.parametrize(
    ("start_local", "expected"),
    [
        # Issue 2: start_local to the minute or to the second.
        ("2030-07-01T09:00", utc(2030, 7, 1, 13, 0, 0)),
        ("2030-07-01T09:00:30", utc(2030, 7, 1, 13, 0, 30)),
    ],
)
def test_start_local_to_the_minute_or_second(
    client: TestClient, token_for: TokenFor, start_local: str, expected: datetime
) -> None:
    resp = client.post(URL, json=new_york(start_local), headers=bearer(token_for("alice")))

    assert resp.status_code == 201, resp.text
    assert instant(resp.json()["next_run_utc"]) == expected


def test_start_local_exactly_now_is_accepted(
    client: TestClient, db: Engine, token_for: TokenFor
) -> None:
    # docs/design.md, "next_run_utc": at creation, next_run_utc is the first occurrence
    # *at or after* now. NOW = 12:00Z = 08:00 EDT in New York.
    resp = client.post(URL, json=new_york("2029-06-01T08:00"), headers=bearer(token_for("alice")))

    assert resp.status_code == 201, resp.text
    assert instant(resp.json()["next_run_utc"]) == NOW
    assert row(db, resp.json()["id"]).next_run_utc == NOW


def test_dst_gap_is_shifted_not_refused(
    client: TestClient, db: Engine, token_for: TokenFor
) -> None:
    # 2030-03-10 is the second Sunday of March: New York clocks jump 02:00 EST -> 03:00 EDT,
    # so 02:30 does not exist. RFC 5545 §3.3.5: such a time "is interpreted using the UTC
    # offset before the gap" (EST, UTC-5): 02:30 + 5h = 07:30Z (docs/design.md, "DST
    # policies": default `shift`).
    resp = client.post(URL, json=new_york("2030-03-10T02:30"), headers=bearer(token_for("alice")))

    assert resp.status_code == 201, resp.text
    assert instant(resp.json()["next_run_utc"]) == utc(2030, 3, 10, 7, 30)
    assert row(db, resp.json()["id"]).next_run_utc == utc(2030, 3, 10, 7, 30)


def test_dst_overlap_takes_the_first_occurrence(client: TestClient, token_for: TokenFor) -> None:
    # 2030-11-03 is the first Sunday of November: 01:30 occurs twice in New York, first in
    # EDT (UTC-4) then in EST (UTC-5). RFC 5545 §3.3.5: the value "refers to the first
    # occurrence" (docs/design.md, "DST policies": default `first`): 01:30 + 4h = 05:30Z.
    resp = client.post(URL, json=new_york("2030-11-03T01:30"), headers=bearer(token_for("alice")))

    assert resp.status_code == 201, resp.text
    assert instant(resp.json()["next_run_utc"]) == utc(2030, 11, 3, 5, 30)


# --------------------------------------------------------------------------------------
# 2. Idempotency (docs/design.md, "REST API")
# --------------------------------------------------------------------------------------


def test_same_request_id_and_body_returns_the_same_reminder(
    client: TestClient, db: Engine, token_for: TokenFor
) -> None:
    headers = bearer(token_for("alice"))
    body = new_york(client_request_id="req-1")

    first = client.post(URL, json=body, headers=headers)
    again = client.post(URL, json=body, headers=headers)

    assert first.status_code == 201, first.text
    assert again.status_code == 200, again.text
    assert again.json()["id"] == first.json()["id"]
    assert again.json() == first.json()
    assert again.headers["location"] == first.headers["location"]
    assert again.headers["etag"] == '"1"'
    assert reminder_count(db) == 1
    assert row(db, first.json()["id"]).client_request_id == "req-1"


def test_same_request_id_other_body_is_409_and_stores_nothing(
    client: TestClient, db: Engine, token_for: TokenFor
) -> None:
    headers = bearer(token_for("alice"))
    first = client.post(URL, json=new_york(client_request_id="req-1"), headers=headers)
    assert first.status_code == 201
    before = table_counts(db)

    clash = client.post(
        URL, json=new_york(client_request_id="req-1", title="Another title"), headers=headers
    )

    assert_problem(clash, 409)
    assert table_counts(db) == before
    assert row(db, first.json()["id"]).title == "Call the dentist"


def test_idempotency_key_header_works_like_the_body_field(
    client: TestClient, db: Engine, token_for: TokenFor
) -> None:
    headers = {**bearer(token_for("alice")), "Idempotency-Key": "hdr-1"}

    first = client.post(URL, json=new_york(), headers=headers)
    again = client.post(URL, json=new_york(), headers=headers)
    before = table_counts(db)
    clash = client.post(URL, json=new_york("2030-07-02T09:00"), headers=headers)

    assert first.status_code == 201, first.text
    assert again.status_code == 200, again.text
    assert again.json()["id"] == first.json()["id"]
    assert_problem(clash, 409)
    assert table_counts(db) == before
    assert reminder_count(db) == 1
    assert row(db, first.json()["id"]).client_request_id == "hdr-1"


def test_idempotent_creates_also_work_on_the_full_unique_key_constraint(
    admin_url: str, template_database: str, settings: Settings, token_for: TokenFor
) -> None:
    # Since migration 0017 the key is unique by a partial index (WHERE
    # client_request_id IS NOT NULL), which every other test of this file runs on; the
    # create's conflict target names that predicate, which infers the full constraint of
    # the schema before 0017 too (a downgrade, or this code before the migration ran).
    with fresh_database(admin_url, "reminders_full_key", template=template_database) as (
        url,
        _,
    ):
        engine = make_engine(url)
        try:
            with engine.begin() as conn:
                conn.execute(
                    text(
                        "DROP INDEX uq_reminders_user_id_client_request_id;"
                        " ALTER TABLE reminders ADD CONSTRAINT"
                        " uq_reminders_user_id_client_request_id"
                        " UNIQUE (user_id, client_request_id)"
                    )
                )
            with TestClient(build_app(settings, engine, Clock(NOW))) as client:
                headers = {**bearer(token_for("alice")), "Idempotency-Key": "k-1"}
                first = client.post(URL, json=new_york(), headers=headers)
                again = client.post(URL, json=new_york(), headers=headers)
                clash = client.post(URL, json=new_york("2030-07-02T09:00"), headers=headers)
                plain = client.post(URL, json=new_york(), headers=bearer(token_for("alice")))
            assert first.status_code == 201, first.text
            assert again.status_code == 200, again.text
            assert again.json()["id"] == first.json()["id"]
            assert_problem(clash, 409)
            assert plain.status_code == 201, plain.text
            assert reminder_count(engine) == 2
        finally:
            engine.dispose()


def test_header_and_body_key_may_agree(client: TestClient, token_for: TokenFor) -> None:
    headers = {**bearer(token_for("alice")), "Idempotency-Key": "same"}

    resp = client.post(URL, json=new_york(client_request_id="same"), headers=headers)

    assert resp.status_code == 201, resp.text
    assert resp.json()["client_request_id"] == "same"


def test_header_and_body_key_that_differ_are_422(
    client: TestClient, db: Engine, token_for: TokenFor
) -> None:
    headers = {**bearer(token_for("alice")), "Idempotency-Key": "from-header"}

    resp = client.post(URL, json=new_york(client_request_id="from-body"), headers=headers)

    assert_problem(resp, 422, "client_request_id")
    assert reminder_count(db) == 0


def test_a_header_key_with_a_control_character_is_422_as_in_the_body(
    client: TestClient, db: Engine, token_for: TokenFor
) -> None:
    """A tab is legal in an HTTP field value (RFC 9110 §5.5) but not in a key, which the
    body's `client_request_id` refuses (trial, 2026-12-06: the header stored it)."""
    headers = {**bearer(token_for("alice")), "Idempotency-Key": "k\tk"}

    resp = client.post(URL, json=new_york(), headers=headers)

    problem = assert_problem(resp, 422, "Idempotency-Key")
    assert "control characters" in str(problem)
    assert reminder_count(db) == 0
    body_refusal = client.post(
        URL, json=new_york(client_request_id="k\tk"), headers=bearer(token_for("alice"))
    )
    assert_problem(body_refusal, 422, "client_request_id")


def test_a_header_key_given_twice_or_not_ascii_is_422_and_writes_nothing(
    client: TestClient, db: Engine, token_for: TokenFor
) -> None:
    """Two Idempotency-Key fields would leave one of them silently ignored; a non-ASCII
    value is read as ISO-8859-1 (RFC 9110 §5.5) and would be another key than the same
    text sent as client_request_id (trial, 2026-12-06)."""
    auth = bearer(token_for("alice"))
    twice = client.post(
        URL, json=new_york(), headers=[*auth.items(), ("Idempotency-Key", "A1"),
                                       ("Idempotency-Key", "A2")],
    )  # fmt: skip
    assert "given once" in str(assert_problem(twice, 422, "Idempotency-Key"))
    utf8 = client.post(
        URL, json=new_york(), headers=[*auth.items(), ("Idempotency-Key", "café".encode())]
    )
    assert "ASCII" in str(assert_problem(utf8, 422, "Idempotency-Key"))
    assert reminder_count(db) == 0
    # the same text in the body is a key
    body = client.post(URL, json=new_york(client_request_id="café"), headers=auth)
    assert body.status_code == 201


def test_idempotency_keys_are_per_user(client: TestClient, db: Engine, token_for: TokenFor) -> None:
    body = new_york(client_request_id="k1")

    alice = client.post(URL, json=body, headers=bearer(token_for("alice")))
    bob = client.post(URL, json=body, headers=bearer(token_for("bob")))

    assert alice.status_code == 201, alice.text
    assert bob.status_code == 201, bob.text
    assert alice.json()["id"] != bob.json()["id"]
    assert row(db, alice.json()["id"]).user_id == "alice"
    assert row(db, bob.json()["id"]).user_id == "bob"
    assert reminder_count(db) == 2


def test_a_refused_request_does_not_use_up_its_key(
    client: TestClient, db: Engine, token_for: TokenFor
) -> None:
    # Issue 2: bad input stores nothing, so the corrected retry with the same key creates.
    headers = bearer(token_for("alice"))
    bad = client.post(URL, json=new_york("tomorrow", client_request_id="k"), headers=headers)
    good = client.post(URL, json=new_york(client_request_id="k"), headers=headers)

    assert_problem(bad, 422, "start_local")
    assert good.status_code == 201, good.text
    assert reminder_count(db) == 1


def test_replay_returns_the_original_even_once_its_time_has_passed(
    client: TestClient, clock: Clock, db: Engine, token_for: TokenFor
) -> None:
    # A retry is answered with the result of the first request (idempotency), not
    # re-validated against a clock that has moved on.
    headers = bearer(token_for("alice"))
    body = new_york("2029-06-01T09:00", client_request_id="late-retry")  # 13:00Z
    first = client.post(URL, json=body, headers=headers)
    clock.now = utc(2029, 6, 1, 14, 0)

    again = client.post(URL, json=body, headers=headers)

    assert first.status_code == 201, first.text
    assert again.status_code == 200, again.text
    assert again.json()["id"] == first.json()["id"]
    assert reminder_count(db) == 1


def test_concurrent_requests_with_one_key_create_one_reminder(
    client: TestClient, db: Engine, token_for: TokenFor
) -> None:
    headers = {**bearer(token_for("alice")), "Idempotency-Key": "race"}
    n = 8

    with ThreadPoolExecutor(max_workers=n) as pool:
        responses = list(
            pool.map(lambda _: client.post(URL, json=new_york(), headers=headers), range(n))
        )

    statuses = sorted(r.status_code for r in responses)
    assert statuses == [200] * (n - 1) + [201], [r.text for r in responses]
    assert len({r.json()["id"] for r in responses}) == 1
    assert reminder_count(db) == 1


# --------------------------------------------------------------------------------------
# 3. GET one reminder
# --------------------------------------------------------------------------------------


def test_get_own_reminder(client: TestClient, token_for: TokenFor) -> None:
    headers = bearer(token_for("alice"))
    created = client.post(URL, json=new_york(), headers=headers).json()

    resp = client.get(f"{URL}/{created['id']}", headers=headers)

    assert resp.status_code == 200
    assert resp.headers["etag"] == '"1"'
    assert resp.json() == created


def test_another_users_reminder_is_404_not_403(client: TestClient, token_for: TokenFor) -> None:
    # docs/design.md, "REST API": a user sees only their own reminders; another user's id
    # answers 404.
    created = client.post(URL, json=new_york(), headers=bearer(token_for("alice"))).json()

    resp = client.get(f"{URL}/{created['id']}", headers=bearer(token_for("bob")))

    assert_problem(resp, 404)
    assert "Call the dentist" not in resp.text  # nothing of alice's reminder leaks


def test_unknown_id_is_404(client: TestClient, token_for: TokenFor) -> None:
    resp = client.get(f"{URL}/{uuid.uuid4()}", headers=bearer(token_for("alice")))

    assert_problem(resp, 404)


@pytest.mark.parametrize("bad_id", ["not-a-uuid", "123", "00000000-0000-0000-0000-00000000000g"])
def test_malformed_id_is_422(client: TestClient, token_for: TokenFor, bad_id: str) -> None:
    resp = client.get(f"{URL}/{bad_id}", headers=bearer(token_for("alice")))

    assert_problem(resp, 422, "reminder_id")


# --------------------------------------------------------------------------------------
# 4. List with cursor pagination
# --------------------------------------------------------------------------------------


def create_many(
    client: TestClient, token: str, n: int, clock: Clock | None = None, prefix: str = "r"
) -> list[str]:
    """Create n reminders (one second apart when a clock is given); ids in creation order."""
    ids = []
    for i in range(n):
        if clock is not None:
            clock.now = NOW + timedelta(seconds=i)
        resp = client.post(URL, json=new_york(title=f"{prefix}{i}"), headers=bearer(token))
        assert resp.status_code == 201, resp.text
        ids.append(resp.json()["id"])
    return ids


def all_pages(client: TestClient, token: str, query: str) -> list[dict[str, Any]]:
    pages = []
    cursor: str | None = None
    for _ in range(20):  # a bound, so a cursor that loops fails instead of hanging
        url = f"{URL}?{query}" + (f"&cursor={cursor}" if cursor else "")
        resp = client.get(url, headers=bearer(token))
        assert resp.status_code == 200, resp.text
        pages.append(resp.json())
        cursor = resp.json()["next_cursor"]
        if cursor is None:
            return pages
    pytest.fail("pagination did not end")


def test_list_pages_newest_first(client: TestClient, clock: Clock, token_for: TokenFor) -> None:
    alice = token_for("alice")
    ids = create_many(client, alice, 7, clock)

    pages = all_pages(client, alice, "limit=3")

    assert [len(p["items"]) for p in pages] == [3, 3, 1]
    assert [p["next_cursor"] is None for p in pages] == [False, False, True]
    seen = [item["id"] for p in pages for item in p["items"]]
    assert seen == list(reversed(ids))  # newest first, no duplicates, none missing


def test_list_pages_are_complete_when_created_at_ties(
    client: TestClient, token_for: TokenFor
) -> None:
    # The fixed clock gives all seven the same created_at; the cursor must still neither
    # repeat nor skip a reminder.
    alice = token_for("alice")
    ids = create_many(client, alice, 7)

    pages = all_pages(client, alice, "limit=3")

    seen = [item["id"] for p in pages for item in p["items"]]
    assert [len(p["items"]) for p in pages] == [3, 3, 1]
    assert len(seen) == len(set(seen)) == 7
    assert set(seen) == set(ids)


def test_list_exact_multiple_of_limit_ends_with_null_cursor(
    client: TestClient, clock: Clock, token_for: TokenFor
) -> None:
    alice = token_for("alice")
    ids = create_many(client, alice, 6, clock)

    pages = all_pages(client, alice, "limit=3")

    seen = [item["id"] for p in pages for item in p["items"]]
    assert seen == list(reversed(ids))
    assert pages[-1]["next_cursor"] is None
    assert all(p["items"] for p in pages)  # no empty trailing page


def test_list_shows_only_own_reminders(
    client: TestClient, clock: Clock, token_for: TokenFor
) -> None:
    alice_ids = create_many(client, token_for("alice"), 2, clock, prefix="a")
    create_many(client, token_for("bob"), 3, clock, prefix="b")

    resp = client.get(URL, headers=bearer(token_for("alice")))
    empty = client.get(URL, headers=bearer(token_for("carol")))

    assert resp.status_code == 200
    assert [i["id"] for i in resp.json()["items"]] == list(reversed(alice_ids))
    assert resp.json()["next_cursor"] is None
    assert empty.json() == {"items": [], "next_cursor": None}


def test_list_status_filter(client: TestClient, clock: Clock, token_for: TokenFor) -> None:
    alice = token_for("alice")
    ids = create_many(client, alice, 3, clock)
    assert client.delete(f"{URL}/{ids[1]}", headers=bearer(alice)).status_code == 200

    def listed(query: str) -> list[str]:
        resp = client.get(f"{URL}?{query}", headers=bearer(alice))
        assert resp.status_code == 200, resp.text
        return [i["id"] for i in resp.json()["items"]]

    assert listed("status=cancelled") == [ids[1]]
    assert listed("status=pending") == [ids[2], ids[0]]
    assert listed("status=pending&status=cancelled") == [ids[2], ids[1], ids[0]]
    assert listed("status=completed") == []


def test_list_unknown_status_is_422(client: TestClient, token_for: TokenFor) -> None:
    resp = client.get(f"{URL}?status=sleeping", headers=bearer(token_for("alice")))

    assert_problem(resp, 422, "status")


@pytest.mark.parametrize(
    "cursor",
    [
        "garbage",
        "!!!!",
        base64.urlsafe_b64encode(b"x|y").decode(),
        # a naive timestamp: not what a cursor holds
        base64.urlsafe_b64encode(f"2030-01-01T00:00:00|{uuid.uuid4()}".encode()).decode(),
        base64.urlsafe_b64encode(b"\xff\xfe\xfd").decode(),
        "x" * 500,
    ],
    ids=["word", "punctuation", "bad-fields", "naive-time", "not-utf8", "too-long"],
)
def test_list_garbage_cursor_is_422_naming_cursor(
    client: TestClient, token_for: TokenFor, cursor: str
) -> None:
    resp = client.get(URL, params={"cursor": cursor}, headers=bearer(token_for("alice")))

    assert_problem(resp, 422, "cursor")


@pytest.mark.parametrize("limit", ["0", "101", "-1", "ten"])
def test_list_limit_out_of_range_is_422(
    client: TestClient, token_for: TokenFor, limit: str
) -> None:
    resp = client.get(f"{URL}?limit={limit}", headers=bearer(token_for("alice")))

    assert_problem(resp, 422, "limit")


@pytest.mark.parametrize("limit", [1, 100])
def test_list_limit_bounds_are_accepted(
    client: TestClient, token_for: TokenFor, limit: int
) -> None:
    alice = token_for("alice")
    create_many(client, alice, 2)

    resp = client.get(f"{URL}?limit={limit}", headers=bearer(alice))

    assert resp.status_code == 200
    assert len(resp.json()["items"]) == min(limit, 2)


# --------------------------------------------------------------------------------------
# 5. DELETE cancels
# --------------------------------------------------------------------------------------


def test_delete_cancels(client: TestClient, clock: Clock, db: Engine, token_for: TokenFor) -> None:
    headers = bearer(token_for("alice"))
    rid = client.post(URL, json=new_york(), headers=headers).json()["id"]
    clock.now = NOW + timedelta(minutes=5)

    resp = client.delete(f"{URL}/{rid}", headers=headers)

    assert resp.status_code == 200, resp.text
    out = resp.json()
    assert out["status"] == "cancelled"
    assert out["next_run_utc"] is None  # docs/design.md, "Data model": NULL once finished
    assert out["version"] == 2  # docs/design.md, "Data model": bumped by every user change
    assert resp.headers["etag"] == '"2"'
    assert instant(out["updated_at"]) == clock.now
    stored = row(db, rid)
    assert (stored.status, stored.next_run_utc, stored.version) == ("cancelled", None, 2)
    assert stored.updated_at == clock.now
    got = client.get(f"{URL}/{rid}", headers=headers)
    assert got.json()["status"] == "cancelled"
    assert got.headers["etag"] == '"2"'


def test_delete_twice_is_fine(client: TestClient, db: Engine, token_for: TokenFor) -> None:
    headers = bearer(token_for("alice"))
    rid = client.post(URL, json=new_york(), headers=headers).json()["id"]

    first = client.delete(f"{URL}/{rid}", headers=headers)
    second = client.delete(f"{URL}/{rid}", headers=headers)

    assert first.status_code == 200
    assert second.status_code == 200, second.text
    assert second.json()["status"] == "cancelled"
    # The second cancel changes nothing, so the version is not bumped again.
    assert second.json()["version"] == 2
    assert row(db, rid).version == 2


def test_delete_another_users_reminder_is_404_and_changes_nothing(
    client: TestClient, db: Engine, token_for: TokenFor
) -> None:
    rid = client.post(URL, json=new_york(), headers=bearer(token_for("alice"))).json()["id"]

    resp = client.delete(f"{URL}/{rid}", headers=bearer(token_for("bob")))

    assert_problem(resp, 404)
    stored = row(db, rid)
    assert (stored.status, stored.version) == ("pending", 1)
    assert stored.next_run_utc == utc(2030, 7, 1, 13, 0)


def test_delete_unknown_is_404(client: TestClient, token_for: TokenFor) -> None:
    assert_problem(client.delete(f"{URL}/{uuid.uuid4()}", headers=bearer(token_for("alice"))), 404)


def test_delete_completed_reminder_is_409(
    client: TestClient, db: Engine, token_for: TokenFor
) -> None:
    # A reminder already sent cannot be cancelled: RFC 9110 §15.5.10, a conflict with the
    # current state of the resource.
    headers = bearer(token_for("alice"))
    rid = client.post(URL, json=new_york(), headers=headers).json()["id"]
    with db.begin() as conn:
        conn.execute(
            text("UPDATE reminders SET status = 'completed', next_run_utc = NULL WHERE id = :id"),
            {"id": uuid.UUID(rid)},
        )

    resp = client.delete(f"{URL}/{rid}", headers=headers)

    assert_problem(resp, 409)
    stored = row(db, rid)
    assert (stored.status, stored.version) == ("completed", 1)


# --------------------------------------------------------------------------------------
# 6. Bad input: 4xx problem+json naming the field, nothing stored (issue 2)
# --------------------------------------------------------------------------------------

VALID = new_york()

BAD_BODIES: list[tuple[str, Any, int, str]] = [
    # (id, JSON body, status, field named in `errors`)
    ("unknown-field", {**VALID, "colour": "red"}, 422, "colour"),
    ("missing-title", {k: v for k, v in VALID.items() if k != "title"}, 422, "title"),
    ("blank-title", {**VALID, "title": "   "}, 422, "title"),
    ("empty-title", {**VALID, "title": ""}, 422, "title"),
    ("title-201-chars", {**VALID, "title": "t" * 201}, 422, "title"),
    ("title-not-a-string", {**VALID, "title": 5}, 422, "title"),
    ("body-10001-chars", {**VALID, "body": "b" * 10_001}, 422, "body"),
    ("nul-in-title", {**VALID, "title": "a\x00b"}, 422, "title"),
    ("nul-in-body", {**VALID, "body": "a\x00b"}, 422, "body"),
    ("unknown-timezone", {**VALID, "timezone": "Mars/Olympus"}, 422, "timezone"),
    ("path-timezone", {**VALID, "timezone": "../../etc/passwd"}, 422, "timezone"),
    ("absolute-path-timezone", {**VALID, "timezone": "/etc/passwd"}, 422, "timezone"),
    ("empty-timezone", {**VALID, "timezone": ""}, 422, "timezone"),
    # NOW is 08:00 EDT on 2029-06-01 in New York: one second before is the past, and so is
    # a month before (both still in the future of the wall clock: the app's clock decides).
    ("past-by-a-second", {**VALID, "start_local": "2029-06-01T07:59:59"}, 422, "start_local"),
    ("past", {**VALID, "start_local": "2029-05-01T09:00"}, 422, "start_local"),
    ("unparsable", {**VALID, "start_local": "tomorrow"}, 422, "start_local"),
    ("utc-offset-z", {**VALID, "start_local": "2030-01-01T09:00Z"}, 422, "start_local"),
    ("utc-offset", {**VALID, "start_local": "2030-01-01T09:00+02:00"}, 422, "start_local"),
    ("february-30", {**VALID, "start_local": "2030-02-30T09:00"}, 422, "start_local"),
    ("hour-24", {**VALID, "start_local": "2030-01-01T24:00"}, 422, "start_local"),
    ("date-only", {**VALID, "start_local": "2030-01-01"}, 422, "start_local"),
    ("missing-start", {k: v for k, v in VALID.items() if k != "start_local"}, 422, "start_local"),
    ("empty-request-id", {**VALID, "client_request_id": ""}, 422, "client_request_id"),
    ("request-id-201-chars", {**VALID, "client_request_id": "k" * 201}, 422, "client_request_id"),
    ("list-body", [VALID], 422, "body"),
    ("string-body", "hello", 422, "body"),
    ("null-body", None, 422, "body"),
    # New-user trial findings: control characters would reach the Subject header raw;
    # host-specific zone copies are not IANA names; far years overflowed into a 500.
    ("newline-in-title", {**VALID, "title": "a\r\nBcc: x@example.com"}, 422, "title"),
    ("bell-in-title", {**VALID, "title": "a\x07b"}, 422, "title"),
    ("escape-in-body", {**VALID, "body": "a\x1bb"}, 422, "body"),
    ("posix-zone-copy", {**VALID, "timezone": "posix/Europe/Paris"}, 422, "timezone"),
    ("right-zone-copy", {**VALID, "timezone": "right/UTC"}, 422, "timezone"),
    ("factory-zone", {**VALID, "timezone": "Factory"}, 422, "timezone"),
    (
        "year-9999",
        {**VALID, "start_local": "9999-12-31T23:59", "timezone": "America/Los_Angeles"},
        422,
        "start_local",
    ),
    (
        "year-1",
        {**VALID, "start_local": "0001-01-01T00:00", "timezone": "Asia/Tokyo"},
        422,
        "start_local",
    ),
    # The documented range is 1900-2999 (docs/api.md, "Refusals"): its edges.
    ("year-3000", {**VALID, "start_local": "3000-01-01T00:00"}, 422, "start_local"),
    ("year-1899", {**VALID, "start_local": "1899-12-31T23:59"}, 422, "start_local"),
]


@pytest.mark.parametrize(
    ("payload", "status", "field"),
    [pytest.param(p, s, f, id=i) for i, p, s, f in BAD_BODIES],
)
def test_bad_body_is_refused_and_nothing_stored(
    client: TestClient, db: Engine, token_for: TokenFor, payload: Any, status: int, field: str
) -> None:
    before = table_counts(db)

    resp = client.post(
        URL,
        content=json.dumps(payload),
        headers={**bearer(token_for("alice")), "Content-Type": "application/json"},
    )

    assert_problem(resp, status, field)
    assert table_counts(db) == before


def test_body_keeps_newlines_and_tabs(client: TestClient, token_for: TokenFor) -> None:
    resp = client.post(
        URL, json={**VALID, "body": "line 1\n\tline 2\r\n"}, headers=bearer(token_for("alice"))
    )

    assert resp.status_code == 201, resp.text
    assert resp.json()["body"] == "line 1\n\tline 2\r\n"


@pytest.mark.parametrize(
    "content_type", ["text/plain", "application/x-www-form-urlencoded", "application/xml"]
)
def test_a_body_that_is_not_json_is_415(
    client: TestClient, db: Engine, token_for: TokenFor, content_type: str
) -> None:
    # RFC 9110 §15.5.16: 415 when the content is in a format the resource does not support.
    resp = client.post(
        URL,
        content=json.dumps(VALID),
        headers={**bearer(token_for("alice")), "Content-Type": content_type},
    )

    assert resp.status_code == 415, resp.text
    assert resp.headers["content-type"].startswith("application/problem+json")
    assert reminder_count(db) == 0


def test_title_of_200_chars_is_accepted(client: TestClient, token_for: TokenFor) -> None:
    # The boundary of the 201-char refusal above: 200 is the limit, not 199.
    resp = client.post(URL, json={**VALID, "title": "t" * 200}, headers=bearer(token_for("alice")))

    assert resp.status_code == 201, resp.text


@pytest.mark.parametrize(
    "raw",
    [b'{"title": "x",', b"{title: 'x'}", b'{"title": "\xff"}', b"\xff"],
    ids=["truncated", "not-json", "not-utf8-string", "not-utf8"],
)
def test_malformed_json_is_400(
    client: TestClient, db: Engine, token_for: TokenFor, raw: bytes
) -> None:
    # RFC 8259 §8.1: JSON exchanged between systems is UTF-8; other bytes are malformed.
    before = table_counts(db)

    resp = client.post(
        URL,
        content=raw,
        headers={**bearer(token_for("alice")), "Content-Type": "application/json"},
    )

    assert_problem(resp, 400, "body")
    assert table_counts(db) == before


def test_empty_body_is_a_missing_body(client: TestClient, db: Engine, token_for: TokenFor) -> None:
    # No body at all: the required body is missing (422 naming it), as for a missing field.
    resp = client.post(
        URL,
        content=b"",
        headers={**bearer(token_for("alice")), "Content-Type": "application/json"},
    )

    assert_problem(resp, 422, "body")
    assert reminder_count(db) == 0


def test_user_without_profile_is_refused(
    client: TestClient, db: Engine, token_for: TokenFor
) -> None:
    resp = client.post(
        URL,
        json={"title": "x", "start_local": "2030-07-01T09:00"},
        headers=bearer(token_for("carol")),
    )

    assert_problem(resp, 422, "user")
    assert reminder_count(db) == 0


def test_body_over_64_kib_is_413(client: TestClient, db: Engine, token_for: TokenFor) -> None:
    payload = json.dumps({**VALID, "body": "b" * (64 * 1024)}).encode()
    assert len(payload) > 64 * 1024

    resp = client.post(
        URL,
        content=payload,
        headers={**bearer(token_for("alice")), "Content-Type": "application/json"},
    )

    assert_problem(resp, 413)
    assert reminder_count(db) == 0


def test_chunked_body_over_64_kib_is_413(
    client: TestClient, db: Engine, token_for: TokenFor
) -> None:
    # Without Content-Length (chunked transfer coding) the limit must hold all the same.
    payload = json.dumps({**VALID, "body": "b" * (64 * 1024)}).encode()

    def chunks() -> Iterator[bytes]:
        for i in range(0, len(payload), 8192):
            yield payload[i : i + 8192]

    resp = client.post(
        URL,
        content=chunks(),
        headers={**bearer(token_for("alice")), "Content-Type": "application/json"},
    )

    assert "content-length" not in {k.lower() for k in resp.request.headers}
    assert_problem(resp, 413)
    assert reminder_count(db) == 0


def test_chunked_body_under_the_limit_is_accepted(client: TestClient, token_for: TokenFor) -> None:
    payload = json.dumps(VALID).encode()

    resp = client.post(
        URL,
        content=iter([payload[:10], payload[10:]]),
        headers={**bearer(token_for("alice")), "Content-Type": "application/json"},
    )

    assert resp.status_code == 201, resp.text


# --- authentication (issue 2: JWT bearer, algorithm pinned, exp and sub required) -------


def _b64url(data: dict[str, Any]) -> str:
    return base64.urlsafe_b64encode(json.dumps(data).encode()).decode().rstrip("=")


def _future() -> int:
    # PyJWT checks `exp` against the wall clock, not the app's clock.
    return int((datetime.now(UTC) + timedelta(hours=1)).timestamp())


def bad_authorization(case: str, settings: Settings) -> dict[str, str]:
    key = settings.jwt_key()
    if case == "missing":
        return {}
    if case == "empty-bearer":
        return {"Authorization": "Bearer "}
    if case == "garbage":
        return bearer("garbage")
    if case == "basic-scheme":
        return {"Authorization": f"Basic {mint_token(settings, 'alice')}"}
    if case == "expired":
        # RFC 7519 §4.1.4: a token must not be accepted on or after its exp.
        issued = datetime.now(UTC) - timedelta(hours=2)
        return bearer(mint_token(settings, "alice", ttl_s=3600, now=issued))
    if case == "other-secret":
        return bearer(
            jwt.encode({"sub": "alice", "exp": _future()}, "another-" + "y" * 40, "HS256")
        )
    if case == "alg-none":
        # RFC 7519 §6.1 unsecured JWT: header {"alg":"none"}, empty signature.
        return bearer(
            _b64url({"alg": "none", "typ": "JWT"})
            + "."
            + _b64url({"sub": "alice", "exp": _future()})
            + "."
        )
    if case == "other-hmac-alg":
        # Right key, but HS512 where HS256 is pinned.
        return bearer(jwt.encode({"sub": "alice", "exp": _future()}, key, "HS512"))
    if case == "no-sub":
        return bearer(jwt.encode({"exp": _future()}, key, "HS256"))
    if case == "empty-sub":
        return bearer(jwt.encode({"sub": "", "exp": _future()}, key, "HS256"))
    if case == "no-exp":
        return bearer(jwt.encode({"sub": "alice"}, key, "HS256"))
    raise AssertionError(case)


AUTH_CASES = [
    "missing",
    "empty-bearer",
    "garbage",
    "basic-scheme",
    "expired",
    "other-secret",
    "alg-none",
    "other-hmac-alg",
    "no-sub",
    "empty-sub",
    "no-exp",
]


def assert_unauthorized(resp: httpx.Response) -> None:
    assert_problem(resp, 401)
    # RFC 6750 §3: a 401 carries WWW-Authenticate with the Bearer scheme.
    assert resp.headers["www-authenticate"].startswith("Bearer")


@pytest.mark.parametrize("case", AUTH_CASES)
def test_bad_token_is_401_and_nothing_stored(
    client: TestClient, db: Engine, settings: Settings, case: str
) -> None:
    before = table_counts(db)

    resp = client.post(URL, json=VALID, headers=bad_authorization(case, settings))

    assert_unauthorized(resp)
    assert table_counts(db) == before


def test_a_token_accepted_before_is_refused_once_it_expires(
    client: TestClient, settings: Settings
) -> None:
    """The API keeps tokens it verified for a minute (issue 15); RFC 7519 §4.1.4 still
    holds for a kept one: not accepted on or after its `exp`."""
    issued = datetime.now(UTC).replace(microsecond=0)
    token = bearer(mint_token(settings, "alice", ttl_s=30, now=issued))
    with freeze_time(issued + timedelta(seconds=29)):
        assert client.get(URL, headers=token).status_code == 200  # verified and kept
        assert client.get(URL, headers=token).status_code == 200  # kept
    with freeze_time(issued + timedelta(seconds=30)):
        assert_unauthorized(client.get(URL, headers=token))


def test_missing_token_challenge_carries_no_error_code(client: TestClient) -> None:
    # RFC 6750 §3.1: "If the request lacks any authentication information ..., the
    # resource server SHOULD NOT include an error code" (example: `Bearer realm=...`).
    resp = client.post(URL, json=VALID)

    assert_unauthorized(resp)
    assert "error=" not in resp.headers["www-authenticate"]


def test_invalid_token_challenge_says_invalid_token(client: TestClient) -> None:
    # RFC 6750 §3.1: an expired, revoked or malformed token gives error="invalid_token".
    resp = client.post(URL, json=VALID, headers=bearer("garbage"))

    assert_unauthorized(resp)
    assert 'error="invalid_token"' in resp.headers["www-authenticate"]


@pytest.mark.parametrize(
    ("method", "path"),
    [
        ("GET", URL),
        ("GET", f"{URL}/00000000-0000-7000-8000-000000000000"),
        ("DELETE", f"{URL}/00000000-0000-7000-8000-000000000000"),
    ],
)
@pytest.mark.parametrize("case", ["missing", "garbage", "expired"])
def test_every_route_needs_a_token(
    client: TestClient, settings: Settings, method: str, path: str, case: str
) -> None:
    resp = client.request(method, path, headers=bad_authorization(case, settings))

    assert_unauthorized(resp)


def test_unauthenticated_delete_cancels_nothing(
    client: TestClient, db: Engine, token_for: TokenFor
) -> None:
    rid = client.post(URL, json=VALID, headers=bearer(token_for("alice"))).json()["id"]

    resp = client.delete(f"{URL}/{rid}")

    assert_unauthorized(resp)
    assert (row(db, rid).status, row(db, rid).version) == ("pending", 1)


@pytest.mark.parametrize(
    ("method", "path", "content"),
    [
        ("POST", URL, b'{"title": "x",'),  # malformed JSON
        ("POST", URL, b"\xff"),  # not UTF-8
        ("POST", URL, json.dumps({**VALID, "colour": "red"}).encode()),  # unknown field
        ("POST", URL, json.dumps([VALID]).encode()),  # wrong type
        ("GET", f"{URL}?limit=0", None),
        ("GET", f"{URL}?cursor=garbage", None),
        ("GET", f"{URL}/not-a-uuid", None),
    ],
    ids=[
        "malformed-json",
        "not-utf8",
        "unknown-field",
        "list-body",
        "bad-limit",
        "bad-cursor",
        "bad-id",
    ],
)
def test_unauthenticated_bad_request_is_401_not_400(
    client: TestClient, db: Engine, method: str, path: str, content: bytes | None
) -> None:
    # An unauthenticated caller gets no feedback on its payload: 401 before validation.
    before = table_counts(db)

    resp = client.request(
        method, path, content=content, headers={"Content-Type": "application/json"}
    )

    assert_unauthorized(resp)
    assert table_counts(db) == before


def test_issuer_and_audience_checked_when_configured(
    db: Engine, settings: Settings, clock: Clock
) -> None:
    # Issue 2: "issuer and audience checked when configured" (RFC 7519 §4.1.1, §4.1.3).
    strict = settings.model_copy(update={"jwt_issuer": "https://id.example", "jwt_audience": "rem"})
    key = strict.jwt_key()

    def token(**claims: Any) -> dict[str, str]:
        return bearer(jwt.encode({"sub": "alice", "exp": _future(), **claims}, key, "HS256"))

    with TestClient(build_app(strict, db, clock)) as c:
        good = c.post(URL, json=VALID, headers=bearer(mint_token(strict, "alice")))
        before = table_counts(db)
        refused = [
            c.post(URL, json=VALID, headers=token(aud="rem")),  # no iss
            c.post(URL, json=VALID, headers=token(iss="https://id.example")),  # no aud
            c.post(URL, json=VALID, headers=token(iss="https://evil.example", aud="rem")),
            c.post(URL, json=VALID, headers=token(iss="https://id.example", aud="other")),
        ]

    assert good.status_code == 201, good.text
    for resp in refused:
        assert_unauthorized(resp)
    assert table_counts(db) == before


# --------------------------------------------------------------------------------------
# 7. Operations endpoints and documentation
# --------------------------------------------------------------------------------------


def test_healthz(client: TestClient) -> None:
    resp = client.get("/healthz")

    assert resp.status_code == 200
    assert resp.json()["status"] == "ok"


def test_readyz_with_the_database_up(client: TestClient) -> None:
    resp = client.get("/readyz")

    assert resp.status_code == 200
    assert resp.headers["content-type"].startswith("application/json")


def test_metrics_is_prometheus_text(client: TestClient) -> None:
    resp = client.get("/metrics")

    assert resp.status_code == 200
    # Prometheus text exposition format 0.0.4: text/plain, "# HELP"/"# TYPE" lines.
    assert resp.headers["content-type"].startswith("text/plain")
    assert "# TYPE " in resp.text


def test_docs_and_openapi_are_served(client: TestClient) -> None:
    docs = client.get("/docs")
    spec = client.get("/openapi.json")

    assert docs.status_code == 200
    assert docs.headers["content-type"].startswith("text/html")
    assert spec.status_code == 200
    paths = spec.json()["paths"]
    # docs/design.md, "REST API" / issue 2: the routes of this issue are documented.
    assert {"post", "get"} <= set(paths["/v1/reminders"])
    assert {"get", "delete"} <= set(paths["/v1/reminders/{reminder_id}"])


def test_unknown_route_is_problem_json(client: TestClient) -> None:
    assert_problem(client.get("/v1/nothing-here"), 404)
