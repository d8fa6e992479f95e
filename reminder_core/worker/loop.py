"""One loop for every workload: tick, wait on a stop event, back off after failures.

A workload is a service object with `run_once(now) -> TickResult` that does one tick and
never sleeps (River's runOnce). The loop owns the timing: jittered start, immediate next
tick while there is more work, exponential backoff after a failing tick, and a heartbeat
for liveness probes.
"""

from __future__ import annotations

import logging
import random
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime
from typing import Protocol

from reminder_core.clock import utcnow
from reminder_core.errors import InfrastructureError
from reminder_core.metrics import HEARTBEAT, TICK_DURATION, TICK_FAILURES

log = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class TickResult:
    """Counts of one tick.

    Attributes:
        processed: items handled; a full batch (`more` True) makes the loop tick again at once.
        more: True when the tick stopped at its batch limit and work may be waiting.
        counts: named counts for logs and tests (e.g. {"claimed": 12}).
        failed: what failed in a tick that otherwise did its work (e.g. "publish": the
            coordinator's fast path could not reach the queue after committing its
            claims), else None. The loop counts such a tick as failed (metric,
            consecutive failures, `/readyz`) but does not back off: what it committed
            stands, and the next tick has work of its own.
    """

    processed: int = 0
    more: bool = False
    counts: dict[str, int] = field(default_factory=dict)
    failed: str | None = None


class Service(Protocol):
    """A workload that can run one tick."""

    name: str

    def run_once(self, now: datetime) -> TickResult: ...


@dataclass
class Heartbeat:
    """Last time a loop started and finished a tick (successfully or not); read by
    liveness probes (`reminder_core.metrics_server`)."""

    last_tick_at: datetime | None = None
    consecutive_failures: int = 0
    tick_started_at: datetime | None = None


def run_loop(
    service: Service,
    stop: threading.Event,
    *,
    poll_interval_s: float,
    max_backoff_s: float = 30.0,
    clock: Callable[[], datetime] = utcnow,
    heartbeat: Heartbeat | None = None,
    jitter_start: bool = True,
) -> None:
    """Run `service.run_once` until `stop` is set.

    Args:
        poll_interval_s: seconds to wait after a tick that found no more work.
        max_backoff_s: cap of the wait after consecutive failing ticks.
        clock: source of `now` passed to each tick (aware UTC).
        heartbeat: updated before and after every tick.
        jitter_start: wait a random part of one interval first, so replicas spread out.

    Side effects: whatever the ticks do; logs failing ticks (an InfrastructureError, a
    dependency that is down, in one line; anything else with its traceback); metrics
    labelled with `service.name`: reminders_tick_duration_seconds,
    reminders_tick_failures_total (ticks that raised, and ticks whose result says
    `failed`) and reminders_worker_heartbeat_timestamp_seconds (set at each tick's start
    and end, from `clock`). Returns when `stop` is set, after the tick in progress (if
    any) has finished: a soft stop never cuts a tick.
    """
    hb = heartbeat or Heartbeat()
    if jitter_start and stop.wait(random.uniform(0, poll_interval_s)):
        return
    beat = HEARTBEAT.labels(workload=service.name)
    duration = TICK_DURATION.labels(workload=service.name)
    # A service may wait for its own work (`wait_for_work(stop, timeout_s)`: the sender
    # wakes when its queue's next message becomes visible or new ones are sent) instead
    # of sleeping out the poll interval; never after a failing tick (that is a backoff).
    waiter: Callable[[threading.Event, float], None] | None = getattr(
        service, "wait_for_work", None
    )
    while not stop.is_set():
        idle_wait: Callable[[threading.Event, float], None] | None = None
        hb.tick_started_at = clock()
        beat.set(hb.tick_started_at.timestamp())
        started = time.monotonic()
        try:
            result = service.run_once(hb.tick_started_at)
        except Exception as exc:
            duration.observe(time.monotonic() - started)
            TICK_FAILURES.labels(workload=service.name).inc()
            hb.consecutive_failures += 1
            backoff = min(max_backoff_s, poll_interval_s * 2**hb.consecutive_failures)
            wait = random.uniform(backoff / 2, backoff)
            log.error(
                "%s tick failed (%d in a row); next try in %.1fs%s",
                service.name,
                hb.consecutive_failures,
                wait,
                f": {exc}" if isinstance(exc, InfrastructureError) else "",
                exc_info=not isinstance(exc, InfrastructureError),
            )
        else:
            duration.observe(time.monotonic() - started)
            if result.failed is None:
                hb.consecutive_failures = 0
            else:
                TICK_FAILURES.labels(workload=service.name).inc()
                hb.consecutive_failures += 1
            wait = 0.0 if result.more else poll_interval_s
            idle_wait = waiter
            if result.processed:
                log.debug("%s tick: %s", service.name, result.counts)
        hb.last_tick_at = clock()
        beat.set(hb.last_tick_at.timestamp())
        if not wait:
            continue
        if idle_wait is not None:
            idle_wait(stop, wait)  # returns when work may be there, on stop, or after `wait`
        else:
            stop.wait(wait)


def start_loops(
    loops: list[tuple[Service, float]],
    stop: threading.Event,
    heartbeats: dict[str, Heartbeat] | None = None,
) -> list[threading.Thread]:
    """Start one daemon thread per (service, poll_interval_s); return the threads, in the
    order of `loops`.

    Args:
        heartbeats: when given, filled with one `Heartbeat` per service name, which its
            loop keeps up to date (for `/healthz`).
    """
    threads = []
    for service, interval in loops:
        hb = Heartbeat()
        if heartbeats is not None:
            heartbeats[service.name] = hb
        thread = threading.Thread(
            target=run_loop,
            args=(service, stop),
            kwargs={"poll_interval_s": interval, "heartbeat": hb},
            name=service.name,
            daemon=True,
        )
        thread.start()
        threads.append(thread)
    return threads


def join_loops(threads: list[threading.Thread], grace_s: float) -> list[str]:
    """Wait up to `grace_s` seconds in all for the threads; return names of those still alive.

    What a thread abandons at the hard stop is re-driven by its claim or lease timing out.
    """
    deadline = threading.Event()
    timer = threading.Timer(grace_s, deadline.set)
    timer.start()
    try:
        for thread in threads:
            while thread.is_alive() and not deadline.is_set():
                thread.join(timeout=0.1)
    finally:
        timer.cancel()
    return [t.name for t in threads if t.is_alive()]
