"""Issue 7, "How we will check it": the senders stop while reminders come due;
`next_run_lag_seconds` (the maintenance workload's gauge, scraped from its metrics port)
grows, and `reminders status` reports it: ALERT and exit status 1 once it is over
ALERT_NEXT_RUN_LAG_S (set low here), OK and exit status 0 under the default threshold;
it also names the role left without a live worker (issue 16).

The workloads run in this process on the real clock (coordinator, maintenance, sender
loops); `reminders status` runs as a real process against the same database. Expected
values come from the definitions: next_run_lag = now - the oldest next_run_utc of a due
reminder not yet delivered (claimed ones included), 0 when none; the coordinator keeps
claiming, so the oldest *pending* (unclaimed) age stays 0 and the claimed occurrences wait
in the queue, visible.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator
from datetime import datetime, timedelta
from pathlib import Path

import httpx
import pytest
from prometheus_client import CollectorRegistry
from prometheus_client.parser import text_string_to_metric_families
from sqlalchemy import Engine, text

from coordinator.service import Coordinator
from reminder_core.clock import utcnow
from reminder_core.metrics import register_backlog_gauges
from reminder_core.metrics_server import MetricsServer
from reminder_core.queue import PostgresQueue
from reminder_core.settings import Settings
from reminder_core.worker.loop import Heartbeat, Service, join_loops, start_loops
from reminder_core.worker.registry import WorkerRegistry
from tests.integration.helpers import insert_due_reminders
from tests.integration.helpers import run_status as status
from tests.support.maintenance import make_maintainer
from tests.support.sending import CountingProvider, make_sender
from tests.support.workloads import free_port, wait_until

pytestmark = pytest.mark.timeout(120)

LOW_THRESHOLD_S = 1.0  # ALERT_NEXT_RUN_LAG_S for the test
LATE_S = 1.5  # how late the waiting occurrences get before `reminders status` runs


class Loops:
    """Worker loops in threads, each group with its own stop event and its heartbeat rows
    (a WorkerRegistry, as a workload process has: marked stopped when the group stops)."""

    def __init__(self, engine: Engine) -> None:
        self.engine = engine
        self.groups: list[tuple[threading.Event, list[threading.Thread], WorkerRegistry]] = []

    def start(self, services: list[tuple[Service, float]]) -> threading.Event:
        stop = threading.Event()
        heartbeats: dict[str, Heartbeat] = {}
        threads = start_loops(services, stop, heartbeats)
        registry = WorkerRegistry(self.engine, heartbeats, interval_s=0.5, command="test")
        registry.start()
        self.groups.append((stop, threads, registry))
        return stop

    def stop(self, stop: threading.Event) -> None:
        for event, threads, registry in self.groups:
            if event is stop:
                event.set()
                assert join_loops(threads, 10) == []
                registry.close()

    def close(self) -> None:
        for event, threads, registry in self.groups:
            event.set()
            join_loops(threads, 10)
            registry.close()


@pytest.fixture
def loops(db: Engine) -> Iterator[Loops]:
    running = Loops(db)
    yield running
    running.close()


def scrape(port: int) -> dict[str, float]:
    """The samples of the metrics port: {name or name{k=v}: value}."""
    body = httpx.get(f"http://127.0.0.1:{port}/metrics", timeout=5).text
    out = {}
    for family in text_string_to_metric_families(body):
        for s in family.samples:
            labels = ",".join(f"{k}={v}" for k, v in sorted(s.labels.items()))
            out[f"{s.name}{{{labels}}}" if labels else s.name] = s.value
    return out


def count(db: Engine, sql: str) -> int:
    with db.connect() as conn:
        return int(conn.execute(text(sql)).scalar_one())


def test_stopped_senders_make_next_run_lag_grow_and_status_alert(
    db: Engine, settings: Settings, database_url: str, loops: Loops, tmp_path: Path
) -> None:
    # The queue `reminders dev` and `reminders status` use by default (QUEUE_URL).
    queue = PostgresQueue(db, name="reminders", max_receive_count=5)
    registry = CollectorRegistry()
    register_backlog_gauges(registry)  # what the maintenance process does
    server = MetricsServer("127.0.0.1", free_port(), registry=registry)
    try:
        coordinator = Coordinator(db, queue, lookahead_s=0, batch_size=100, worker_id="c")
        maintenance = make_maintainer(db, queue, settings)
        loops.start([(coordinator, 0.1), (maintenance, 0.2)])

        def sender_loop() -> threading.Event:
            provider = CountingProvider(settings.effective_mail_dir)
            sender = make_sender(db, queue, settings, provider, clock=utcnow)  # type: ignore[arg-type]
            return loops.start([(sender, 0.1)])

        def lag() -> float:
            return scrape(server.port).get("next_run_lag_seconds", -1.0)

        def refreshed_after(instant: datetime) -> bool:
            updated = scrape(server.port).get("reminders_backlog_updated_timestamp_seconds", 0)
            return updated > instant.timestamp()

        # With a sender: the reminder goes out, and the lag is back to 0.
        sender_stop = sender_loop()
        insert_due_reminders(db, 1, next_run_utc=utcnow() + timedelta(seconds=0.3))
        sent_sql = "SELECT count(*) FROM delivery_log WHERE status = 'sent'"
        wait_until(lambda: count(db, sent_sql) == 1, 20, "the first delivery")
        after_send = utcnow()
        wait_until(lambda: refreshed_after(after_send), 10, "a maintenance tick")
        assert lag() == 0

        # The senders stop; three reminders come due.
        loops.stop(sender_stop)
        due = utcnow() + timedelta(seconds=0.3)
        insert_due_reminders(db, 3, next_run_utc=due)
        claimed_sql = "SELECT count(*) FROM reminders WHERE status = 'claimed'"
        wait_until(lambda: count(db, claimed_sql) == 3, 20, "the coordinator's claims")
        wait_until(lambda: lag() > 0, 20, "next_run_lag above 0")
        first = lag()
        wait_until(lambda: lag() >= LATE_S, 20, f"next_run_lag >= {LATE_S}s")
        samples = scrape(server.port)
        grown = samples["next_run_lag_seconds"]
        assert grown > first  # it grows with the clock
        # now - the due time, read at the last maintenance tick (<= the time of reading).
        assert grown <= (utcnow() - due).total_seconds()
        assert samples["reminders_oldest_pending_age_seconds"] == 0  # all claimed
        assert samples["reminders_due_backlog"] == 0
        assert samples["reminders_queue_depth{state=visible}"] == 3  # nobody receives

        # `reminders status`: over the lowered threshold -> ALERT, exit status 1; and the
        # stopped senders are named (this test runs no outbox sweeper: not asked for).
        roles = "coordinator,sender,maintenance"
        code, checks = status(database_url, tmp_path, ALERT_NEXT_RUN_LAG_S=str(LOW_THRESHOLD_S),
                              ALERT_WORKER_ROLES=roles)  # fmt: skip
        assert code == 1
        lag_check = checks["next_run_lag"]
        assert lag_check["state"] == "alert"
        assert lag_check["threshold"] == LOW_THRESHOLD_S
        assert lag_check["value"] >= LATE_S
        assert checks["oldest_pending_age"]["state"] == "ok"
        assert checks["queue_visible"]["value"] == 3
        assert checks["dlq_depth"]["state"] == "ok"
        assert [n for n, c in checks.items() if c["state"] == "alert"] == [
            "next_run_lag",
            "workers_sender",
        ]
        assert checks["workers_sender"]["value"] == 0
        assert "stopped" in checks["workers_sender"]["detail"]
        assert checks["workers_coordinator"]["value"] == 1
        assert checks["workers_maintenance"]["state"] == "ok"
        # Under the default threshold (120 s) the same lag is OK; without asking for a
        # sender, exit status 0.
        code, checks = status(database_url, tmp_path, ALERT_WORKER_ROLES="coordinator,maintenance")
        assert code == 0
        assert checks["next_run_lag"]["state"] == "ok"
        assert checks["next_run_lag"]["threshold"] == 120

        # A sender again: everything goes out and the lag falls back to 0.
        sender_loop()
        wait_until(lambda: count(db, sent_sql) == 4, 20, "the waiting deliveries")
        after_send = utcnow()
        wait_until(lambda: refreshed_after(after_send), 10, "a maintenance tick")
        assert lag() == 0
    finally:
        server.close()
