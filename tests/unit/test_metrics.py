"""Metrics in pure code: error classes, the provider wrapper, the loop's tick metrics and
heartbeat, the workers' health verdict, and `reminders status` verdicts and exit codes.

Expected values come from the definitions in docs/operations.md "Metrics, alerts and
`reminders status`" and the status command's
documented exit codes (0 OK, 1 something over its threshold, 2 something unreadable).
"""

from __future__ import annotations

import threading
import time
from datetime import UTC, datetime, timedelta

import pytest
from prometheus_client import REGISTRY

from reminder_core.errors import (
    InfrastructureError,
    PermanentDeliveryError,
    TransientDeliveryError,
)
from reminder_core.metrics import error_class
from reminder_core.metrics_server import NOT_READY_AFTER_FAILURES, loop_health
from reminder_core.status import Check, State, StatusReport, judge
from reminder_core.worker.loop import Heartbeat, TickResult, run_loop
from sender.providers.base import OutgoingEmail, SendReceipt
from sender.providers.instrumented import InstrumentedProvider

NOW = datetime(2030, 1, 1, 12, 0, tzinfo=UTC)
EMAIL = OutgoingEmail(to="a@example.com", sender="r@example.com", subject="s", text="t", html="h")


def sample(name: str, **labels: str) -> float:
    return REGISTRY.get_sample_value(name, labels) or 0.0


@pytest.mark.parametrize(
    ("exc", "expected"),
    [
        (PermanentDeliveryError("422"), "permanent"),
        (TransientDeliveryError("503"), "transient"),
        (TransientDeliveryError("read timeout", ambiguous=True), "ambiguous"),
        (InfrastructureError("profile service down"), "infrastructure"),
        (KeyError("bug"), "unexpected"),
    ],
)
def test_error_classes(exc: Exception, expected: str) -> None:
    assert error_class(exc) == expected


class Scripted:
    """A provider that answers from a script: a receipt, or raises."""

    name = "scripted-provider"

    def __init__(self, script: list[Exception | None]) -> None:
        self.script = script

    def send(self, email: OutgoingEmail, *, idempotency_key: str) -> SendReceipt:
        del email
        step = self.script.pop(0)
        if step is not None:
            raise step
        return SendReceipt(self.name, f"<{idempotency_key}>")


def test_each_provider_call_is_timed_and_counted_by_result() -> None:
    name = Scripted.name
    results = ("ok", "transient", "ambiguous", "permanent", "unexpected")
    before = {r: sample("reminders_provider_requests_total", provider=name, result=r)
              for r in results}  # fmt: skip
    calls_before = sample("reminders_provider_request_duration_seconds_count", provider=name)
    provider = InstrumentedProvider(
        Scripted([
            None,
            TransientDeliveryError("503"),
            TransientDeliveryError("timeout", ambiguous=True),
            PermanentDeliveryError("bad address"),
            ValueError("bug"),
            None,
        ])
    )  # fmt: skip
    assert provider.name == name
    assert provider.send(EMAIL, idempotency_key="k1").provider_message_id == "<k1>"
    for expected in (TransientDeliveryError, TransientDeliveryError, PermanentDeliveryError,
                     ValueError):  # fmt: skip
        with pytest.raises(expected):
            provider.send(EMAIL, idempotency_key="k")
    provider.send(EMAIL, idempotency_key="k2")
    after = {r: sample("reminders_provider_requests_total", provider=name, result=r)
             for r in results}  # fmt: skip
    assert {r: after[r] - before[r] for r in results} == {
        "ok": 2, "transient": 1, "ambiguous": 1, "permanent": 1, "unexpected": 1,
    }  # fmt: skip
    # Every call is timed, failures included.
    calls = sample("reminders_provider_request_duration_seconds_count", provider=name)
    assert calls - calls_before == 6


class Ticks:
    name = "metrics-test-loop"

    def __init__(self, script: list[TickResult | Exception], stop: threading.Event) -> None:
        self.script = script
        self.stop = stop

    def run_once(self, now: datetime) -> TickResult:
        del now
        step = self.script.pop(0)
        if not self.script:
            self.stop.set()
        if isinstance(step, Exception):
            raise step
        return step


def test_the_loop_times_every_tick_counts_failures_and_beats() -> None:
    name = Ticks.name
    ticks_before = sample("reminders_tick_duration_seconds_count", workload=name)
    failures_before = sample("reminders_tick_failures_total", workload=name)
    stop = threading.Event()
    clock_now = [NOW]

    def clock() -> datetime:
        clock_now[0] += timedelta(seconds=1)
        return clock_now[0]

    svc = Ticks([TickResult(processed=1, more=True), RuntimeError("db down"), TickResult()], stop)
    hb = Heartbeat()
    run_loop(svc, stop, poll_interval_s=0.01, max_backoff_s=0.02, clock=clock, heartbeat=hb,
             jitter_start=False)  # fmt: skip
    assert sample("reminders_tick_duration_seconds_count", workload=name) - ticks_before == 3
    assert sample("reminders_tick_failures_total", workload=name) - failures_before == 1
    # The heartbeat is the clock's last reading: the end of the last tick.
    assert hb.last_tick_at == clock_now[0]
    beat = sample("reminders_worker_heartbeat_timestamp_seconds", workload=name)
    assert beat == clock_now[0].timestamp()


def _thread(name: str, alive: bool) -> threading.Thread:
    """A thread named `name`, still running (a daemon waiting forever) or already done."""
    done = threading.Event()
    thread = threading.Thread(target=done.wait, name=name, daemon=True)
    thread.start()
    if not alive:
        done.set()
        thread.join()
    return thread


def test_health_is_ok_while_every_loop_beats_within_the_stale_limit() -> None:
    a, b = _thread("a", alive=True), _thread("b", alive=True)
    beats = {
        "a": Heartbeat(last_tick_at=NOW - timedelta(seconds=30)),
        # In a long tick: started 50 s ago, last finished 500 s ago.
        "b": Heartbeat(last_tick_at=NOW - timedelta(seconds=500),
                       tick_started_at=NOW - timedelta(seconds=50)),
    }  # fmt: skip
    health = loop_health([a, b], beats, now=NOW, since=NOW - timedelta(hours=1), stale_s=60)
    assert health.ok
    assert health.loops["a"]["last_beat_age_s"] == 30
    assert health.loops["b"]["last_beat_age_s"] == 50


def test_health_fails_on_a_stale_loop_or_a_dead_thread() -> None:
    a = _thread("a", alive=True)
    stale = {"a": Heartbeat(last_tick_at=NOW - timedelta(seconds=61))}
    assert not loop_health([a], stale, now=NOW, since=NOW, stale_s=60).ok
    dead = _thread("d", alive=False)
    fresh = {"d": Heartbeat(last_tick_at=NOW)}
    health = loop_health([dead], fresh, now=NOW, since=NOW, stale_s=60)
    assert not health.ok
    assert health.loops["d"]["alive"] is False


def test_failing_ticks_make_a_loop_not_ready_but_leave_it_alive() -> None:
    # Liveness must not restart pods for a dependency outage; readiness shows it after
    # NOT_READY_AFTER_FAILURES failed ticks in a row.
    a = _thread("a", alive=True)
    for failures, ready in ((0, True), (NOT_READY_AFTER_FAILURES - 1, True),
                            (NOT_READY_AFTER_FAILURES, False)):  # fmt: skip
        beats = {"a": Heartbeat(last_tick_at=NOW, consecutive_failures=failures)}
        health = loop_health([a], beats, now=NOW, since=NOW, stale_s=60)
        assert health.ok
        assert (health.ready, health.loops["a"]["ready"]) == (ready, ready)
    stale = {"a": Heartbeat(last_tick_at=NOW - timedelta(seconds=61))}
    assert not loop_health([a], stale, now=NOW, since=NOW, stale_s=60).ready  # dead: not ready


def test_a_tick_that_says_it_failed_counts_without_backing_off() -> None:
    name = Ticks.name
    failures_before = sample("reminders_tick_failures_total", workload=name)
    stop = threading.Event()
    failed = TickResult(processed=1, failed="publish")
    svc = Ticks([failed, failed, TickResult(processed=1), failed], stop)
    hb = Heartbeat()
    started = time.monotonic()
    run_loop(svc, stop, poll_interval_s=0.01, max_backoff_s=5, heartbeat=hb,
             jitter_start=False)  # fmt: skip
    assert time.monotonic() - started < 2  # never a backoff of seconds
    assert sample("reminders_tick_failures_total", workload=name) - failures_before == 3
    assert hb.consecutive_failures == 1  # reset by the good tick, then one more


def test_before_its_first_tick_a_loop_is_judged_from_its_start() -> None:
    a = _thread("a", alive=True)
    since = NOW - timedelta(seconds=10)
    assert loop_health([a], {}, now=NOW, since=since, stale_s=60).ok
    assert not loop_health([a], {}, now=NOW, since=since, stale_s=5).ok


@pytest.mark.parametrize(
    ("value", "threshold", "expected"),
    [
        (121.0, 120.0, State.ALERT),
        (120.0, 120.0, State.OK),  # the rules alert on "> 120", not ">="
        (0, 0, State.OK),  # DLQ depth 0 with "> 0"
        (1, 0, State.ALERT),
        (5, None, State.INFO),
        (None, 120.0, State.UNKNOWN),
    ],
)
def test_judge(value: float | None, threshold: float | None, expected: State) -> None:
    assert judge(value, threshold) is expected


def _report(*states: State) -> StatusReport:
    checks = [Check(f"c{i}", "c", 1, "", None, s) for i, s in enumerate(states)]
    return StatusReport(checked_at=NOW, checks=checks)


def test_exit_codes() -> None:
    assert _report(State.OK, State.INFO).exit_code == 0
    assert _report(State.OK, State.ALERT).exit_code == 1
    assert _report(State.OK, State.UNKNOWN).exit_code == 2
    assert _report(State.UNKNOWN, State.ALERT).exit_code == 1  # an alert wins
    data = _report(State.ALERT).to_json()
    assert data["status"] == "alert"
    assert data["exit_code"] == 1
    assert data["checks"][0]["state"] == "alert"
