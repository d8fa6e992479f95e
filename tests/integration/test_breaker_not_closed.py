"""How long a provider's circuit breaker has not been closed, measured from when it LEFT
the closed state, not from pybreaker's opened_at, which every failed half-open probe
moves (a new-user trial: `reminders status` never alerted on a breaker that was hard down,
since "not closed for" never exceeded BREAKER_RESET_TIMEOUT_S).

Expected behaviour from the breaker's definition (pybreaker README: a failed half-open
probe opens the breaker again for reset_timeout) and from issue 7's alert "breaker open
for over 5 minutes" (ALERT_BREAKER_OPEN_S, set low here): a provider down for longer than
the threshold is an ALERT, exit status 1, however often its probes ran; OK again once a
probe succeeds. Providers are real local fakes of the Resend API, the shared state a real
Redis, `reminders status` a real process.
"""

from __future__ import annotations

import math
import threading
import time
import uuid
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path

import pytest
from prometheus_client import REGISTRY
from redis import Redis
from redis.exceptions import RedisError

from sender.providers.failover import (
    REDIS_NAMESPACE,
    FailoverProvider,
    not_closed_since_key,
    read_shared_breaker,
)
from sender.providers.file_sink import FileSinkProvider
from tests.integration.test_failover import EMAIL, new_key, resend
from tests.integration.test_lag_status import status
from tests.support.fake_provider import FakeProvider

pytestmark = pytest.mark.timeout(120)

#: Where the test runs claim a Redis database of their own (`reminders status` reads the
#: default namespace, so two runs at once must not share a database).
REDIS_BASE = "redis://127.0.0.1:6379"
RESET_S = 0.5  # BREAKER_RESET_TIMEOUT_S: a probe every half second
GAUGE = "reminders_provider_breaker_not_closed_since_timestamp_seconds"


@pytest.fixture
def redis_url() -> Iterator[str]:
    """redis://.../<n>: a database 1..15 this test holds alone (a lock key in database 0,
    expiring on its own should the run die), emptied of breaker keys before and after."""
    control = Redis.from_url(f"{REDIS_BASE}/0", socket_timeout=1, socket_connect_timeout=1)
    try:
        control.ping()
    except RedisError as exc:
        pytest.skip(f"no Redis at {REDIS_BASE}: {exc}")
    token = uuid.uuid4().hex
    lock = next(
        (
            key
            for key in (f"reminders-tests:breaker-db:{n}" for n in range(1, 16))
            if control.set(key, token, nx=True, ex=120)
        ),
        None,
    )
    if lock is None:
        pytest.skip("every Redis database is held by another test run")
    url = f"{REDIS_BASE}/{lock.rpartition(':')[2]}"
    client = Redis.from_url(url, socket_timeout=1, socket_connect_timeout=1)

    def clear() -> None:
        for key in client.scan_iter(match=f"{REDIS_NAMESPACE}:*"):
            client.delete(key)

    clear()
    try:
        yield url
    finally:
        clear()
        client.close()
        if control.get(lock) == token.encode():
            control.delete(lock)
        control.close()


@pytest.fixture
def redis(redis_url: str) -> Iterator[Redis]:
    client = Redis.from_url(redis_url, socket_timeout=1, socket_connect_timeout=1)
    yield client
    client.close()


@pytest.fixture
def primary() -> Iterator[FakeProvider]:
    """A fake Resend API that is down: 503 to every send until `inject()` heals it."""
    fake = FakeProvider().start()
    try:
        fake.inject(always={"kind": "503"})
        yield fake
    finally:
        fake.stop()


def provider(primary_url: str, tmp_path: Path, redis: Redis | None) -> FailoverProvider:
    """Resend (the fake, primary) then the file sink, as EMAIL_PROVIDER=resend and
    EMAIL_PROVIDER_BACKUP=file name them; the breaker opens at the first failure."""
    return FailoverProvider(
        [resend(primary_url, "resend"), FileSinkProvider(tmp_path / "mail")],
        fail_max=1,
        reset_timeout_s=RESET_S,
        redis=redis,
    )


def probe_for(fp: FailoverProvider, seconds: float) -> None:
    """Send for `seconds`: every RESET_S a half-open probe reaches the primary."""
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        assert fp.send(EMAIL, idempotency_key=new_key()).provider == "file"
        time.sleep(0.1)


def probe_until(fp: FailoverProvider, stop: threading.Event) -> None:
    while not stop.wait(0.1):
        fp.send(EMAIL, idempotency_key=new_key())


def gauge(name: str) -> float | None:
    return REGISTRY.get_sample_value(GAUGE, {"provider": name})


def test_failed_probes_do_not_move_when_the_breaker_left_closed(
    primary: FakeProvider, tmp_path: Path
) -> None:
    fp = provider(primary.url, tmp_path, redis=None)
    before = datetime.now(UTC)
    fp.send(EMAIL, idempotency_key=new_key())
    left = fp.not_closed_since()["resend"]
    assert left is not None
    assert before <= left <= datetime.now(UTC)

    probe_for(fp, 3 * RESET_S)
    probes = len(primary.state.requests)
    assert probes >= 3  # the first failure, then failed probes
    assert fp.not_closed_since() == {"resend": left, "file": None}
    assert fp.breaker_states()["resend"] == "open"
    assert gauge("resend") == pytest.approx(left.timestamp())
    assert gauge("file") == 0

    primary.inject()  # the provider is back: the next probe closes the breaker
    time.sleep(RESET_S + 0.1)
    assert fp.send(EMAIL, idempotency_key=new_key()).provider == "resend"
    assert fp.not_closed_since() == {"resend": None, "file": None}
    assert gauge("resend") == 0


def test_a_shared_breaker_records_the_time_once_in_redis(
    primary: FakeProvider, tmp_path: Path, redis: Redis
) -> None:
    a = provider(primary.url, tmp_path, redis)
    b = provider(primary.url, tmp_path, redis)
    a.send(EMAIL, idempotency_key=new_key())
    key = not_closed_since_key("resend")
    recorded = redis.get(key)
    assert recorded is not None

    probe_for(b, 3 * RESET_S)  # B's probes fail and reopen it
    reading = read_shared_breaker(redis, "resend")
    assert reading.state == "open"
    assert redis.get(key) == recorded
    assert reading.not_closed_since is not None
    assert reading.opened_at is not None
    # opened_at (whole seconds) moved with the probes; not_closed_since did not.
    assert reading.opened_at.timestamp() > math.floor(float(recorded))

    primary.inject()
    time.sleep(RESET_S + 0.1)
    assert b.send(EMAIL, idempotency_key=new_key()).provider == "resend"
    assert redis.get(key) is None
    assert read_shared_breaker(redis, "resend").not_closed_since is None


@pytest.mark.usefixtures("db")  # empty tables: every other check of the report is OK
def test_status_alerts_on_a_breaker_down_longer_than_the_threshold(
    database_url: str,
    primary: FakeProvider,
    tmp_path: Path,
    redis_url: str,
    redis: Redis,
) -> None:
    env = {
        "EMAIL_PROVIDER": "resend",
        "RESEND_API_KEY": "re_test",
        "EMAIL_PROVIDER_BACKUP": "file",
        "BREAKER_REDIS_URL": redis_url,
        "BREAKER_RESET_TIMEOUT_S": str(RESET_S),
        # Over BREAKER_RESET_TIMEOUT_S plus the second Redis rounds opened_at down to, so
        # that opened_at, which the probes keep fresh, can never read as old enough.
        "ALERT_BREAKER_OPEN_S": "3",
        # No workload runs here: their roles are not asked for (tests/integration/
        # test_worker_heartbeats.py checks those).
        "ALERT_WORKER_ROLES": "none",
    }
    fp = provider(primary.url, tmp_path, redis)
    probe_for(fp, 4.5)  # down for 4.5 s > 3 s, a failed probe every 0.5 s
    stop = threading.Event()
    prober = threading.Thread(target=lambda: probe_until(fp, stop))
    prober.start()  # ...and it stays down, probed, while `reminders status` runs
    try:
        code, checks = status(database_url, tmp_path, **env)
    finally:
        stop.set()
        prober.join()
    breaker = checks["breaker_resend"]
    # The prober keeps the breaker cycling open -> half-open (its probe call, a few ms) ->
    # open; `status` may read it in either, and both are "not closed": an alert either way.
    assert breaker["state"] == "alert", breaker
    assert breaker["value"] in ("open", "half-open"), breaker
    assert breaker["detail"].startswith("not closed for "), breaker
    assert code == 1
    assert checks["breaker_file"]["state"] == "ok"

    primary.inject()
    time.sleep(RESET_S + 0.1)
    assert fp.send(EMAIL, idempotency_key=new_key()).provider == "resend"
    code, checks = status(database_url, tmp_path, **env)
    assert checks["breaker_resend"]["state"] == "ok", checks["breaker_resend"]
    assert code == 0, checks
