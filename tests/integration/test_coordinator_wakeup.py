"""The coordinator waits for its work (issue 15): an idle coordinator wakes when the next
pending reminder comes within LOOKAHEAD_S, or at once when a reminder due within
DUE_SOON_S is created (NOTIFY at the API's commit), instead of waiting out its poll
interval. Real PostgreSQL, the real API app, real threads; generous bounds."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from datetime import timedelta

import pytest
from fastapi.testclient import TestClient
from sqlalchemy import Engine

from coordinator.service import Coordinator
from reminder_core.clock import utcnow
from reminder_core.db.listen import SLICE_S
from reminder_core.queue import PostgresQueue
from reminder_core.settings import Settings
from reminder_core.tokens import mint_token
from tests.integration.api_support import URL, bearer, build_app
from tests.integration.helpers import insert_due_reminders

LOOKAHEAD_S = 2.0


@pytest.fixture
def coordinator(db: Engine) -> Iterator[Coordinator]:
    queue = PostgresQueue(db, name="reminders", max_receive_count=5)
    c = Coordinator(db, queue, lookahead_s=LOOKAHEAD_S, batch_size=100, worker_id="t")
    yield c
    c.close()


@pytest.fixture
def api(db: Engine, settings: Settings) -> Iterator[TestClient]:
    with TestClient(build_app(settings, db, utcnow)) as c:
        yield c


def waited_for(coordinator: Coordinator, timeout_s: float) -> float:
    stop = threading.Event()
    started = time.monotonic()
    coordinator.wait_for_work(stop, timeout_s)
    return time.monotonic() - started


def in_background(seconds: float, action) -> threading.Timer:  # type: ignore[no-untyped-def]
    timer = threading.Timer(seconds, action)
    timer.start()
    return timer


def test_a_reminder_created_for_now_wakes_the_coordinator(
    coordinator: Coordinator, api: TestClient, settings: Settings
) -> None:
    token = bearer(mint_token(settings, "alice"))

    def create() -> None:
        r = api.post(
            URL,
            headers=token,
            json={"title": "Now", "start_local": soon.isoformat(), "timezone": "UTC"},
        )
        assert r.status_code == 201, r.text

    soon = (utcnow() + timedelta(seconds=1)).replace(tzinfo=None, microsecond=0)
    timer = in_background(0.3, create)
    waited = waited_for(coordinator, timeout_s=20)
    timer.join()
    assert 0.3 <= waited < 5, waited
    assert coordinator.run_once(utcnow()).counts["claimed"] == 1


def test_a_reminder_created_for_later_does_not_wake_it(
    coordinator: Coordinator, api: TestClient, settings: Settings
) -> None:
    token = bearer(mint_token(settings, "alice"))
    later = (utcnow() + timedelta(hours=1)).replace(tzinfo=None, microsecond=0)
    timer = in_background(
        0.2,
        lambda: api.post(
            URL,
            headers=token,
            json={"title": "Later", "start_local": later.isoformat(), "timezone": "UTC"},
        ),
    )
    waited = waited_for(coordinator, timeout_s=1.5)
    timer.join()
    assert waited >= 1.5 - 2 * SLICE_S, waited


def test_it_wakes_when_the_next_reminder_comes_within_the_lookahead(
    coordinator: Coordinator, db: Engine
) -> None:
    insert_due_reminders(db, 1, next_run_utc=utcnow() + timedelta(seconds=LOOKAHEAD_S + 1.0))
    waited = waited_for(coordinator, timeout_s=20)
    assert 0.8 <= waited < 5, waited
    assert coordinator.run_once(utcnow()).counts["claimed"] == 1
