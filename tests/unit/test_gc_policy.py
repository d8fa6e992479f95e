"""The garbage collector's policy of the API and the workloads (reminder_core/gc_policy.py):
what it changes in CPython's collector (the `gc` module's own counters, not ours)."""

from __future__ import annotations

import gc
from collections.abc import Iterator

import pytest

from reminder_core.gc_policy import apply_gc_policy
from reminder_core.settings import Settings


@pytest.fixture
def collector() -> Iterator[None]:
    """Python's collector as it was, restored after the test."""
    before = gc.get_threshold()
    yield
    gc.unfreeze()
    gc.set_threshold(*before)


@pytest.mark.usefixtures("collector")
def test_the_objects_alive_are_frozen_and_generation_0_waits_longer() -> None:
    gc.unfreeze()
    gen1, gen2 = gc.get_threshold()[1:]
    alive = [object() for _ in range(10)] + [[n] for n in range(1000)]  # tracked lists

    apply_gc_policy(50_000)

    assert gc.get_threshold() == (50_000, gen1, gen2)
    assert gc.get_freeze_count() >= len(alive)  # at least our lists: no longer traversed


@pytest.mark.usefixtures("collector")
def test_zero_leaves_the_collector_as_python_set_it() -> None:
    gc.unfreeze()
    before = gc.get_threshold()

    apply_gc_policy(0)

    assert gc.get_threshold() == before
    assert gc.get_freeze_count() == 0


def test_the_shipped_threshold_and_its_bounds() -> None:
    assert Settings(jwt_secret="x" * 40).gc_gen0_threshold == 50_000
    with pytest.raises(ValueError, match="gc_gen0_threshold"):
        Settings(jwt_secret="x" * 40, gc_gen0_threshold=-1)
