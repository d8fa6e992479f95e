"""The receive size rule (sender.receive.BatchSizer; docs/design.md, "Batch size"): the
expected sizes follow from the rule as written there, for paces chosen here."""

from __future__ import annotations

import pytest

from sender.receive import BatchSizer


def test_the_batch_size_until_a_full_batch_is_timed() -> None:
    sizer = BatchSizer(100, 500, 1.0)
    assert sizer.next_size() == 100
    sizer.observe(100, 40, 0.01)  # a short batch: the queue ran dry, no pace
    sizer.observe(1, 1, 0.001)  # a probe of one: no pace
    sizer.observe(100, 100, 0.0)  # no time measured (a frozen clock): no pace
    assert (sizer.rate, sizer.next_size()) == (None, 100)


def test_one_target_of_work_between_the_bounds() -> None:
    sizer = BatchSizer(100, 500, 1.0)
    sizer.observe(100, 100, 0.5)  # 200 a second: 1 s of work is 200
    assert sizer.next_size() == 200
    sizer.observe(200, 200, 0.1)  # 2,000 a second: halfway from 200, 1,100; capped
    assert (sizer.rate, sizer.next_size()) == (1100.0, 500)
    sizer.observe(500, 500, 10.0)  # 50 a second, slower: at once; floored
    assert (sizer.rate, sizer.next_size()) == (50.0, 100)


def test_a_half_second_target_holds_half_as_much() -> None:
    sizer = BatchSizer(10, 1000, 0.5)
    sizer.observe(10, 10, 0.025)  # 400 a second: half a second is 200
    assert sizer.next_size() == 200


@pytest.mark.parametrize(
    ("batch_max", "target_s"), [(None, 1.0), (100, 1.0), (50, 1.0), (500, 0.0)]
)
def test_fixed_when_nothing_to_size(batch_max: int | None, target_s: float) -> None:
    """No SENDER_BATCH_MAX above SENDER_BATCH_SIZE, or a target of 0: always the size."""
    sizer = BatchSizer(100, batch_max, target_s)
    sizer.observe(100, 100, 0.01)  # 10,000 a second
    assert sizer.next_size() == 100
