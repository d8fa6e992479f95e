"""The profile service client against a real local HTTP server (tests/support).

Expected values come from the wire contract in `reminder_core/profile_service.py`
(docs/configuration.md, "Profile service"): the path escaping of RFC 3986 §2.1/§3.3, the
status classes, the full-jitter bounds of the retry policy (AWS Architecture Blog,
"Exponential Backoff and Jitter": wait n is uniform in [0, base·2^(n-1)]), the cache TTLs
and the time budget.
"""

from __future__ import annotations

import dataclasses
import json
import time
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import pytest

from reminder_core.errors import InfrastructureError
from reminder_core.profile_service import (
    HttpProfileSource,
    ProfileServiceConfig,
    profile_source_from_settings,
)
from reminder_core.profiles import LocalProfileSource, Profile
from reminder_core.settings import Settings
from tests.support.fake_profile_service import FakeProfileService

TOKEN = "s3cret-token"
ALICE = {"email": "alice@example.com", "timezone": "America/New_York"}
ALICE_PROFILE = Profile(user_id="alice", email="alice@example.com", timezone="America/New_York")
BASE = 0.01  # retry_base_s of the tests: first backoff ceiling


class Timer:
    """A settable monotonic clock for the cache."""

    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


@pytest.fixture
def svc() -> Iterator[FakeProfileService]:
    with FakeProfileService({"alice": ALICE}, token=TOKEN) as service:
        yield service


MakeSource = Callable[..., HttpProfileSource]


@pytest.fixture
def make_source(svc: FakeProfileService) -> Iterator[MakeSource]:
    """Build a client of `svc` (cache off, recorded backoff) with config overrides."""
    built: list[HttpProfileSource] = []

    def make(
        *,
        timer: Callable[[], float] = time.monotonic,
        sleep: Callable[[float], None] | None = None,
        **overrides: Any,
    ) -> HttpProfileSource:
        config = ProfileServiceConfig(
            base_url=svc.url,
            token=TOKEN,
            connect_timeout_s=1.0,
            read_timeout_s=1.0,
            attempts=3,
            retry_base_s=BASE,
            budget_s=5.0,
            cache_ttl_s=0,
            not_found_ttl_s=0,
        )
        source = HttpProfileSource(
            dataclasses.replace(config, **overrides),
            timer=timer,
            sleep=sleep if sleep is not None else (lambda _s: None),
        )
        built.append(source)
        return source

    yield make
    for source in built:
        source.close()


# --- the wire contract ---


def test_found_profile_and_request_shape(svc: FakeProfileService, make_source: MakeSource) -> None:
    assert make_source().get("alice") == ALICE_PROFILE

    [seen] = svc.requests
    assert seen.target == "/users/alice"
    assert seen.authorization == f"Bearer {TOKEN}"
    assert seen.accept == "application/json"


def test_no_authorization_header_without_a_token(make_source: MakeSource) -> None:
    with FakeProfileService({"alice": ALICE}) as open_svc:
        make_source(base_url=open_svc.url + "/", token=None).get("alice")

        [seen] = open_svc.requests
    assert seen.target == "/users/alice"  # a trailing slash on the base URL is not doubled
    assert seen.authorization is None


def test_unknown_user_is_none(svc: FakeProfileService, make_source: MakeSource) -> None:
    assert make_source().get("carol") is None
    assert svc.targets() == ["/users/carol"]  # 404 is an answer, not retried


def test_missing_or_null_timezone_means_utc(
    svc: FakeProfileService, make_source: MakeSource
) -> None:
    svc.profiles["dave"] = {"email": "dave@example.com", "timezone": None, "name": "Dave"}
    svc.profiles["erin"] = {"email": "erin@example.com"}
    source = make_source()

    assert source.get("dave") == Profile("dave", "dave@example.com", "UTC")
    assert source.get("erin") == Profile("erin", "erin@example.com", "UTC")


@pytest.mark.parametrize(
    ("user_id", "target"),
    [
        ("../admin", "/users/..%2Fadmin"),
        ("a/b?x=1", "/users/a%2Fb%3Fx%3D1"),
        ("..", "/users/%2E%2E"),
        (".", "/users/%2E"),
        ("#frag", "/users/%23frag"),
        ("50%", "/users/50%25"),
        ("auth0|123", "/users/auth0%7C123"),
        ("zoë", "/users/zo%C3%AB"),
    ],
)
def test_user_id_is_one_escaped_path_segment(
    svc: FakeProfileService, make_source: MakeSource, user_id: str, target: str
) -> None:
    svc.profiles["admin"] = {"email": "root@example.com", "timezone": "UTC"}  # the decoy
    svc.profiles[user_id] = {"email": "hostile@example.com", "timezone": "UTC"}

    profile = make_source().get(user_id)

    assert svc.targets() == [target]
    assert profile == Profile(user_id, "hostile@example.com", "UTC")


def test_unknown_hostile_id_never_reaches_another_profile(
    svc: FakeProfileService, make_source: MakeSource
) -> None:
    svc.profiles["admin"] = {"email": "root@example.com", "timezone": "UTC"}

    assert make_source().get("../admin") is None
    assert svc.targets() == ["/users/..%2Fadmin"]


def test_empty_user_id_is_unknown_without_a_request(
    svc: FakeProfileService, make_source: MakeSource
) -> None:
    assert make_source().get("") is None
    assert svc.targets() == []


# --- retries ---


@pytest.mark.parametrize(
    "fault",
    [
        {"kind": "status", "status": 500},
        {"kind": "status", "status": 502},
        {"kind": "status", "status": 503},
        {"kind": "status", "status": 504},
        {"kind": "status", "status": 429},
        {"kind": "status", "status": 408},
        {"kind": "drop"},
    ],
    ids=lambda f: str(f.get("status", f["kind"])),
)
def test_transient_failure_is_retried(
    svc: FakeProfileService, make_source: MakeSource, fault: dict[str, Any]
) -> None:
    svc.inject(fault)

    assert make_source().get("alice") == ALICE_PROFILE
    assert svc.targets() == ["/users/alice"] * 2


def test_retries_back_off_with_full_jitter(
    svc: FakeProfileService, make_source: MakeSource
) -> None:
    svc.inject({"kind": "status", "status": 500}, {"kind": "status", "status": 503})
    sleeps: list[float] = []

    assert make_source(sleep=sleeps.append).get("alice") == ALICE_PROFILE

    assert svc.targets() == ["/users/alice"] * 3
    assert len(sleeps) == 2
    assert 0 <= sleeps[0] <= BASE
    assert 0 <= sleeps[1] <= 2 * BASE


def test_read_timeout_is_retried(svc: FakeProfileService, make_source: MakeSource) -> None:
    svc.inject({"kind": "latency", "seconds": 2.0})

    assert make_source(read_timeout_s=0.3).get("alice") == ALICE_PROFILE
    assert len(svc.requests) == 2


def test_persistent_5xx_gives_up_after_the_attempts(
    svc: FakeProfileService, make_source: MakeSource
) -> None:
    svc.inject(always={"kind": "status", "status": 503})

    with pytest.raises(InfrastructureError, match="503"):
        make_source(attempts=3).get("alice")
    assert len(svc.requests) == 3


def test_refused_connection_is_an_infrastructure_error(make_source: MakeSource) -> None:
    with FakeProfileService() as gone:
        url = gone.url
    # The port is closed now: every attempt is refused.
    with pytest.raises(InfrastructureError, match="ConnectError"):
        make_source(base_url=url).get("alice")


def test_stalled_service_is_bounded_by_the_budget(
    svc: FakeProfileService, make_source: MakeSource
) -> None:
    svc.inject(always={"kind": "latency", "seconds": 10.0})
    budget_s, read_s = 1.0, 0.3
    source = make_source(attempts=10, read_timeout_s=read_s, budget_s=budget_s, sleep=time.sleep)

    started = time.monotonic()
    with pytest.raises(InfrastructureError):
        source.get("alice")
    elapsed = time.monotonic() - started

    # Contract: no attempt starts after the budget and each is capped by what remains;
    # the slack covers thread scheduling, not another attempt.
    assert elapsed < budget_s + 0.5
    assert 2 <= len(svc.requests) <= 10


# --- answers that are not retried ---


@pytest.mark.parametrize("status", [400, 401, 403, 410, 301])
def test_other_statuses_fail_at_once(
    svc: FakeProfileService, make_source: MakeSource, status: int
) -> None:
    svc.inject({"kind": "status", "status": status})

    with pytest.raises(InfrastructureError, match=str(status)):
        make_source().get("alice")
    assert len(svc.requests) == 1


def test_wrong_token_is_not_an_unknown_user(
    svc: FakeProfileService, make_source: MakeSource
) -> None:
    with pytest.raises(InfrastructureError, match="401"):
        make_source(token="wrong").get("alice")
    assert len(svc.requests) == 1


@pytest.mark.parametrize(
    "body",
    [
        "not json",
        '{"email": ',
        "[]",
        '"alice@example.com"',
        '{"timezone": "UTC"}',
        '{"email": 42}',
        '{"email": "", "timezone": "UTC"}',
        '{"email": "no-at-sign", "timezone": "UTC"}',
        json.dumps({"email": "a@example.com\r\nBcc: all@example.com"}),
        '{"email": "a@example.com", "timezone": "Mars/Olympus_Mons"}',
        '{"email": "a@example.com", "timezone": 5}',
        "[" * 50_000,  # nesting deeper than the JSON parser's recursion limit
        json.dumps({"email": "a@example.com", "pad": "x" * 70_000}),  # over 64 KiB
    ],
    ids=lambda b: b[:30],
)
def test_malformed_profile_fails_at_once(
    svc: FakeProfileService, make_source: MakeSource, body: str
) -> None:
    svc.inject({"kind": "body", "body": body})

    with pytest.raises(InfrastructureError):
        make_source().get("alice")
    assert len(svc.requests) == 1


# --- the cache ---


def test_cache_hit_within_the_ttl_then_refetch(
    svc: FakeProfileService, make_source: MakeSource
) -> None:
    timer = Timer()
    source = make_source(cache_ttl_s=60.0, timer=timer)

    assert source.get("alice") == ALICE_PROFILE
    svc.profiles["alice"] = {"email": "alice@new.example", "timezone": "Europe/Paris"}
    timer.now += 59.0
    assert source.get("alice") == ALICE_PROFILE  # cached: the change is not seen yet
    assert len(svc.requests) == 1

    timer.now += 2.0  # 61 s after the answer: expired
    assert source.get("alice") == Profile("alice", "alice@new.example", "Europe/Paris")
    assert len(svc.requests) == 2


def test_not_found_is_cached_briefly(svc: FakeProfileService, make_source: MakeSource) -> None:
    timer = Timer()
    source = make_source(cache_ttl_s=60.0, not_found_ttl_s=5.0, timer=timer)

    assert source.get("carol") is None
    svc.profiles["carol"] = {"email": "carol@example.com", "timezone": "UTC"}
    timer.now += 4.0
    assert source.get("carol") is None
    assert len(svc.requests) == 1

    timer.now += 1.5  # 5.5 s after the 404
    assert source.get("carol") == Profile("carol", "carol@example.com", "UTC")
    assert len(svc.requests) == 2


def test_failures_are_not_cached(svc: FakeProfileService, make_source: MakeSource) -> None:
    source = make_source(attempts=1, cache_ttl_s=60.0, not_found_ttl_s=5.0, timer=Timer())
    svc.inject({"kind": "status", "status": 503}, {"kind": "body", "body": "{"})

    with pytest.raises(InfrastructureError):
        source.get("alice")
    with pytest.raises(InfrastructureError):
        source.get("alice")
    assert source.get("alice") == ALICE_PROFILE
    assert len(svc.requests) == 3


def test_concurrent_lookups_share_the_cache(
    svc: FakeProfileService, make_source: MakeSource
) -> None:
    source = make_source(cache_ttl_s=60.0)

    with ThreadPoolExecutor(max_workers=8) as pool:
        results = list(pool.map(lambda _i: source.get("alice"), range(64)))

    assert results == [ALICE_PROFILE] * 64
    assert 1 <= len(svc.requests) <= 8  # at most one miss per thread before the first fill


# --- configuration ---


def test_settings_choose_the_source(tmp_path: Any) -> None:
    local = profile_source_from_settings(Settings(state_dir=tmp_path))
    assert isinstance(local, LocalProfileSource)

    remote = profile_source_from_settings(
        Settings(
            state_dir=tmp_path,
            profile_service_url="https://profiles.internal/api",
            profile_service_token="t0k",
            profile_service_read_timeout_s=4.0,
            profile_cache_ttl_s=30.0,
        )
    )
    try:
        assert isinstance(remote, HttpProfileSource)
        assert remote.config.base_url == "https://profiles.internal/api"
        assert remote.config.token == "t0k"
        assert remote.config.read_timeout_s == 4.0
        assert remote.config.cache_ttl_s == 30.0
    finally:
        remote.close()
