"""Creating reminders with PROFILE_SERVICE_URL set: the API reads profiles over HTTP.

Expected values: the profile service contract (docs/configuration.md, "Profile service": 404
= unknown user, refused with 422 as with the local file; transient failures and malformed
answers are the service being unavailable, 503 problem+json with Retry-After, RFC 9110
§15.6.4 and RFC 9457) and Tokyo's fixed UTC+9 (no DST since 1951): 09:00 JST = 00:00Z.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from datetime import datetime
from typing import Any

import pytest
from fastapi.testclient import TestClient
from sqlalchemy import Engine

from reminder_api.app import create_app
from reminder_core.profile_service import HttpProfileSource, profile_source_from_settings
from reminder_core.settings import Settings
from tests.conftest import table_counts, utc
from tests.integration.api_support import NOW, PROBLEM_JSON, URL, Clock, TokenFor, bearer
from tests.support.fake_profile_service import FakeProfileService

TOKEN = "profile-service-token"
# Not the zone of alice in the profiles file (America/New_York): proves the HTTP source.
ALICE = {"email": "alice@example.com", "timezone": "Asia/Tokyo"}
BODY = {"title": "Pay rent", "start_local": "2030-01-15T09:00"}


@pytest.fixture
def svc() -> Iterator[FakeProfileService]:
    with FakeProfileService({"alice": ALICE}, token=TOKEN) as service:
        yield service


@pytest.fixture
def remote_client(
    db: Engine, settings: Settings, svc: FakeProfileService
) -> Iterator[Callable[..., TestClient]]:
    """A TestClient of an app whose profiles come from `svc`, with settings overrides."""
    opened: list[tuple[TestClient, HttpProfileSource]] = []

    def open_client(**overrides: Any) -> TestClient:
        configured = settings.model_copy(
            update={
                "profile_service_url": svc.url,
                "profile_service_token": TOKEN,
                "profile_service_retry_base_s": 0.01,
                "profile_service_read_timeout_s": 0.5,
                "profile_service_budget_s": 2.0,
                **overrides,
            }
        )
        profiles = profile_source_from_settings(configured)
        assert isinstance(profiles, HttpProfileSource)
        client = TestClient(
            create_app(configured, db, profiles, clock=Clock(NOW)), raise_server_exceptions=False
        )
        opened.append((client, profiles))
        return client

    yield open_client
    for client, profiles in opened:
        client.close()
        profiles.close()


def assert_unavailable(resp: Any) -> None:
    assert resp.status_code == 503, resp.text
    assert resp.headers["content-type"].split(";")[0].strip() == PROBLEM_JSON
    assert resp.headers["Retry-After"].isdigit()
    problem = resp.json()
    assert problem["status"] == 503
    assert problem["type"].endswith("/unavailable")


def test_profile_zone_comes_from_the_service(
    remote_client: Callable[..., TestClient],
    svc: FakeProfileService,
    db: Engine,
    token_for: TokenFor,
) -> None:
    resp = remote_client().post(URL, json=BODY, headers=bearer(token_for("alice")))

    assert resp.status_code == 201, resp.text
    assert datetime.fromisoformat(resp.json()["next_run_utc"]) == utc(2030, 1, 15, 0, 0)
    assert "/users/alice" in svc.targets()
    assert table_counts(db)["reminders"] == 1


def test_unknown_user_is_422(
    remote_client: Callable[..., TestClient], db: Engine, token_for: TokenFor
) -> None:
    before = table_counts(db)

    resp = remote_client().post(URL, json=BODY, headers=bearer(token_for("carol")))

    assert resp.status_code == 422, resp.text
    assert resp.headers["content-type"].split(";")[0].strip() == PROBLEM_JSON
    assert [e["field"] for e in resp.json()["errors"]] == ["user"]
    assert table_counts(db) == before


@pytest.mark.parametrize(
    "fault",
    [
        {"kind": "status", "status": 503},
        {"kind": "status", "status": 500},
        {"kind": "status", "status": 401},
        {"kind": "drop"},
        {"kind": "latency", "seconds": 5.0},
        {"kind": "body", "body": "<html>gateway</html>"},
        {"kind": "body", "body": '{"email": "alice@example.com", "timezone": "Nowhere/City"}'},
    ],
    ids=lambda f: f"{f['kind']}-{f.get('status', '')}",
)
def test_profile_service_failure_is_503_never_500(
    remote_client: Callable[..., TestClient],
    svc: FakeProfileService,
    db: Engine,
    token_for: TokenFor,
    fault: dict[str, Any],
) -> None:
    svc.inject(always=fault)
    before = table_counts(db)

    resp = remote_client().post(URL, json=BODY, headers=bearer(token_for("alice")))

    assert_unavailable(resp)
    assert table_counts(db) == before


def test_unreachable_profile_service_is_503(
    remote_client: Callable[..., TestClient], db: Engine, token_for: TokenFor
) -> None:
    with FakeProfileService() as gone:
        url = gone.url  # closed once the block ends: connections are refused

    resp = remote_client(profile_service_url=url).post(
        URL, json=BODY, headers=bearer(token_for("alice"))
    )

    assert_unavailable(resp)
    assert table_counts(db)["reminders"] == 0
