"""Misfire policies (docs/design.md, "Missed runs"): which due occurrence is sent, which
missed.

Expected plans follow the policy definitions of docs/design.md, "Missed runs", word for
word: latest — "send the latest due occurrence; every older one is recorded `missed`";
skip — "every occurrence more than `max_lateness_s` late is recorded `missed`; the oldest
within the cap is sent"; all — "send the oldest; the others follow one by one".
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from reminder_core.domain.misfire import MisfirePlan, plan_misfire

NOW = datetime(2030, 1, 8, 9, 30, tzinfo=UTC)
# A daily 09:00 reminder whose sender was down for a week: 8 due occurrences.
DUE = [datetime(2030, 1, d, 9, 0, tzinfo=UTC) for d in range(1, 9)]


def test_latest_sends_only_the_latest_and_misses_the_rest() -> None:
    plan = plan_misfire("latest", DUE, now=NOW, max_lateness_s=3600)
    assert plan == MisfirePlan(send=DUE[-1], missed=tuple(DUE[:-1]))


def test_all_sends_the_oldest_first_and_misses_nothing() -> None:
    assert plan_misfire("all", DUE, now=NOW, max_lateness_s=3600) == MisfirePlan(DUE[0], ())


def test_skip_misses_what_is_later_than_the_cap_and_sends_the_rest_oldest_first() -> None:
    # Cap one hour: only today's 09:00 (30 min late) is within it.
    plan = plan_misfire("skip", DUE, now=NOW, max_lateness_s=3600)
    assert plan == MisfirePlan(send=DUE[-1], missed=tuple(DUE[:-1]))
    # Cap two days: the 7th (24.5 h late) and the 8th are within it; the 7th goes first.
    plan = plan_misfire("skip", DUE, now=NOW, max_lateness_s=2 * 86400)
    assert plan == MisfirePlan(send=DUE[6], missed=tuple(DUE[:6]))


def test_skip_with_everything_too_late_sends_nothing() -> None:
    later = NOW + timedelta(hours=3)
    assert plan_misfire("skip", DUE, now=later, max_lateness_s=3600) == MisfirePlan(
        None, tuple(DUE)
    )


@pytest.mark.parametrize("policy", ["latest", "skip", "all"])
def test_an_on_time_occurrence_is_simply_sent(policy: str) -> None:
    plan = plan_misfire(policy, [NOW], now=NOW, max_lateness_s=0)  # type: ignore[arg-type]
    assert plan == MisfirePlan(send=NOW, missed=())


def test_refuses_empty_or_unsorted_input() -> None:
    with pytest.raises(ValueError, match="empty"):
        plan_misfire("latest", [], now=NOW, max_lateness_s=1)
    with pytest.raises(ValueError, match="ascending"):
        plan_misfire("latest", [DUE[1], DUE[0]], now=NOW, max_lateness_s=1)
