"""How many sends one mid-batch re-read covers (sender.recheck, issue 15): the sends
expected to start within two recheck intervals at the rate they have been starting, never
fewer than the minimum."""

from __future__ import annotations

from sender.recheck import CHUNK_INTERVALS, MIN_CHUNK, chunk_size


def test_a_recheck_chunk_covers_two_intervals_of_sends_and_at_least_the_minimum() -> None:
    assert CHUNK_INTERVALS == 2.0
    # 1,000 sends started in 0.5 s: 2,000/s, so 200 start within a 0.1 s interval.
    assert chunk_size(1000, 0.5, 0.1) == 400
    assert chunk_size(0, 0.5, 0.1) == MIN_CHUNK
    assert chunk_size(5, 0.0, 0.1) >= MIN_CHUNK
