"""The shared worker loop: ticks until stopped, ticks again at once while there is more
work, backs off after failures, and never cuts a tick short
(docs/design.md, "Worker loop")."""

from __future__ import annotations

import threading
import time
from datetime import UTC, datetime

from reminder_core.worker.loop import Heartbeat, TickResult, join_loops, run_loop, start_loops


class Scripted:
    name = "scripted"

    def __init__(self, script: list[TickResult | Exception], stop: threading.Event) -> None:
        self.script = script
        self.stop = stop
        self.ticks: list[float] = []

    def run_once(self, now: datetime) -> TickResult:
        assert now.tzinfo is UTC
        self.ticks.append(time.monotonic())
        if not self.script:
            self.stop.set()
            return TickResult()
        step = self.script.pop(0)
        if isinstance(step, Exception):
            raise step
        return step


def test_more_work_ticks_again_without_waiting() -> None:
    stop = threading.Event()
    svc = Scripted([TickResult(processed=10, more=True)] * 3, stop)
    started = time.monotonic()
    run_loop(svc, stop, poll_interval_s=5, jitter_start=False)
    assert len(svc.ticks) == 4
    assert time.monotonic() - started < 2  # never waited a 5 s poll interval


def test_failures_back_off_and_are_counted() -> None:
    stop = threading.Event()
    svc = Scripted([RuntimeError("db down"), RuntimeError("db down")], stop)
    hb = Heartbeat()
    run_loop(svc, stop, poll_interval_s=0.05, max_backoff_s=0.2, heartbeat=hb, jitter_start=False)
    gaps = [b - a for a, b in zip(svc.ticks, svc.ticks[1:], strict=False)]
    # Backoff after failure n is drawn from [b/2, b], b = min(max, interval * 2**n).
    assert gaps[0] >= 0.05 * 2 / 2
    assert gaps[1] >= 0.05 * 4 / 2
    assert hb.consecutive_failures == 0  # the last tick succeeded
    assert hb.last_tick_at is not None


def test_stop_event_ends_a_waiting_loop_promptly() -> None:
    stop = threading.Event()

    class Idle:
        name = "idle"

        def run_once(self, _now: datetime) -> TickResult:
            return TickResult()

    threads = start_loops([(Idle(), 60.0)], stop)
    time.sleep(0.1)
    stop.set()
    assert join_loops(threads, grace_s=2) == []


def test_join_reports_loops_that_overrun_the_grace() -> None:
    stop = threading.Event()
    release = threading.Event()

    class Stuck:
        name = "stuck"

        def run_once(self, _now: datetime) -> TickResult:
            release.wait(5)
            return TickResult()

    threads = start_loops([(Stuck(), 0.01)], stop)
    time.sleep(0.1)
    stop.set()
    assert join_loops(threads, grace_s=0.2) == ["stuck"]
    release.set()
    assert join_loops(threads, grace_s=2) == []
