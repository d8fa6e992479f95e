"""What `reminders dlq replay|purge` counts as out of reach, pass by pass (issue 12: on
SQS a dead letter another reader has received is hidden for its visibility timeout, so a
scan does not see it; the DLQ's ApproximateNumberOfMessagesNotVisible counts it, and is
eventually consistent: "may lag by about a minute", AWS GetQueueAttributes)."""

from __future__ import annotations

from reminder_core.dlq import Tally, Unreached


def test_letters_held_before_the_first_pass_are_out_of_reach_until_seen() -> None:
    tally = Tally(None)
    assert tally.add(2, seen=[], acted=[]) == Unreached(held=2)
    assert tally.add(2, seen=[], acted=[]) == Unreached(held=2)
    assert tally.add(0, seen=["a", "b"], acted=["a", "b"]) == Unreached()


def test_a_held_count_that_lags_does_not_outlast_the_letters_it_counted() -> None:
    # After the held letters were seen and replayed, a stale count still says 2.
    tally = Tally(None)
    tally.add(2, seen=["c"], acted=["c"])
    assert tally.add(2, seen=["a", "b"], acted=["a", "b"]) == Unreached()


def test_an_id_asked_for_is_out_of_reach_while_an_unseen_letter_is_held() -> None:
    tally = Tally(["x"])
    assert tally.add(1, seen=["a"], acted=[]) == Unreached(held=1, held_ids=("x",))
    # The held letter shows up and is another one: "x" is not in the dead-letter queue.
    assert tally.add(1, seen=["a", "b"], acted=[]) == Unreached(missing_ids=("x",))


def test_an_id_asked_for_when_nothing_is_held_is_missing_at_once() -> None:
    tally = Tally(["x", "a", "x"])
    assert tally.add(0, seen=["a"], acted=["a"]) == Unreached(missing_ids=("x",))


def test_a_letter_taken_between_scan_and_act_is_waited_for_then_dropped_if_gone() -> None:
    # Seen by the scan, gone when acted on: another reader took it (held, or replayed).
    tally = Tally(None)
    assert tally.add(0, seen=["a", "b"], acted=["a"]) == Unreached(held=1, held_ids=("b",))
    assert tally.add(0, seen=[], acted=[]) == Unreached()  # not back, nothing held: gone
    by_id = Tally(["b"])
    assert by_id.add(0, seen=["b"], acted=[]) == Unreached(held=1, held_ids=("b",))
    assert by_id.add(1, seen=[], acted=[]) == Unreached(held=1, held_ids=("b",))  # held
    assert by_id.add(0, seen=["b"], acted=["b"]) == Unreached()
