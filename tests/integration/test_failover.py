"""Provider failover behind circuit breakers (issue 5; docs/design.md,
"Provider failover"), over HTTP against two real local fakes of the Resend API
(tests/support/fake_provider.py), one per provider.

Expected behaviour comes from docs/design.md, "Provider failover", and issue 5: fail over
only on an error that proves the primary did not take the message (connection refused,
5xx/429 answer, breaker open); an ambiguous timeout is retried on the same provider with
the same idempotency key; a permanent error neither fails over nor counts against the
breaker; pybreaker's breaker opens after `fail_max` consecutive failures and lets a
half-open probe through after `reset_timeout` (pybreaker README: "fail_max",
"reset_timeout").
"""

from __future__ import annotations

import socket
import threading
import time
import uuid
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest
from prometheus_client import REGISTRY
from pydantic import ValidationError
from redis import Redis
from redis.exceptions import RedisError
from tenacity import Retrying, retry_if_exception_type, stop_after_attempt, wait_none

from reminder_core.errors import PermanentDeliveryError, TransientDeliveryError
from reminder_core.settings import Settings
from sender.main import build_provider
from sender.providers.base import OutgoingEmail, SendReceipt
from sender.providers.failover import FailoverProvider
from sender.providers.resend import ResendProvider
from tests.support.fake_provider import FakeProvider
from tests.support.providers import resend_provider

EMAIL = OutgoingEmail(
    to="ada@example.com", sender="r@example.com", subject="Standup", text="t", html="<p>t</p>"
)
REDIS_URL = "redis://127.0.0.1:6379/0"


@pytest.fixture
def primary() -> Iterator[FakeProvider]:
    fake = FakeProvider().start()
    yield fake
    fake.stop()


@pytest.fixture
def backup() -> Iterator[FakeProvider]:
    fake = FakeProvider().start()
    yield fake
    fake.stop()


def resend(url: str, name: str, *, read_timeout_s: float = 5.0) -> ResendProvider:
    return resend_provider(url, name=name, read_timeout_s=read_timeout_s)


def failover(
    primary_url: str,
    backup_url: str,
    *,
    fail_max: int = 3,
    reset_timeout_s: float = 30.0,
    read_timeout_s: float = 5.0,
    redis: Redis | None = None,
    redis_namespace: str = "test",
) -> FailoverProvider:
    return FailoverProvider(
        [
            resend(primary_url, "primary", read_timeout_s=read_timeout_s),
            resend(backup_url, "backup", read_timeout_s=read_timeout_s),
        ],
        fail_max=fail_max,
        reset_timeout_s=reset_timeout_s,
        redis=redis,
        redis_namespace=redis_namespace,
    )


def closed_port() -> int:
    """A local port nothing listens on (connections are refused)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def keys_seen(fake: FakeProvider) -> list[str]:
    with fake.state.lock:
        return [r["key"] for r in fake.state.requests]


def new_key() -> str:
    return f"{uuid.uuid4()}-2026-01-05T08:30:00Z"


def send_with_retries(provider: FailoverProvider, key: str, attempts: int = 3) -> SendReceipt:
    """What the sender's retry loop does: call again on TransientDeliveryError, same key."""
    for attempt in Retrying(
        retry=retry_if_exception_type(TransientDeliveryError),
        stop=stop_after_attempt(attempts),
        wait=wait_none(),
        reraise=True,
    ):
        with attempt:
            return provider.send(EMAIL, idempotency_key=key)
    raise AssertionError("unreachable")


def breaker_metric(provider: str, state: str) -> float | None:
    return REGISTRY.get_sample_value(
        "reminders_provider_breaker_state",
        {"provider": provider, "reminders_provider_breaker_state": state},
    )


# --- primary down -------------------------------------------------------------------------


def test_primary_answering_503_fails_over_and_opens_after_fail_max(
    primary: FakeProvider, backup: FakeProvider
) -> None:
    primary.inject(always={"kind": "503"})
    fp = failover(primary.url, backup.url, fail_max=3)
    keys = [new_key() for _ in range(6)]

    receipts = [fp.send(EMAIL, idempotency_key=k) for k in keys]

    assert [r.provider for r in receipts] == ["backup"] * 6
    assert keys_seen(backup) == keys
    # Three failures open the breaker; while it is open the primary is never called.
    assert keys_seen(primary) == keys[:3]
    assert fp.breaker_states() == {"primary": "open", "backup": "closed"}
    assert breaker_metric("primary", "open") == 1.0
    assert fp.ready()


def test_primary_refusing_connections_fails_over(backup: FakeProvider) -> None:
    fp = failover(f"http://127.0.0.1:{closed_port()}", backup.url, fail_max=2)
    keys = [new_key() for _ in range(3)]

    receipts = [fp.send(EMAIL, idempotency_key=k) for k in keys]

    assert [r.provider for r in receipts] == ["backup"] * 3
    assert backup.state.accepted.keys() == set(keys)
    assert fp.breaker_states()["primary"] == "open"


def test_429_from_primary_fails_over(primary: FakeProvider, backup: FakeProvider) -> None:
    primary.inject({"kind": "429", "retry_after": 30})
    fp = failover(primary.url, backup.url)
    key = new_key()

    assert fp.send(EMAIL, idempotency_key=key).provider == "backup"
    assert keys_seen(primary) == [key]
    assert fp.breaker_states() == {"primary": "closed", "backup": "closed"}  # 1 < fail_max


# --- recovery -----------------------------------------------------------------------------


def test_primary_back_after_reset_timeout_half_open_probe_closes_it(
    backup: FakeProvider,
) -> None:
    port = closed_port()
    fp = failover(f"http://127.0.0.1:{port}", backup.url, fail_max=2, reset_timeout_s=1.0)
    for _ in range(3):
        assert fp.send(EMAIL, idempotency_key=new_key()).provider == "backup"
    assert fp.breaker_states()["primary"] == "open"

    primary = FakeProvider(port).start()  # the primary comes back on its address
    try:
        assert fp.send(EMAIL, idempotency_key=new_key()).provider == "backup"  # still open
        assert keys_seen(primary) == []
        time.sleep(1.1)
        probe = new_key()
        assert fp.send(EMAIL, idempotency_key=probe).provider == "primary"
        assert keys_seen(primary) == [probe]
        assert fp.breaker_states()["primary"] == "closed"
        after = [new_key() for _ in range(3)]
        assert [fp.send(EMAIL, idempotency_key=k).provider for k in after] == ["primary"] * 3
        assert len(keys_seen(backup)) == 4  # traffic returned to the primary
    finally:
        primary.stop()


def test_failed_probe_opens_the_breaker_again(primary: FakeProvider, backup: FakeProvider) -> None:
    primary.inject(always={"kind": "503"})
    fp = failover(primary.url, backup.url, fail_max=1, reset_timeout_s=0.5)
    fp.send(EMAIL, idempotency_key=new_key())
    assert fp.breaker_states()["primary"] == "open"

    time.sleep(0.6)
    probe = new_key()
    assert fp.send(EMAIL, idempotency_key=probe).provider == "backup"
    assert keys_seen(primary)[-1] == probe  # the probe went to the primary, and failed
    assert fp.breaker_states()["primary"] == "open"
    assert fp.send(EMAIL, idempotency_key=new_key()).provider == "backup"
    assert len(keys_seen(primary)) == 2  # open again: no call until the next probe


def test_one_half_open_probe_at_a_time(primary: FakeProvider, backup: FakeProvider) -> None:
    primary.inject(always={"kind": "503"})
    fp = failover(primary.url, backup.url, fail_max=1, reset_timeout_s=0.5)
    fp.send(EMAIL, idempotency_key=new_key())
    primary.inject()
    with primary.state.lock:
        primary.state.latency_s = 0.8  # the probe is slow
    time.sleep(0.6)

    probe_key = new_key()
    probe: list[SendReceipt] = []
    thread = threading.Thread(
        target=lambda: probe.append(fp.send(EMAIL, idempotency_key=probe_key))
    )
    thread.start()
    deadline = time.monotonic() + 5
    while probe_key not in keys_seen(primary) and time.monotonic() < deadline:
        time.sleep(0.01)
    other = new_key()
    assert fp.send(EMAIL, idempotency_key=other).provider == "backup"  # probe in flight
    thread.join()

    assert probe[0].provider == "primary"
    assert other not in keys_seen(primary)
    assert fp.breaker_states()["primary"] == "closed"


# --- ambiguous failures -------------------------------------------------------------------


def test_timeout_after_send_is_retried_on_the_same_provider_with_the_same_key(
    primary: FakeProvider, backup: FakeProvider
) -> None:
    # The primary answers only after 1.5 s; the client gives up after 0.5 s, after the
    # request was sent: the primary may hold the message.
    primary.inject({"kind": "timeout", "seconds": 1.5})
    fp = failover(primary.url, backup.url, read_timeout_s=0.5)
    key = new_key()

    receipt = send_with_retries(fp, key)

    assert receipt.provider == "primary"
    assert keys_seen(primary) == [key, key]
    assert keys_seen(backup) == []
    assert fp.pinned_provider(key) is None  # answered: the pin is dropped
    time.sleep(1.2)  # let the first request finish on the fake
    assert list(primary.state.accepted) == [key]  # one message, deduplicated by the key


def test_ambiguous_key_waits_for_its_provider_even_while_its_breaker_is_open(
    primary: FakeProvider, backup: FakeProvider
) -> None:
    primary.inject({"kind": "timeout", "seconds": 1.0})
    fp = failover(primary.url, backup.url, fail_max=1, reset_timeout_s=1.0, read_timeout_s=0.3)
    key = new_key()

    with pytest.raises(TransientDeliveryError) as first:
        fp.send(EMAIL, idempotency_key=key)
    assert first.value.ambiguous
    assert fp.pinned_provider(key) == "primary"
    assert fp.breaker_states()["primary"] == "open"  # fail_max=1

    with pytest.raises(TransientDeliveryError) as second:
        fp.send(EMAIL, idempotency_key=key)
    assert second.value.ambiguous
    assert second.value.retry_after_s is not None
    assert 0 < second.value.retry_after_s <= 1.0
    other = new_key()
    assert fp.send(EMAIL, idempotency_key=other).provider == "backup"  # new keys fail over

    time.sleep(second.value.retry_after_s + 0.05)
    assert fp.send(EMAIL, idempotency_key=key).provider == "primary"  # the probe
    assert keys_seen(primary) == [key, key]
    assert keys_seen(backup) == [other]


def test_pinned_key_is_not_failed_over_on_a_later_503(
    primary: FakeProvider, backup: FakeProvider
) -> None:
    primary.inject({"kind": "timeout", "seconds": 1.0}, {"kind": "503"})
    fp = failover(primary.url, backup.url, read_timeout_s=0.3)
    key = new_key()

    with pytest.raises(TransientDeliveryError):
        fp.send(EMAIL, idempotency_key=key)
    # A 503 now only proves that this retry was not taken, not that the first one was not.
    with pytest.raises(TransientDeliveryError) as second:
        fp.send(EMAIL, idempotency_key=key)
    assert second.value.ambiguous
    assert fp.send(EMAIL, idempotency_key=key).provider == "primary"
    assert keys_seen(backup) == []


def test_409_key_already_known_to_the_primary_is_not_failed_over(
    primary: FakeProvider, backup: FakeProvider
) -> None:
    # Resend answers 409 when a request with the same Idempotency-Key is still in progress
    # (or had another payload): the primary may hold the message.
    primary.inject({"kind": "409"})
    fp = failover(primary.url, backup.url)
    key = new_key()

    assert send_with_retries(fp, key).provider == "primary"
    assert keys_seen(primary) == [key, key]
    assert keys_seen(backup) == []


def test_pin_set_by_the_caller_routes_the_key(primary: FakeProvider, backup: FakeProvider) -> None:
    """Another process's ambiguous attempt, read back from the delivery row."""
    fp = failover(primary.url, backup.url)
    key = new_key()
    fp.pin(key, "backup")

    assert fp.send(EMAIL, idempotency_key=key).provider == "backup"
    assert keys_seen(primary) == []


# --- permanent errors ---------------------------------------------------------------------


def test_400_is_permanent_no_failover_no_breaker_failure(
    primary: FakeProvider, backup: FakeProvider
) -> None:
    primary.inject(always={"kind": "400"})
    fp = failover(primary.url, backup.url, fail_max=2)

    for _ in range(4):
        with pytest.raises(PermanentDeliveryError):
            fp.send(EMAIL, idempotency_key=new_key())

    assert len(keys_seen(primary)) == 4
    assert keys_seen(backup) == []
    assert fp.breaker_states()["primary"] == "closed"


# --- both down: readiness -----------------------------------------------------------------


def test_both_down_not_ready_until_reset_timeout(
    primary: FakeProvider, backup: FakeProvider
) -> None:
    primary.inject(always={"kind": "503"})
    backup.inject(always={"kind": "500"})
    fp = failover(primary.url, backup.url, fail_max=1, reset_timeout_s=1.0)
    assert fp.ready()

    with pytest.raises(TransientDeliveryError) as first:
        fp.send(EMAIL, idempotency_key=new_key())
    assert not first.value.ambiguous
    assert fp.breaker_states() == {"primary": "open", "backup": "open"}
    assert not fp.ready()
    wait = fp.seconds_until_ready()
    assert 0 < wait <= 1.0

    with pytest.raises(TransientDeliveryError) as refused:
        fp.send(EMAIL, idempotency_key=new_key())
    assert refused.value.retry_after_s is not None
    assert 0 < refused.value.retry_after_s <= 1.0
    assert (len(keys_seen(primary)), len(keys_seen(backup))) == (1, 1)  # no call while open

    time.sleep(wait + 0.05)
    assert fp.ready()
    assert fp.seconds_until_ready() == 0.0
    primary.inject()
    assert fp.send(EMAIL, idempotency_key=new_key()).provider == "primary"
    assert fp.breaker_states() == {"primary": "closed", "backup": "open"}


# --- shared state through Redis -----------------------------------------------------------


@pytest.fixture
def redis_ns() -> Iterator[tuple[Redis, str]]:
    client = Redis.from_url(REDIS_URL, socket_timeout=1, socket_connect_timeout=1)
    try:
        client.ping()
    except RedisError as exc:
        pytest.skip(f"no Redis at {REDIS_URL}: {exc}")
    namespace = f"test-failover-{uuid.uuid4()}"
    yield client, namespace
    for key in client.scan_iter(match=f"{namespace}:*"):
        client.delete(key)
    client.close()


def test_breaker_state_shared_through_redis(
    primary: FakeProvider, backup: FakeProvider, redis_ns: tuple[Redis, str]
) -> None:
    client, namespace = redis_ns
    # Redis keeps opened_at in whole seconds: the breaker stays open 1 to 2 s.
    a = failover(primary.url, backup.url, fail_max=2, reset_timeout_s=2.0,
                 redis=client, redis_namespace=namespace)  # fmt: skip
    b = failover(primary.url, backup.url, fail_max=2, reset_timeout_s=2.0,
                 redis=client, redis_namespace=namespace)  # fmt: skip
    primary.inject(always={"kind": "503"})
    a.send(EMAIL, idempotency_key=new_key())
    a.send(EMAIL, idempotency_key=new_key())

    assert b.breaker_states() == {"primary": "open", "backup": "closed"}
    assert b.send(EMAIL, idempotency_key=new_key()).provider == "backup"
    assert len(keys_seen(primary)) == 2  # B never called the primary A found down

    primary.inject()
    time.sleep(2.1)
    assert b.send(EMAIL, idempotency_key=new_key()).provider == "primary"  # B's probe
    assert a.breaker_states()["primary"] == "closed"
    assert a.send(EMAIL, idempotency_key=new_key()).provider == "primary"


def test_unreachable_redis_falls_back_to_process_state(
    primary: FakeProvider, backup: FakeProvider
) -> None:
    dead = Redis.from_url(f"redis://127.0.0.1:{closed_port()}/0", socket_connect_timeout=0.2)
    fp = failover(primary.url, backup.url, redis=dead)
    assert fp.send(EMAIL, idempotency_key=new_key()).provider == "primary"


# --- concurrency --------------------------------------------------------------------------


def test_concurrent_sends_through_one_breaker_run_in_parallel(
    primary: FakeProvider, backup: FakeProvider
) -> None:
    n, latency = 8, 0.5
    with primary.state.lock:
        primary.state.latency_s = latency
    fp = failover(primary.url, backup.url)
    keys = [new_key() for _ in range(n)]
    barrier = threading.Barrier(n)

    def one(key: str) -> SendReceipt:
        barrier.wait()
        return fp.send(EMAIL, idempotency_key=key)

    started = time.monotonic()
    with ThreadPoolExecutor(max_workers=n) as pool:
        receipts = list(pool.map(one, keys))
    elapsed = time.monotonic() - started

    assert [r.provider for r in receipts] == ["primary"] * n
    with primary.state.lock:
        arrivals = [r["at"] for r in primary.state.requests]
    # Every request reached the provider before the first one was answered...
    assert max(arrivals) - min(arrivals) < latency
    # ...so the whole batch took about one latency, not n of them (serial: >= 4 s).
    assert elapsed < n * latency / 2, elapsed


# --- wiring -------------------------------------------------------------------------------


def test_build_provider_wraps_primary_and_backup(primary: FakeProvider, tmp_path: Path) -> None:
    settings = Settings(
        email_provider="resend",
        resend_api_url=primary.url,
        resend_api_key="k",
        email_provider_backup="file",
        mail_dir=tmp_path / "mail",
        breaker_fail_max=1,
        breaker_reset_timeout_s=60,
    )
    provider = build_provider(settings)
    assert isinstance(provider, FailoverProvider)
    assert [p.name for p in provider.providers] == ["resend", "file"]

    primary.inject(always={"kind": "503"})
    key = new_key()
    assert provider.send(EMAIL, idempotency_key=key).provider == "file"
    assert (tmp_path / "mail" / f"{key}.eml").exists()
    assert provider.breaker_states() == {"resend": "open", "file": "closed"}


def test_build_provider_refuses_bad_backups(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="another provider"):
        build_provider(Settings(email_provider="file", email_provider_backup="file",
                                state_dir=tmp_path))  # fmt: skip
    # An unknown name is refused with the settings, naming EMAIL_PROVIDER_BACKUP.
    with pytest.raises(ValidationError, match="email_provider_backup"):
        Settings(email_provider_backup="carrier-pigeon", state_dir=tmp_path)
    assert not isinstance(build_provider(Settings(state_dir=tmp_path)), FailoverProvider)
