"""Fair limits (issue 17): the per-user request rate limit shared by several API
processes, and the per-user quotas, against the real database.

Sources of the expected values: GCRA (ITU-T I.371; the budget of reminder_api.ratelimit:
each request costs 60 / RATE_LIMIT_PER_MINUTE seconds, RATE_LIMIT_BURST of them at once),
worked by hand below for 60 a minute (1 s each) in bursts of 3;
draft-ietf-httpapi-ratelimit-headers-11 for the `RateLimit-Policy` (`"name";q=;w=`) and
`RateLimit` (`"name";r=;t=`) syntax; RFC 6585 §4 and RFC 9110 §10.2.3 for 429 and
`Retry-After`; RFC 9457 for problem+json. The clock stands still unless a test moves it,
so the budget refills only when it does.
"""

from __future__ import annotations

import contextvars
import uuid
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any

import pytest
from fastapi.routing import APIRoute
from fastapi.testclient import TestClient
from sqlalchemy import Engine, event, text

from reminder_api.deps import KEPT_CONNECTION, keep_for_route
from reminder_core.db.session import make_engine
from reminder_core.settings import Settings
from tests.conftest import table_counts
from tests.integration.api_support import PROBLEM_JSON, URL, Clock, TokenFor, bearer, build_app
from tests.integration.test_api import assert_problem, new_york
from tests.integration.test_calendar_feed import ICS, IMPORT, vcalendar

# 60 requests a minute in bursts of 3: each request costs 1 s, and the budget is whole
# again 3 s after a burst (q=3 over w=3).
SIXTY_A_MINUTE = {"rate_limit_per_minute": 60, "rate_limit_burst": 3}
POLICY = '"per-user";q=3;w=3'


@contextmanager
def apps(
    db: Engine, settings: Settings, clock: Clock, n: int, **changes: Any
) -> Iterator[list[TestClient]]:
    """`n` API applications ("processes") over one database, with `changes` to settings."""
    changed = settings.model_copy(update=changes)
    with ExitStack() as stack:
        yield [stack.enter_context(TestClient(build_app(changed, db, clock))) for _ in range(n)]


def test_two_api_processes_share_one_budget(
    db: Engine, settings: Settings, clock: Clock, token_for: TokenFor
) -> None:
    alice = bearer(token_for("alice"))
    with apps(db, settings, clock, 2, **SIXTY_A_MINUTE) as (a, b):
        # Three requests at one instant, alternating processes: the TAT moves to now+1,
        # now+2, now+3 s; r = 3 - requests so far, t = seconds until the TAT.
        answers = [c.get(URL, headers=alice) for c in (a, b, a)]
        assert [r.status_code for r in answers] == [200, 200, 200]
        assert [r.headers["RateLimit"] for r in answers] == [
            '"per-user";r=2;t=1',
            '"per-user";r=1;t=2',
            '"per-user";r=0;t=3',
        ]
        assert {r.headers["RateLimit-Policy"] for r in answers} == {POLICY}

        # The fourth, on the other process: TAT now+4 would be past now + 3 s → refused;
        # one request fits again once the TAT is within 2 s of now: in 1 s.
        refused = b.get(URL, headers=alice)
        problem = assert_problem(refused, 429)
        assert problem["type"] == "/problems/rate-limited"
        assert refused.headers["Retry-After"] == "1"
        assert refused.headers["RateLimit"] == '"per-user";r=0;t=3'
        assert refused.headers["RateLimit-Policy"] == POLICY

        # Another user has a budget of their own.
        bob = b.get(URL, headers=bearer(token_for("bob")))
        assert bob.status_code == 200
        assert bob.headers["RateLimit"] == '"per-user";r=2;t=1'

        # A refused request costs nothing: 1 s later exactly one request fits again
        # (TAT now+3 → now+4 = the new now + 3), on either process.
        clock.now += timedelta(seconds=1)
        again = a.get(URL, headers=alice)
        assert again.status_code == 200
        assert again.headers["RateLimit"] == '"per-user";r=0;t=3'
        assert b.get(URL, headers=alice).status_code == 429

        # 3 s later the budget is whole again: three more.
        clock.now += timedelta(seconds=3)
        assert [c.get(URL, headers=alice).status_code for c in (a, b, a, b)] == [
            200, 200, 200, 429,
        ]  # fmt: skip
    with db.connect() as conn:  # one row per user, whatever the number of processes
        assert conn.execute(text("SELECT count(*) FROM rate_limits")).scalar_one() == 2


def test_the_remaining_count_is_exact_when_a_request_costs_no_whole_microseconds(
    db: Engine, settings: Settings, clock: Clock, token_for: TokenFor
) -> None:
    """7 a minute in bursts of 7: each request costs 60/7 s (8.571428... s, kept by
    PostgreSQL to the microsecond), so seven requests at one instant leave r = 6, 5, 4,
    3, 2, 1, 0 and the eighth is refused (adversarial trial, 2026-12-06: r=5 twice)."""
    alice = bearer(token_for("alice"))
    with apps(db, settings, clock, 1, rate_limit_per_minute=7, rate_limit_burst=7) as (a,):
        answers = [a.get(URL, headers=alice) for _ in range(8)]
    assert [r.status_code for r in answers] == [200] * 7 + [429]
    remaining = [r.headers["RateLimit"].split(";")[1] for r in answers]
    assert remaining == ["r=6", "r=5", "r=4", "r=3", "r=2", "r=1", "r=0", "r=0"]
    # t: whole seconds until the budget is whole again, ceil(k * 60 / 7) after k requests
    resets = [int(r.headers["RateLimit"].split(";t=")[1]) for r in answers[:7]]
    assert resets == [9, 18, 26, 35, 43, 52, 60]
    assert {r.headers["RateLimit-Policy"] for r in answers} == {'"per-user";q=7;w=60'}
    assert answers[7].headers["Retry-After"] == "9"  # one request's cost, rounded up


def test_429_is_documented_as_answered(
    db: Engine, settings: Settings, clock: Clock, token_for: TokenFor
) -> None:
    alice = bearer(token_for("alice"))
    with apps(db, settings, clock, 1, rate_limit_per_minute=60, rate_limit_burst=1) as (a,):
        doc = a.get("/openapi.json").json()
        assert a.post("/v1/occurrences:preview", json={}, headers=alice).status_code == 422
        refused = a.post(URL, json=new_york(), headers=alice)
    assert refused.status_code == 429
    documented = doc["paths"]["/v1/reminders"]["post"]["responses"]["429"]
    assert list(documented["content"]) == [PROBLEM_JSON]
    assert set(documented["headers"]) == {"Retry-After", "RateLimit-Policy", "RateLimit"}
    assert set(refused.headers) >= {"retry-after", "ratelimit-policy", "ratelimit"}
    success = doc["paths"]["/v1/reminders"]["get"]["responses"]["200"]
    assert set(success["headers"]) >= {"RateLimit-Policy", "RateLimit"}


def test_operations_webhooks_console_and_bad_tokens_are_never_limited(
    db: Engine, settings: Settings, clock: Clock, token_for: TokenFor
) -> None:
    alice = bearer(token_for("alice"))
    with apps(db, settings, clock, 1, rate_limit_per_minute=60, rate_limit_burst=1) as (a,):
        assert a.get(URL, headers=alice).status_code == 200
        assert a.get(URL, headers=alice).status_code == 429  # the budget is spent
        for path in ("/healthz", "/readyz", "/metrics", "/console/", "/openapi.json"):
            for _ in range(3):
                resp = a.get(path, headers=alice)
                assert resp.status_code != 429, path
                assert "RateLimit" not in resp.headers, path
        for _ in range(3):  # signatures, not bearer tokens: the provider's answer
            resp = a.post("/v1/webhooks/resend", content=b"{}", headers=alice)
            assert resp.status_code != 429
        # Without a valid token: 401 (the route's answer), and nothing counted.
        for headers in ({}, bearer("not-a-token")):
            resp = a.get(URL, headers=headers)
            assert resp.status_code == 401
            assert "RateLimit" not in resp.headers


def test_requests_that_reach_no_route_body_spend_the_budget_too(
    db: Engine, settings: Settings, clock: Clock, token_for: TokenFor
) -> None:
    # A route body takes the budget in its own worker thread before it runs; a request
    # refused before any route body (body validation, an unknown /v1 path) is taken when
    # its response starts. Both spend it (60 a minute in bursts of 2: 1 s each).
    alice = bearer(token_for("alice"))
    with apps(db, settings, clock, 1, rate_limit_per_minute=60, rate_limit_burst=2) as (a,):
        invalid = a.post(URL, json={"title": 1}, headers=alice)
        assert invalid.status_code == 422
        assert invalid.headers["RateLimit"] == '"per-user";r=1;t=1'
        unknown = a.get("/v1/no-such-collection", headers=alice)
        assert unknown.status_code == 404
        assert unknown.headers["RateLimit"] == '"per-user";r=0;t=2'
        # Past the budget the 422 it would have been is answered 429 instead.
        refused = a.post(URL, json={"title": 1}, headers=alice)
        assert assert_problem(refused, 429)["type"] == "/problems/rate-limited"
        assert refused.headers["Retry-After"] == "1"
        # Refused before their bodies: a create and an import store nothing.
        before = table_counts(db)
        assert a.post(URL, json=new_york(), headers=alice).status_code == 429
        ics = vcalendar("UID:a\r\nDTSTART:20300105T090000Z\r\nSUMMARY:A")
        assert a.post(IMPORT, content=ics, headers=alice | ICS).status_code == 429
        assert table_counts(db) == before
        clock.now += timedelta(seconds=1)  # one request fits again: the import runs
        imported = a.post(IMPORT, content=ics, headers=alice | ICS)
        assert imported.status_code == 201
        assert imported.headers["RateLimit"] == '"per-user";r=0;t=2'


def test_every_limited_route_takes_the_budget_before_its_body(
    db: Engine, settings: Settings, clock: Clock
) -> None:
    # The middleware counts a request in the route's worker thread (`in_worker_thread`)
    # or, for a coroutine route, in `run_route_body`; a request that reaches neither is
    # counted only when its response starts, after the route ran. So every limited route
    # must be one or the other, or a refused request could have done its work.
    from reminder_api.ratelimit import is_limited_path

    def walk(routes: list[Any]) -> Iterator[APIRoute]:
        for route in routes:
            if isinstance(route, APIRoute):
                yield route
            elif hasattr(route, "original_router"):  # FastAPI's included routers
                yield from walk(route.original_router.routes)

    limited = [r for r in walk(build_app(settings, db, clock).routes) if is_limited_path(r.path)]
    assert len(limited) >= 20  # the walk found the /v1 routes
    unchecked = [
        f"{sorted(r.methods)} {r.path}"
        for r in limited
        if not getattr(r.endpoint, "runs_route_body_check", False)
        and "run_route_body" not in r.endpoint.__code__.co_names
    ]
    assert unchecked == []


def test_limit_zero_is_off(
    db: Engine, settings: Settings, clock: Clock, token_for: TokenFor
) -> None:
    alice = bearer(token_for("alice"))
    with apps(db, settings, clock, 1, rate_limit_per_minute=0, rate_limit_burst=1) as (a,):
        answers = [a.get(URL, headers=alice) for _ in range(25)]
    assert {r.status_code for r in answers} == {200}
    assert not any("RateLimit" in r.headers for r in answers)
    with db.connect() as conn:
        assert conn.execute(text("SELECT count(*) FROM rate_limits")).scalar_one() == 0


def test_live_reminders_quota_refuses_and_stores_nothing(
    db: Engine, settings: Settings, clock: Clock, token_for: TokenFor
) -> None:
    alice = bearer(token_for("alice"))
    with apps(db, settings, clock, 1, quota_live_reminders=2) as (a,):
        first = a.post(URL, json=new_york(), headers=alice)
        assert first.status_code == 201
        second = a.post(URL, json=new_york("2030-07-02T09:00"), headers=alice)
        assert second.status_code == 201
        # Paused is still live.
        paused = a.post(f"{URL}/{second.json()['id']}/pause", headers=alice)
        assert paused.status_code == 200
        before = table_counts(db)
        refused = a.post(URL, json=new_york("2030-07-03T09:00"), headers=alice)
        problem = assert_problem(refused, 429)
        assert problem["type"] == "/problems/quota-exceeded"
        assert "QUOTA_LIVE_REMINDERS" in problem["detail"]
        assert "Retry-After" not in refused.headers  # waiting does not help
        assert table_counts(db) == before
        # Another user is not counted against alice's quota.
        assert a.post(URL, json=new_york(), headers=bearer(token_for("bob"))).status_code == 201
        # A cancelled reminder is not live: room for one more.
        assert a.delete(f"{URL}/{first.json()['id']}", headers=alice).status_code == 200
        assert a.post(URL, json=new_york("2030-07-03T09:00"), headers=alice).status_code == 201


def _bound(db: Engine, user_id: str) -> int | None:
    with db.connect() as conn:
        return conn.execute(
            text("SELECT bound FROM live_reminder_bounds WHERE user_id = :u"), {"u": user_id}
        ).scalar_one_or_none()


def test_the_quota_counts_exactly_only_when_the_bound_passes_it(
    db: Engine, settings: Settings, clock: Clock, token_for: TokenFor
) -> None:
    # The bound rises with each reminder made live, and does not fall when one stops
    # being live; at the quota it is recounted (docs/operations.md, "Fair limits").
    alice = bearer(token_for("alice"))
    with apps(db, settings, clock, 1, quota_live_reminders=2) as (a,):
        ids = [
            a.post(URL, json=new_york(f"2030-07-0{d}T09:00"), headers=alice).json()["id"]
            for d in (1, 2)
        ]
        assert _bound(db, "alice") == 2
        assert a.delete(f"{URL}/{ids[0]}", headers=alice).status_code == 200
        assert _bound(db, "alice") == 2  # a cancel does not lower it
        # The next create would make it 3 > 2: counted, 1 live + this one fits; the bound
        # is now exact.
        assert a.post(URL, json=new_york("2030-07-03T09:00"), headers=alice).status_code == 201
        assert _bound(db, "alice") == 2
        refused = a.post(URL, json=new_york("2030-07-04T09:00"), headers=alice)
        assert assert_problem(refused, 429)["type"] == "/problems/quota-exceeded"
        assert _bound(db, "alice") == 2  # a refusal raises nothing


def test_a_user_without_a_bound_is_counted_and_the_bound_is_kept_with_the_quota_off(
    db: Engine, settings: Settings, clock: Clock, token_for: TokenFor
) -> None:
    alice = bearer(token_for("alice"))
    with apps(db, settings, clock, 1, quota_live_reminders=0) as (off,):
        for d in (1, 2, 3):
            assert (
                off.post(URL, json=new_york(f"2030-07-0{d}T09:00"), headers=alice).status_code
                == 201
            )
    assert _bound(db, "alice") == 3  # kept while off: turning the quota on finds it true
    with apps(db, settings, clock, 1, quota_live_reminders=3) as (on,):
        assert on.post(URL, json=new_york("2030-07-04T09:00"), headers=alice).status_code == 429
    # A user with reminders and no bound (an upgrade, a move between cells) is counted.
    with db.begin() as conn:
        conn.execute(text("DELETE FROM live_reminder_bounds"))
    with apps(db, settings, clock, 1, quota_live_reminders=4) as (on,):
        assert on.post(URL, json=new_york("2030-07-04T09:00"), headers=alice).status_code == 201
        assert _bound(db, "alice") == 4
        assert on.post(URL, json=new_york("2030-07-05T09:00"), headers=alice).status_code == 429
        assert _bound(db, "alice") == 4


def test_replay_at_the_quota_is_still_answered(
    db: Engine, settings: Settings, clock: Clock, token_for: TokenFor
) -> None:
    headers = {**bearer(token_for("alice")), "Idempotency-Key": "k1"}
    with apps(db, settings, clock, 1, quota_live_reminders=1) as (a,):
        assert a.post(URL, json=new_york(), headers=headers).status_code == 201
        assert a.post(URL, json=new_york(), headers=headers).status_code == 200


def test_concurrent_retries_of_one_create_at_the_last_free_place_are_all_answered(
    db: Engine, settings: Settings, clock: Clock, token_for: TokenFor
) -> None:
    # docs/operations.md: "An idempotent replay is answered at the quota". Retries of one
    # create racing for the last free place: one creates it, every other waits for the
    # quota's lock and is answered its replay, none is told it is over the quota.
    alice = bearer(token_for("alice"))
    with apps(db, settings, clock, 2, quota_live_reminders=3) as clients:
        for d in (1, 2):
            body = new_york(f"2030-07-0{d}T09:00")
            assert clients[0].post(URL, json=body, headers=alice).status_code == 201
        keyed = {**alice, "Idempotency-Key": "last-place"}
        body = new_york("2030-07-03T09:00")

        def retry(i: int) -> tuple[int, str]:
            answer = clients[i % 2].post(URL, json=body, headers=keyed)
            return answer.status_code, answer.json().get("id", answer.text)

        with ThreadPoolExecutor(max_workers=8) as pool:
            answers = list(pool.map(retry, range(12)))
    assert sorted(code for code, _ in answers) == [200] * 11 + [201], answers
    assert len({rid for _, rid in answers}) == 1
    assert _bound(db, "alice") == 3


def test_a_read_only_database_lets_requests_through_unlimited(
    db: Engine, settings: Settings, clock: Clock, token_for: TokenFor
) -> None:
    # docs/operations.md: when the database cannot take the budget the request goes on
    # unlimited. A primary demoted to read-only (or a standby after a failover) refuses
    # the take's write: reads still answer, without RateLimit headers; no 500.
    from sqlalchemy import create_engine

    read_only = create_engine(
        db.url, connect_args={"options": "-c default_transaction_read_only=on"}
    )
    alice = bearer(token_for("alice"))
    changed = settings.model_copy(update=SIXTY_A_MINUTE)
    try:
        with TestClient(build_app(changed, read_only, clock)) as a:
            listed = a.get(URL, headers=alice)
            unknown = a.get("/v1/no-such-collection", headers=alice)
    finally:
        read_only.dispose()
    assert listed.status_code == 200, listed.text
    assert "RateLimit" not in listed.headers
    assert unknown.status_code == 404
    with db.connect() as conn:
        assert conn.execute(text("SELECT count(*) FROM rate_limits")).scalar_one() == 0


def test_concurrent_creates_at_the_quota_edge_never_exceed_it(
    db: Engine, settings: Settings, clock: Clock, token_for: TokenFor
) -> None:
    alice = bearer(token_for("alice"))
    quota, attempts = 3, 16
    with apps(db, settings, clock, 2, quota_live_reminders=quota) as clients:

        def create(i: int) -> int:
            body = new_york(f"2030-07-01T{i % 24:02d}:00", title=f"race {i}")
            return clients[i % 2].post(URL, json=body, headers=alice).status_code

        with ThreadPoolExecutor(max_workers=8) as pool:
            statuses = sorted(pool.map(create, range(attempts)))
    assert statuses == [201] * quota + [429] * (attempts - quota)
    with db.connect() as conn:
        stored = conn.execute(
            text("SELECT count(*) FROM reminders WHERE user_id = 'alice'")
        ).scalar_one()
    assert stored == quota


@pytest.fixture
def per_day(db: Engine, settings: Settings, clock: Clock) -> Iterator[TestClient]:
    """An API whose rules may fire once a minute (so the day quota can be reached), with
    at most 48 occurrences a local day."""
    with apps(
        db, settings, clock, 1, min_recurrence_spacing_s=60, quota_occurrences_per_day=48
    ) as (a,):
        yield a


def test_occurrences_per_day_quota(per_day: TestClient, db: Engine, token_for: TokenFor) -> None:
    alice = bearer(token_for("alice"))
    # Every 30 minutes from 09:00: 30 times on the first day (09:00..23:30), then
    # 24 h x 2 = 48 a day: at the quota, accepted.
    every_30 = new_york(rrule="FREQ=MINUTELY;INTERVAL=30")
    created = per_day.post(URL, json=every_30, headers=alice)
    assert created.status_code == 201, created.text
    # Every 20 minutes: 45 times on 2030-07-01 (09:00..23:40), 72 on 2030-07-02.
    before = table_counts(db)
    refused = per_day.post(URL, json=new_york(rrule="FREQ=MINUTELY;INTERVAL=20"), headers=alice)
    problem = assert_problem(refused, 429)
    assert problem["type"] == "/problems/quota-exceeded"
    assert "QUOTA_OCCURRENCES_PER_DAY" in problem["detail"]
    assert "2030-07-02" in problem["detail"]
    assert table_counts(db) == before
    # The same rule as an edit: refused, the reminder unchanged.
    rid = created.json()["id"]
    patched = per_day.patch(
        f"{URL}/{rid}",
        json={"rrule": "FREQ=MINUTELY;INTERVAL=20"},
        headers={**alice, "If-Match": '"1"'},
    )
    assert assert_problem(patched, 429)["type"] == "/problems/quota-exceeded"
    kept = per_day.get(f"{URL}/{rid}", headers=alice).json()
    assert (kept["rrule"], kept["version"]) == ("FREQ=MINUTELY;INTERVAL=30", 1)


def test_import_past_the_quota_refuses_every_event(
    db: Engine, settings: Settings, clock: Clock, token_for: TokenFor
) -> None:
    alice = bearer(token_for("alice"))
    # One live reminder, a quota of 2: an import of two events would make 3.
    ics = vcalendar(
        "UID:a\r\nDTSTART:20300105T090000Z\r\nSUMMARY:A",
        "UID:b\r\nDTSTART:20300106T090000Z\r\nSUMMARY:B",
    )
    with apps(db, settings, clock, 1, quota_live_reminders=2) as (a,):
        assert a.post(URL, json=new_york(), headers=alice).status_code == 201
        before = table_counts(db)
        refused = a.post(IMPORT, content=ics, headers=alice | ICS)
        problem = assert_problem(refused, 429)
        assert problem["type"] == "/problems/quota-exceeded"
        # Counted with the import's own first event, as what the import would make.
        assert "would make 3 live reminders" in problem["detail"], problem["detail"]
        assert table_counts(db) == before  # all or nothing: not even the first event


def _limited(limit: str) -> float:
    from prometheus_client import REGISTRY

    return REGISTRY.get_sample_value("reminders_api_limited_total", {"limit": limit}) or 0.0


def test_refusals_are_counted_by_limit(
    db: Engine, settings: Settings, clock: Clock, token_for: TokenFor
) -> None:
    # SREs tell a client's retry loop (rate) from a user at a quota (the setting's name).
    alice = bearer(token_for("alice"))
    rate, quota = _limited("rate"), _limited("QUOTA_LIVE_REMINDERS")
    with apps(db, settings, clock, 1, quota_live_reminders=1, **SIXTY_A_MINUTE) as (a,):
        assert a.post(URL, json=new_york(), headers=alice).status_code == 201
        assert a.post(URL, json=new_york("2030-07-02T09:00"), headers=alice).status_code == 429
        assert [a.get(URL, headers=alice).status_code for _ in range(2)] == [200, 429]
    assert (_limited("rate") - rate, _limited("QUOTA_LIVE_REMINDERS") - quota) == (1, 1)


@dataclass
class PoolUse:
    """What `db`'s pool did while a `pool_use` block ran."""

    checkouts: int = 0
    autocommit: list[bool] = field(default_factory=list)  # per statement, its connection's


@contextmanager
def pool_use(db: Engine) -> Iterator[PoolUse]:
    """Count checkouts of `db`'s pool and note, per statement run, whether its
    connection was in autocommit, while the block runs."""
    seen = PoolUse()

    def on_checkout(*_: object) -> None:
        seen.checkouts += 1

    def before(conn: Any, *_: object) -> None:
        seen.autocommit.append(bool(conn.connection.driver_connection.autocommit))

    event.listen(db, "checkout", on_checkout)
    event.listen(db, "before_cursor_execute", before)
    try:
        yield seen
    finally:
        event.remove(db, "checkout", on_checkout)
        event.remove(db, "before_cursor_execute", before)


def test_the_take_and_the_route_share_one_checkout(
    db: Engine, settings: Settings, clock: Clock, token_for: TokenFor
) -> None:
    """Issue 15: one checkout per counted request (the rate limit's take checks out the
    connection the route body then uses, reminder_api.deps.KEPT_CONNECTION, or a create
    takes in its own first statement), the take in autocommit (a request that fails
    still counts; a first create's fast statement with it, writing nothing without a
    bound), the rest of the route's statements in a transaction (nothing partial), and
    the connection back in the pool after a 201, a 404 raised in the route body, and a
    429."""
    alice = bearer(token_for("alice"))
    with apps(db, settings, clock, 1, rate_limit_per_minute=60, rate_limit_burst=2) as (a,):
        with pool_use(db) as seen:
            created = a.post(URL, json=new_york(), headers=alice)
        assert created.status_code == 201, created.text
        assert seen.checkouts == 1
        take, *route = seen.autocommit
        assert take is True  # with the fast insert, which wrote nothing without a bound
        assert route  # a first create: the bound started, the INSERT, ...
        assert not any(route)  # ... in one transaction
        assert db.pool.checkedout() == 0  # type: ignore[attr-defined]

        with pool_use(db) as seen:
            missing = a.get(f"{URL}/{uuid.uuid4()}", headers=alice)
        assert missing.status_code == 404
        assert seen.checkouts == 1
        assert db.pool.checkedout() == 0  # type: ignore[attr-defined]

        with pool_use(db) as seen:
            refused = a.post(URL, json=new_york(), headers=alice)
        assert refused.status_code == 429
        assert (seen.checkouts, seen.autocommit) == (1, [True])  # the take (and no insert)
        assert db.pool.checkedout() == 0  # type: ignore[attr-defined]
    with db.connect() as conn:
        assert conn.execute(text("SELECT count(*) FROM reminders")).scalar_one() == 1


def test_a_create_within_the_quota_is_one_statement_with_the_take(
    db: Engine, settings: Settings, clock: Clock, token_for: TokenFor
) -> None:
    """Issue 15: once the user has a bound, a create within the quota is one statement,
    a transaction of its own: the rate limit's take, the bound raised and the INSERT
    (`reminder_take_and_insert_within_bound`). A keyed create looks its key up outside
    a transaction, then runs the same one statement; a retry with the same key is
    answered its replay, a reused key with another body is still 409, and each of them
    is counted once (r goes down by one per request: the clock stands still)."""
    alice = bearer(token_for("alice"))
    changes = {"rate_limit_per_minute": 60, "rate_limit_burst": 10, "quota_live_reminders": 5}
    with apps(db, settings, clock, 1, **changes) as (a,):
        assert a.post(URL, json=new_york("2030-07-01T09:00"), headers=alice).status_code == 201
        with pool_use(db) as seen:
            plain = a.post(URL, json=new_york("2030-07-04T09:00"), headers=alice)
        assert plain.status_code == 201, plain.text
        assert seen.autocommit == [True]  # the take, the bound and the INSERT
        assert plain.headers["RateLimit"] == '"per-user";r=8;t=2'  # the second request
        assert _bound(db, "alice") == 2
        keyed = {**alice, "Idempotency-Key": "k-fast"}
        with pool_use(db) as seen:
            created = a.post(URL, json=new_york("2030-07-02T09:00"), headers=keyed)
        assert created.status_code == 201, created.text
        # The key looked up, then the take, the bound and the INSERT.
        assert seen.autocommit == [True, True]
        assert created.headers["RateLimit"] == '"per-user";r=7;t=3'
        assert _bound(db, "alice") == 3
        replayed = a.post(URL, json=new_york("2030-07-02T09:00"), headers=keyed)
        assert replayed.status_code == 200
        assert replayed.json()["id"] == created.json()["id"]
        assert replayed.headers["RateLimit"] == '"per-user";r=6;t=4'
        reused = a.post(URL, json=new_york("2030-07-03T09:00"), headers=keyed)
        assert assert_problem(reused, 409)["status"] == 409
        assert reused.headers["RateLimit"] == '"per-user";r=5;t=5'
        assert _bound(db, "alice") == 3
    with db.connect() as conn:
        assert conn.execute(text("SELECT count(*) FROM reminders")).scalar_one() == 3


class Ticking(Clock):
    """A clock one second later at every read: which read a value came from shows."""

    def __call__(self) -> datetime:
        self.now += timedelta(seconds=1)
        return self.now


def test_the_take_in_the_create_statement_is_at_the_time_read_as_it_is_sent(
    db: Engine, settings: Settings, clock: Clock, token_for: TokenFor
) -> None:
    """The take's `now` is read as the create's statement is sent, after the route's own
    (the reminder's created_at), so concurrent takes' times follow the order they reach
    the database in and `RateLimit` counts down by one (adversarial trial, 2026-12-06:
    read with the route's, before the schedule was computed, r went 4, 2, 2, 1, 0)."""
    ticking = Ticking(clock.now)
    alice = bearer(token_for("alice"))
    with apps(db, settings, ticking, 1, **SIXTY_A_MINUTE) as (a,):
        assert a.post(URL, json=new_york(), headers=alice).status_code == 201  # the bound
        created = a.post(URL, json=new_york("2030-07-02T09:00"), headers=alice)
    assert created.status_code == 201
    with db.connect() as conn:
        tat = conn.execute(text("SELECT tat FROM rate_limits")).scalar_one()
    made = datetime.fromisoformat(created.json()["created_at"].replace("Z", "+00:00"))
    assert tat > made + timedelta(seconds=1)  # TAT = the take's now + 1 s, a later read
    # the TAT is 1 s ahead of the take's own now: two of three left
    assert created.headers["RateLimit"] == '"per-user";r=2;t=1'


def test_a_replay_past_the_budget_is_refused_and_a_new_key_writes_nothing(
    db: Engine, settings: Settings, clock: Clock, token_for: TokenFor
) -> None:
    """A keyed create is counted like any request (GCRA, 60 a minute in bursts of 2,
    the clock standing still): past the budget its replay is 429 and a new key's create
    is 429 with nothing written (its take refused in the statement that would insert)."""
    alice = bearer(token_for("alice"))
    with apps(db, settings, clock, 1, rate_limit_per_minute=60, rate_limit_burst=2) as (a,):
        first = a.post(URL, json=new_york(), headers={**alice, "Idempotency-Key": "k1"})
        second = a.post(URL, json=new_york(), headers={**alice, "Idempotency-Key": "k2"})
        assert [first.status_code, second.status_code] == [201, 201]
        replay = a.post(URL, json=new_york(), headers={**alice, "Idempotency-Key": "k1"})
        assert assert_problem(replay, 429)["type"] == "/problems/rate-limited"
        new = a.post(URL, json=new_york(), headers={**alice, "Idempotency-Key": "k3"})
        assert assert_problem(new, 429)["type"] == "/problems/rate-limited"
        clock.now += timedelta(seconds=1)  # one request's cost later: the replay is answered
        again = a.post(URL, json=new_york(), headers={**alice, "Idempotency-Key": "k1"})
        assert again.status_code == 200
        assert again.json()["id"] == first.json()["id"]
    with db.connect() as conn:
        keys = conn.execute(text("SELECT client_request_id FROM reminders ORDER BY 1")).scalars()
        assert list(keys) == ["k1", "k2"]
    assert _bound(db, "alice") == 2


def test_a_kept_connection_of_another_engine_is_returned_before_a_checkout(
    db: Engine, settings: Settings, clock: Clock
) -> None:
    """With cells, a route may connect to another cell than the one its user's take ran
    on (an operator's route): the kept connection goes back to its pool before the new
    checkout, so one request never holds two connections (a pool sized for one per
    request cannot run dry)."""
    ctx = build_app(settings, db, clock).state.ctx
    other = make_engine(str(db.url.render_as_string(hide_password=False)), pool_size=1)
    try:

        def in_route_thread() -> None:
            keep_for_route(other, other.connect())
            assert other.pool.checkedout() == 1  # type: ignore[attr-defined]
            with ctx.connect() as conn:  # the app's engine, not `other`
                assert conn.engine is db
                assert other.pool.checkedout() == 0  # type: ignore[attr-defined]
            assert KEPT_CONNECTION.get() is None

        contextvars.copy_context().run(in_route_thread)
    finally:
        other.dispose()


def _tat_ahead_s(db: Engine, clock: Clock, user_id: str) -> float | None:
    """How far the user's TAT is after the test clock's now, seconds (None: no row)."""
    with db.connect() as conn:
        tat = conn.execute(
            text("SELECT tat FROM rate_limits WHERE user_id = :u"), {"u": user_id}
        ).scalar_one_or_none()
    return None if tat is None else (tat - clock.now).total_seconds()


def test_a_create_counts_once_whichever_way_it_ends(
    db: Engine, settings: Settings, clock: Clock, token_for: TokenFor
) -> None:
    """Issue 15: `POST /v1/reminders` takes the budget in its own first statement; every
    way a create ends spends exactly one request (GCRA at 60 a minute, 1 s each, bursts
    of 2; worked by hand): a first create (no quota bound yet: the take, then the bound
    started in a transaction), a 201, a 422 raised in the route body before the
    statement (counted as its response starts), a quota refusal, and a refusal by the
    take itself, which writes nothing."""
    alice = bearer(token_for("alice"))
    changes = {"rate_limit_per_minute": 60, "rate_limit_burst": 2, "quota_live_reminders": 2}
    with apps(db, settings, clock, 1, **changes) as (a,):
        first = a.post(URL, json=new_york("2030-07-01T09:00"), headers=alice)
        assert first.status_code == 201, first.text
        assert first.headers["RateLimit"] == '"per-user";r=1;t=1'
        assert _tat_ahead_s(db, clock, "alice") == 1.0
        second = a.post(URL, json=new_york("2030-07-02T09:00"), headers=alice)
        assert second.status_code == 201, second.text
        assert second.headers["RateLimit"] == '"per-user";r=0;t=2'
        assert (_bound(db, "alice"), _tat_ahead_s(db, clock, "alice")) == (2, 2.0)

        # Past the budget: refused by the create's statement; nothing written.
        before = table_counts(db)
        with pool_use(db) as seen:
            refused = a.post(URL, json=new_york("2030-07-03T09:00"), headers=alice)
        assert assert_problem(refused, 429)["type"] == "/problems/rate-limited"
        assert refused.headers["Retry-After"] == "1"
        assert refused.headers["RateLimit"] == '"per-user";r=0;t=2'
        assert seen.autocommit == [True]  # one statement, which wrote nothing
        assert table_counts(db) == before
        assert (_bound(db, "alice"), _tat_ahead_s(db, clock, "alice")) == (2, 2.0)

        # A rule refused in the route body (RFC 5545 allows FREQ=MINUTELY; the minimum
        # spacing does not): its 422 spends one request.
        clock.now += timedelta(seconds=1)
        minutely = a.post(URL, json=new_york(rrule="FREQ=MINUTELY"), headers=alice)
        assert assert_problem(minutely, 422)["status"] == 422
        assert minutely.headers["RateLimit"] == '"per-user";r=0;t=2'
        assert _tat_ahead_s(db, clock, "alice") == 2.0

        # At the quota (2 live): refused by the quota, counted once (not twice).
        clock.now += timedelta(seconds=1)
        at_quota = a.post(URL, json=new_york("2030-07-04T09:00"), headers=alice)
        assert assert_problem(at_quota, 429)["type"] == "/problems/quota-exceeded"
        assert at_quota.headers["RateLimit"] == '"per-user";r=0;t=2'
        assert "Retry-After" not in at_quota.headers
        assert _tat_ahead_s(db, clock, "alice") == 2.0
    with db.connect() as conn:
        assert conn.execute(text("SELECT count(*) FROM reminders")).scalar_one() == 2
