"""Workers that say they are alive (issue 16): each process writes one worker_heartbeats
row per loop (reminder_core.worker.registry), marks them stopped at a clean exit, and
`reminders status` alerts, naming the role, when a role of ALERT_WORKER_ROLES has no live
worker (docs/design.md, "Workers"). Against a real PostgreSQL; `reminders status` as a
real process where its exit status is the point."""

from __future__ import annotations

import threading
from datetime import UTC, datetime, timedelta
from pathlib import Path

from sqlalchemy import Engine, text

from coordinator.maintenance.retention import Retention
from reminder_core.settings import Settings
from reminder_core.status import collect_status
from reminder_core.worker.loop import Heartbeat, TickResult, start_loops
from reminder_core.worker.registry import WorkerRegistry
from tests.integration.helpers import run_status

ROLES = ("coordinator", "outbox_sweeper", "sender", "maintenance")


class Idle:
    """A loop service that does nothing, named like a workload."""

    def __init__(self, name: str) -> None:
        self.name = name

    def run_once(self, now: datetime) -> TickResult:
        del now
        return TickResult(processed=0, more=False)


class Clock:
    def __init__(self, now: datetime) -> None:
        self.now = now

    def __call__(self) -> datetime:
        return self.now


def rows(db: Engine) -> list[dict[str, object]]:
    with db.connect() as conn:
        found = conn.execute(text("SELECT * FROM worker_heartbeats ORDER BY role")).mappings()
        return [dict(r) for r in found]


def test_a_registry_writes_one_row_per_loop_and_marks_them_stopped(db: Engine) -> None:
    start = datetime(2030, 1, 1, 9, tzinfo=UTC)
    clock = Clock(start)
    ticked = start - timedelta(seconds=3)
    heartbeats = {
        "coordinator": Heartbeat(last_tick_at=ticked),
        "sender": Heartbeat(consecutive_failures=2),
    }
    registry = WorkerRegistry(db, heartbeats, interval_s=10, command="reminders dev", clock=clock)
    assert registry.beat()
    first = rows(db)
    assert [r["role"] for r in first] == ["coordinator", "sender"]
    assert {r["process"] for r in first} == {"reminders dev"}
    assert all(r["last_seen_at"] == start and r["started_at"] == start for r in first)
    assert first[0]["last_tick_at"] == ticked
    assert first[1]["last_tick_at"] is None
    assert first[1]["consecutive_failures"] == 2
    assert all(r["stopped_at"] is None for r in first)

    clock.now = start + timedelta(seconds=10)
    heartbeats["sender"].last_tick_at = clock.now
    heartbeats["sender"].consecutive_failures = 0
    assert registry.beat()
    second = rows(db)
    assert [r["id"] for r in second] == [r["id"] for r in first]  # refreshed, not added
    assert all(r["last_seen_at"] == clock.now for r in second)
    assert (second[1]["last_tick_at"], second[1]["consecutive_failures"]) == (clock.now, 0)

    clock.now = start + timedelta(seconds=12)
    registry.close()
    stopped = rows(db)
    assert all(r["stopped_at"] == clock.now for r in stopped)
    # A late beat (a thread that had not seen the stop) does not bring them back.
    clock.now = start + timedelta(seconds=20)
    assert registry.beat()
    assert all(r["stopped_at"] == start + timedelta(seconds=12) for r in rows(db))
    assert all(r["last_seen_at"] == start + timedelta(seconds=12) for r in rows(db))


def test_the_registry_reports_what_the_loops_do(db: Engine) -> None:
    # The real loop fills the Heartbeat the registry reads: after a tick, last_tick_at.
    stop = threading.Event()
    heartbeats: dict[str, Heartbeat] = {}
    threads = start_loops([(Idle("coordinator"), 0.05)], stop, heartbeats)
    registry = WorkerRegistry(db, heartbeats, interval_s=0.1)
    try:
        registry.start()
        deadline = datetime.now(UTC) + timedelta(seconds=10)
        while datetime.now(UTC) < deadline:
            found = rows(db)
            if found and found[0]["last_tick_at"] is not None:
                break
            stop.wait(0.05)
        (row,) = rows(db)
        assert row["role"] == "coordinator"
        assert row["last_tick_at"] is not None
        assert row["pid"] > 0
    finally:
        stop.set()
        for t in threads:
            t.join(5)
        registry.close()
    assert rows(db)[0]["stopped_at"] is not None


def beat(db: Engine, roles: tuple[str, ...], now: datetime) -> WorkerRegistry:
    registry = WorkerRegistry(
        db, {r: Heartbeat(last_tick_at=now) for r in roles}, interval_s=10, clock=Clock(now)
    )
    assert registry.beat()
    return registry


def test_status_names_every_role_without_a_live_worker_and_exits_1(
    db: Engine, database_url: str, tmp_path: Path
) -> None:
    # Nothing ever ran: every role is missing (the issue: OK with every workload stopped).
    code, checks = run_status(database_url, tmp_path)
    assert code == 1
    for role in ROLES:
        assert checks[f"workers_{role}"]["state"] == "alert", role
        assert checks[f"workers_{role}"]["value"] == 0
        assert checks[f"workers_{role}"]["detail"] == "never seen"

    # All four live now: their checks are OK (nothing else alerts on an empty database).
    now = datetime.now(UTC)
    registries = [beat(db, (role,), now) for role in ROLES]
    code, checks = run_status(database_url, tmp_path)
    assert {f"workers_{r}": checks[f"workers_{r}"]["state"] for r in ROLES} == dict.fromkeys(
        (f"workers_{r}" for r in ROLES), "ok"
    )
    assert code == 0, checks
    # The sender's process exits cleanly: its role alerts at once, saying it stopped.
    registries[2].close()
    code, checks = run_status(database_url, tmp_path)
    assert code == 1
    assert checks["workers_sender"]["state"] == "alert"
    assert checks["workers_sender"]["detail"].startswith("none live; last ")
    assert " stopped " in checks["workers_sender"]["detail"]
    assert [n for n, c in checks.items() if c["state"] == "alert"] == ["workers_sender"]


def test_a_worker_not_heard_from_for_worker_stale_after_s_is_not_live(
    db: Engine, settings: Settings
) -> None:
    now = datetime(2030, 1, 1, 9, tzinfo=UTC)
    beat(db, ("sender",), now - timedelta(seconds=31))  # killed: never marked stopped
    beat(db, ("coordinator",), now - timedelta(seconds=29))
    from reminder_core.queue import PostgresQueue

    queue = PostgresQueue(db, name="reminders", max_receive_count=5)
    report = collect_status(db, queue, settings, now=now)  # WORKER_STALE_AFTER_S: 30
    by_name = {c.name: c for c in report.checks}
    assert (by_name["workers_sender"].value, by_name["workers_sender"].state) == (0, "alert")
    assert by_name["workers_sender"].detail.endswith(" seen 31 s ago")
    assert (by_name["workers_coordinator"].value, by_name["workers_coordinator"].state) == (
        1,
        "ok",
    )
    assert "last tick 29 s ago" in by_name["workers_coordinator"].detail
    # A role outside ALERT_WORKER_ROLES is shown when it has live workers, never alerts.
    beat(db, ("webhook_rematcher",), now)
    report = collect_status(db, queue, settings, now=now)
    extra = {c.name: c for c in report.checks}["workers_webhook_rematcher"]
    assert (extra.value, extra.state, extra.threshold) == (1, "info", None)


def test_retention_deletes_heartbeat_rows_not_seen_for_the_retention_period(db: Engine) -> None:
    now = datetime(2030, 1, 8, 9, tzinfo=UTC)
    beat(db, ("sender",), now - timedelta(days=7, seconds=1))
    beat(db, ("coordinator",), now - timedelta(days=6))
    retention = Retention(db, worker_heartbeats_retention_days=7)
    assert retention.run(now).worker_heartbeats_deleted == 1
    assert [r["role"] for r in rows(db)] == ["coordinator"]
