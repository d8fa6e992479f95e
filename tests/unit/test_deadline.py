"""time_limit stops pure-Python computation at its limit, and never afterwards."""

from __future__ import annotations

import threading
import time

import pytest

from reminder_core.domain.deadline import TimeLimitExceeded, time_limit


def spin(seconds: float) -> int:
    end = time.monotonic() + seconds
    n = 0
    while time.monotonic() < end:
        n += 1
    return n


def test_a_long_computation_is_interrupted_at_the_limit() -> None:
    started = time.monotonic()
    with pytest.raises(TimeLimitExceeded), time_limit(0.2):
        spin(10)
    assert time.monotonic() - started < 5  # interrupted, not run to its end


def test_a_short_computation_finishes_and_nothing_fires_later() -> None:
    with time_limit(0.2):
        assert spin(0.01) > 0
    spin(0.4)  # past the limit: a stray asynchronous exception would surface here


def test_nested_limits_use_the_outer_one() -> None:
    with pytest.raises(TimeLimitExceeded), time_limit(0.2):
        with time_limit(30):
            spin(10)


def test_limits_are_per_thread() -> None:
    results: dict[str, str] = {}

    def worker(name: str, limit: float, work: float) -> None:
        try:
            with time_limit(limit):
                spin(work)
            results[name] = "done"
        except TimeLimitExceeded:
            results[name] = "stopped"

    threads = [
        threading.Thread(target=worker, args=("slow", 0.2, 5)),
        threading.Thread(target=worker, args=("fast", 5, 0.3)),
    ]
    for t in threads:
        t.start()
    for t in threads:
        t.join(10)
    assert results == {"slow": "stopped", "fast": "done"}
