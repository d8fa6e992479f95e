"""Metrics on a real database: the maintenance workload's backlog gauges, the coordinator's
and sweeper's counters, the sender's delivery lag and failure classes, the API's request
metrics, and the workers' /metrics and /healthz port.

Expected values follow the definitions (docs/operations.md "Metrics, alerts and
`reminders status`"; docs/design.md,
"Metrics"): next_run_lag = now - the oldest next_run_utc of a due, undelivered (pending or
claimed) reminder, 0 when none; delivery_lag = sent_at - run_time_utc; and so on.
"""

from __future__ import annotations

import json
import threading
import uuid
from datetime import UTC, datetime, timedelta

import httpx
import pytest
from fastapi.testclient import TestClient
from prometheus_client import REGISTRY, CollectorRegistry
from sqlalchemy import Engine, text

from coordinator.maintenance.maintainer import Maintainer
from coordinator.service import Coordinator
from outbox_sweeper.service import OutboxSweeper
from reminder_core.errors import PermanentDeliveryError, TransientDeliveryError
from reminder_core.metrics import register_backlog_gauges
from reminder_core.metrics_server import MetricsServer, serve_worker_metrics
from reminder_core.queue import PostgresQueue
from reminder_core.settings import Settings
from reminder_core.worker.loop import Heartbeat
from tests.integration.api_support import Clock as ApiClock
from tests.integration.api_support import bearer, build_app
from tests.integration.helpers import ExternalQueue, insert_due_reminders
from tests.support.maintenance import make_maintainer
from tests.support.sending import Clock, CountingProvider, make_sender
from tests.support.workloads import free_port

NOW = datetime(2030, 1, 1, 12, 0, 0, tzinfo=UTC)


def sample(name: str, registry: CollectorRegistry = REGISTRY, **labels: str) -> float:
    """A sample's value, 0.0 when the series does not exist yet."""
    return registry.get_sample_value(name, labels) or 0.0


@pytest.fixture
def backlog_registry() -> CollectorRegistry:
    """A registry with the backlog gauges, as the maintenance process registers them."""
    registry = CollectorRegistry()
    register_backlog_gauges(registry)
    return registry


def maintenance(db: Engine, queue: PostgresQueue, settings: Settings) -> Maintainer:
    return make_maintainer(db, queue, settings)


def test_backlog_gauges_follow_their_definitions(
    db: Engine, settings: Settings, backlog_registry: CollectorRegistry
) -> None:
    queue = PostgresQueue(db, name="metrics", max_receive_count=1)
    insert_due_reminders(db, 2, next_run_utc=NOW - timedelta(seconds=300))  # due, unclaimed
    insert_due_reminders(db, 1, next_run_utc=NOW + timedelta(seconds=60))  # not due yet
    insert_due_reminders(db, 1, next_run_utc=NOW - timedelta(seconds=5000), status="paused")
    insert_due_reminders(db, 1, next_run_utc=NOW - timedelta(seconds=500), title="Claimed")
    claim = "UPDATE reminders SET status = 'claimed', claimed_by = 'c', claimed_at = :at"
    with db.begin() as conn:
        conn.execute(text(claim + " WHERE title LIKE 'Claimed%'"), {"at": NOW})
        for age_s, published in ((90, False), (30, False), (4000, True)):
            conn.execute(
                text(
                    "INSERT INTO outbox (payload, created_at, published_at)"
                    " VALUES ('{}', :created, :published)"
                ),
                {
                    "created": NOW - timedelta(seconds=age_s),
                    "published": NOW if published else None,
                },
            )
    # Queue: two visible, one delayed, one dead-lettered (max receive count 1).
    queue.send_batch([{"n": 1}], now=NOW - timedelta(minutes=5), delays_s=[0])
    queue.receive(now=NOW - timedelta(minutes=5), max_messages=1, visibility_timeout_s=1)
    assert (
        queue.receive(now=NOW - timedelta(minutes=4), max_messages=1, visibility_timeout_s=1) == []
    )
    queue.send_batch([{"n": 2}, {"n": 3}, {"n": 4}], now=NOW, delays_s=[0, 0, 30])

    maintenance(db, queue, settings).run_once(NOW)

    def gauge(name: str, **labels: str) -> float | None:
        return backlog_registry.get_sample_value(name, labels)

    assert gauge("next_run_lag_seconds") == 500  # the claimed one, due 500 s ago
    assert gauge("reminders_oldest_pending_age_seconds") == 300
    assert gauge("reminders_due_backlog") == 2
    assert gauge("reminders_outbox_unpublished") == 2
    assert gauge("reminders_outbox_oldest_unpublished_age_seconds") == 90
    assert gauge("reminders_queue_depth", state="visible") == 2
    assert gauge("reminders_queue_depth", state="not_visible") == 1
    assert gauge("reminders_dlq_depth") == 1
    assert gauge("reminders_backlog_updated_timestamp_seconds") == NOW.timestamp()


def test_backlog_gauges_are_zero_when_nothing_is_late(
    db: Engine, settings: Settings, backlog_registry: CollectorRegistry
) -> None:
    queue = PostgresQueue(db, name="metrics", max_receive_count=5)
    insert_due_reminders(db, 3, next_run_utc=NOW + timedelta(seconds=1))
    maintenance(db, queue, settings).run_once(NOW)
    zero = (
        "next_run_lag_seconds",
        "reminders_oldest_pending_age_seconds",
        "reminders_due_backlog",
        "reminders_outbox_unpublished",
        "reminders_outbox_oldest_unpublished_age_seconds",
        "reminders_dlq_depth",
    )
    for name in zero:
        assert backlog_registry.get_sample_value(name) == 0, name


def test_backlog_gauges_are_not_exported_by_other_workloads() -> None:
    # Only a process that registers them (coordinator.maintenance.main.build, `reminders
    # dev`) exports them: a 0 from the API or a sender would hide the real value, or its absence. No
    # test registers them in the default registry of this process.
    names = {family.name for family in REGISTRY.collect()}
    assert "next_run_lag_seconds" not in names
    assert "reminders_dlq_depth" not in names


def test_coordinator_and_sweeper_count_claims_and_publications(db: Engine) -> None:
    queue = PostgresQueue(db, name="metrics", max_receive_count=5)
    claims = sample("reminders_claims_total")
    ticks = sample("reminders_claims_per_tick_count")
    per_tick = sample("reminders_claims_per_tick_sum")
    fast = sample("reminders_outbox_published_total", path="fast")
    in_claim = sample("reminders_outbox_published_total", path="claim")
    swept = sample("reminders_outbox_published_total", path="sweeper")
    insert_due_reminders(db, 4, next_run_utc=NOW)
    coordinator = Coordinator(db, queue, lookahead_s=0, batch_size=3, worker_id="c")
    coordinator.run_once(NOW)
    coordinator.run_once(NOW)
    coordinator.run_once(NOW)  # nothing left: a tick that claims 0
    assert sample("reminders_claims_total") - claims == 4
    assert sample("reminders_claims_per_tick_count") - ticks == 3
    assert sample("reminders_claims_per_tick_sum") - per_tick == 4
    # The PostgreSQL queue in the same database: the claim writes the messages itself.
    assert sample("reminders_outbox_published_total", path="claim") - in_claim == 4
    assert sample("reminders_outbox_published_total", path="fast") == fast
    # A queue outside the database (as SQS): outbox rows, published after the commit.
    insert_due_reminders(db, 2, next_run_utc=NOW)
    outside = Coordinator(db, ExternalQueue(queue), lookahead_s=0, batch_size=3,  # type: ignore[arg-type]
                          worker_id="c")  # fmt: skip
    outside.run_once(NOW)
    assert sample("reminders_outbox_published_total", path="fast") - fast == 2
    assert sample("reminders_claims_total") - claims == 6
    # One row the fast path never published (a crash between commit and publish).
    with db.begin() as conn:
        conn.execute(text("INSERT INTO outbox (payload, created_at) VALUES (:p, :at)"),
                     {"p": json.dumps({"reminder_id": str(uuid.uuid4()), "user_id": "alice",
                                       "run_time_utc": NOW.isoformat(), "version": 1}),
                      "at": NOW - timedelta(minutes=1)})  # fmt: skip
    OutboxSweeper(db, queue, grace_s=10).run_once(NOW)
    assert sample("reminders_outbox_published_total", path="sweeper") - swept == 1


def test_sender_observes_delivery_lag_and_counts_failures_by_class(
    db: Engine, settings: Settings
) -> None:
    queue = PostgresQueue(db, name="reminders", max_receive_count=5)
    provider = CountingProvider(settings.effective_mail_dir)
    lag_count = sample("delivery_lag_seconds_count", held="false")
    lag_sum = sample("delivery_lag_seconds_sum", held="false")
    sent = sample("reminders_sends_total", provider="file", outcome="sent")

    def failures(error_class: str) -> float:
        return sample("reminders_send_failures_total", provider="file", error_class=error_class)

    before = {c: failures(c) for c in ("permanent", "ambiguous", "transient")}
    insert_due_reminders(db, 3, next_run_utc=NOW)
    Coordinator(db, queue, lookahead_s=0, batch_size=10, worker_id="c").run_once(NOW)
    provider.fail_next = [
        PermanentDeliveryError("550 no such user"),
        TransientDeliveryError("read timeout", ambiguous=True),
    ]
    # Sent 7 s after the due time: delivery_lag = sent_at - run_time_utc = 7 s.
    sender = make_sender(db, queue, settings, provider, Clock(NOW + timedelta(seconds=7)))
    counts = sender.run_once(NOW + timedelta(seconds=7)).counts
    assert counts == {"sent": 1, "failed": 1, "retry": 1}
    assert sample("delivery_lag_seconds_count", held="false") - lag_count == 1
    assert sample("delivery_lag_seconds_sum", held="false") - lag_sum == pytest.approx(7)
    assert sample("reminders_sends_total", provider="file", outcome="sent") - sent == 1
    assert {c: failures(c) - before[c] for c in before} == {
        "permanent": 1, "ambiguous": 1, "transient": 0,
    }  # fmt: skip


def test_api_counts_requests_by_route_template_and_status(
    db: Engine, settings: Settings, token_for
) -> None:
    app = build_app(settings, db, ApiClock(NOW))
    route = "/v1/reminders/{reminder_id}"
    missing = sample("reminders_api_requests_total", method="GET", route=route, status="404")
    unmatched = sample("reminders_api_requests_total", method="GET", route="unmatched",
                       status="404")  # fmt: skip
    timed = sample("reminders_api_request_duration_seconds_count", method="GET", route=route)
    with TestClient(app) as client:
        headers = bearer(token_for("alice"))
        for _ in range(2):
            resp = client.get(f"/v1/reminders/{uuid.uuid4()}", headers=headers)
            assert resp.status_code == 404
        assert client.get("/no/such/path").status_code == 404
        scraped = client.get("/metrics").text
    assert sample("reminders_api_requests_total", method="GET", route=route,
                  status="404") - missing == 2  # fmt: skip
    assert sample("reminders_api_requests_total", method="GET", route="unmatched",
                  status="404") - unmatched == 1  # fmt: skip
    assert sample("reminders_api_request_duration_seconds_count", method="GET",
                  route=route) - timed == 2  # fmt: skip
    # The raw ids never become label values.
    assert 'route="/v1/reminders/{reminder_id}"' in scraped
    assert "/v1/reminders/0" not in scraped


def test_worker_port_serves_metrics_and_health() -> None:
    stop = threading.Event()
    thread = threading.Thread(target=stop.wait, name="coordinator", daemon=True)
    thread.start()
    beats = {"coordinator": Heartbeat()}
    settings = Settings(
        database_url="postgresql://unused",
        metrics_host="127.0.0.1",
        metrics_port=free_port(),
        liveness_stale_s=60,
    )
    server = serve_worker_metrics(settings, [thread], beats)
    assert isinstance(server, MetricsServer)
    try:
        base = f"http://127.0.0.1:{server.port}"
        metrics = httpx.get(f"{base}/metrics", timeout=5)
        assert metrics.status_code == 200
        assert "text/plain" in metrics.headers["content-type"]
        assert "# TYPE delivery_lag_seconds histogram" in metrics.text
        health = httpx.get(f"{base}/healthz", timeout=5)
        assert health.status_code == 200
        assert health.json()["loops"]["coordinator"]["alive"] is True
        # Its last tick 61 s ago with a 60 s limit: unhealthy.
        beats["coordinator"].last_tick_at = datetime.now(UTC) - timedelta(seconds=61)
        assert httpx.get(f"{base}/healthz", timeout=5).status_code == 503
        beats["coordinator"].last_tick_at = datetime.now(UTC)
        stop.set()
        thread.join()
        assert httpx.get(f"{base}/healthz", timeout=5).status_code == 503  # thread died
    finally:
        stop.set()
        server.close()


def test_metrics_port_zero_serves_nothing() -> None:
    # METRICS_PORT=0 (the default) is "off".
    assert serve_worker_metrics(Settings(database_url="postgresql://unused"), [], {}) is None
