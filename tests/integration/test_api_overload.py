"""Overload (issue 15): past API_MAX_IN_FLIGHT requests the API sheds load at once with
503 problem+json and Retry-After (RFC 9110 §15.6.4, §10.2.3) instead of queueing requests
until clients time out, and liveness, readiness and metrics keep answering.

A real uvicorn server runs the app in a thread; a request is held in flight by a real
PostgreSQL row lock that the test takes on the reminder the request changes.
"""

from __future__ import annotations

import contextlib
import socket
import threading
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor

import httpx
import pytest
import uvicorn
from sqlalchemy import Engine, text

from reminder_core.settings import Settings
from reminder_core.tokens import mint_token
from tests.integration.api_support import NOW, PROBLEM_JSON, URL, Clock, bearer, build_app

QUEUE_TIMEOUT_S = 0.2


@contextlib.contextmanager
def serve(
    settings: Settings, db: Engine, *, max_queued: int, queue_timeout_s: float = QUEUE_TIMEOUT_S
) -> Iterator[str]:
    """The API with room for one request in flight and `max_queued` waiting (each for at
    most `queue_timeout_s`), served by uvicorn on a free port."""
    tight = settings.model_copy(
        update={
            "api_max_in_flight": 1,
            "api_max_queued": max_queued,
            "api_queue_timeout_s": queue_timeout_s,
            "api_retry_after_s": 3,
        }
    )
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    port = sock.getsockname()[1]
    config = uvicorn.Config(build_app(tight, db, Clock(NOW)), log_config=None, log_level="warning")
    srv = uvicorn.Server(config)
    thread = threading.Thread(target=srv.run, kwargs={"sockets": [sock]}, daemon=True)
    thread.start()
    deadline = time.monotonic() + 10
    while not srv.started and time.monotonic() < deadline:
        time.sleep(0.01)
    assert srv.started
    try:
        yield f"http://127.0.0.1:{port}"
    finally:
        srv.should_exit = True
        thread.join(timeout=10)
        sock.close()


@pytest.fixture
def server(settings: Settings, db: Engine) -> Iterator[str]:
    with serve(settings, db, max_queued=1) as url:
        yield url


def test_a_request_past_capacity_is_shed_at_once_and_health_still_answers(
    server: str, settings: Settings, db: Engine
) -> None:
    token = bearer(mint_token(settings, "alice"))
    with httpx.Client(base_url=server, headers=token, timeout=10) as c:
        created = c.post(URL, json={"title": "Tea", "start_local": "2029-06-02T09:00"})
        assert created.status_code == 201, created.text
        rid = created.json()["id"]
        before = db.connect().execute(text("SELECT count(*) FROM reminders")).scalar_one()

    with db.connect() as locker, ThreadPoolExecutor(2) as pool:
        # Hold the reminder's row: the PATCH below waits on it inside the API, in flight.
        locker.execute(text("SELECT 1 FROM reminders WHERE id = :id FOR UPDATE"), {"id": rid})
        held = pool.submit(
            httpx.patch, f"{server}{URL}/{rid}", json={"title": "Tea!"}, headers=token, timeout=30
        )
        _wait_until_waiting_on_lock(db)
        shed_before = _shed_count(httpx.get(f"{server}/metrics", timeout=5).text)

        started = time.monotonic()
        shed = httpx.post(
            f"{server}{URL}",
            json={"title": "Coffee", "start_local": "2029-06-02T10:00"},
            headers=token,
            timeout=10,
        )
        shed_after = time.monotonic() - started
        health = httpx.get(f"{server}/healthz", timeout=5)
        ready = httpx.get(f"{server}/readyz", timeout=5)
        metrics = httpx.get(f"{server}/metrics", timeout=5)
        locker.rollback()  # release the row: the held request goes on
        finished = held.result(timeout=30)

    assert shed.status_code == 503, shed.text
    assert shed.headers["content-type"] == PROBLEM_JSON
    assert shed.headers["retry-after"] == "3"
    assert shed.json()["type"].endswith("/overloaded")
    # Shed after waiting for a slot for API_QUEUE_TIMEOUT_S, not after a client timeout.
    assert QUEUE_TIMEOUT_S <= shed_after < QUEUE_TIMEOUT_S + 2
    assert health.status_code == 200
    assert ready.status_code == 200, ready.text
    assert _shed_count(metrics.text) == shed_before + 1
    assert finished.status_code == 200, finished.text
    assert finished.json()["title"] == "Tea!"
    # The shed create stored nothing.
    with db.connect() as conn:
        assert conn.execute(text("SELECT count(*) FROM reminders")).scalar_one() == before


def test_a_request_that_finds_a_slot_within_the_queue_timeout_is_served(
    server: str, settings: Settings, db: Engine
) -> None:
    token = bearer(mint_token(settings, "alice"))
    with httpx.Client(base_url=server, headers=token, timeout=10) as c:
        rid = c.post(URL, json={"title": "Tea", "start_local": "2029-06-02T09:00"}).json()["id"]
    with db.connect() as locker, ThreadPoolExecutor(2) as pool:
        locker.execute(text("SELECT 1 FROM reminders WHERE id = :id FOR UPDATE"), {"id": rid})
        held = pool.submit(
            httpx.patch, f"{server}{URL}/{rid}", json={"title": "Tea!"}, headers=token, timeout=30
        )
        _wait_until_waiting_on_lock(db)
        waiting = pool.submit(httpx.get, f"{server}{URL}/{rid}", headers=token, timeout=30)
        time.sleep(QUEUE_TIMEOUT_S / 4)
        locker.rollback()  # the slot comes free well within the queue timeout
        assert held.result(timeout=30).status_code == 200
        assert waiting.result(timeout=30).status_code == 200


def _shed_count(exposition: str) -> float:
    for line in exposition.splitlines():
        if line.startswith('reminders_api_shed_total{method="POST"}'):
            return float(line.rsplit(" ", 1)[1])
    return 0.0


def _wait_until_waiting_on_lock(db: Engine) -> None:
    """Until some backend of this database waits on a row lock (the held request)."""
    deadline = time.monotonic() + 10
    with db.connect() as conn:
        while time.monotonic() < deadline:
            waiting = conn.execute(
                text(
                    "SELECT count(*) FROM pg_stat_activity"
                    " WHERE datname = current_database() AND wait_event_type = 'Lock'"
                )
            ).scalar_one()
            conn.rollback()
            if waiting:
                return
            time.sleep(0.01)
    raise AssertionError("the held request never waited on the row lock")


def test_with_the_queue_full_a_request_is_shed_without_waiting(
    settings: Settings, db: Engine
) -> None:
    token = bearer(mint_token(settings, "alice"))
    # A queue timeout far above any answer time: a request that waited for a slot would
    # take it whole, one shed at once takes a request's time (0.4 s was seen on a loaded
    # machine against a 0.2 s timeout).
    with serve(settings, db, max_queued=0, queue_timeout_s=5.0) as server:
        rid = httpx.post(
            f"{server}{URL}",
            json={"title": "Tea", "start_local": "2029-06-02T09:00"},
            headers=token,
            timeout=10,
        ).json()["id"]
        with db.connect() as locker, ThreadPoolExecutor(1) as pool:
            locker.execute(text("SELECT 1 FROM reminders WHERE id = :id FOR UPDATE"), {"id": rid})
            held = pool.submit(
                httpx.patch,
                f"{server}{URL}/{rid}",
                json={"title": "Tea!"},
                headers=token,
                timeout=30,
            )
            _wait_until_waiting_on_lock(db)
            started = time.monotonic()
            shed = httpx.get(f"{server}{URL}/{rid}", headers=token, timeout=10)
            shed_after = time.monotonic() - started
            locker.rollback()
            assert held.result(timeout=30).status_code == 200
    assert shed.status_code == 503, shed.text
    assert shed.headers["retry-after"] == "3"
    assert shed_after < 5.0  # not queued: no slot was waited for
