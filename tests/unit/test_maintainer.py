"""The maintainer (coordinator/maintenance/maintainer.py; docs/design.md, "Maintenance"):
each service runs when its own interval has passed since its last run, at once again
after a run cut at its batch limit or a failure, in the order given; one failure never
stops the others (River's queue maintainer runs each service on its own schedule)."""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta

import pytest

from coordinator.maintenance.maintainer import Maintainer, MaintenanceStepFailed
from reminder_core.worker.loop import TickResult

T0 = datetime(2030, 1, 1, 9, tzinfo=UTC)


@dataclass
class Job:
    """A maintenance service that logs its runs into `ran` and answers from `answers`
    (an exception is raised), then {name: 1}."""

    name: str
    interval_s: float
    ran: list[tuple[str, datetime]]
    answers: list[TickResult | Exception] = field(default_factory=list)

    def run_once(self, now: datetime) -> TickResult:
        self.ran.append((self.name, now))
        answer = self.answers.pop(0) if self.answers else None
        if isinstance(answer, Exception):
            raise answer
        return answer or TickResult(processed=1, counts={self.name: 1})


def at(seconds: float) -> datetime:
    return T0 + timedelta(seconds=seconds)


def test_each_service_runs_on_its_own_interval_in_the_given_order() -> None:
    ran: list[tuple[str, datetime]] = []
    maintainer = Maintainer([Job("fast", 10, ran), Job("slow", 600, ran)])
    for s in (0, 5, 10, 20, 599, 600):
        maintainer.run_once(at(s))
    assert ran == [
        ("fast", at(0)), ("slow", at(0)),  # the first tick runs everything, in order
        ("fast", at(10)), ("fast", at(20)), ("fast", at(599)),
        ("slow", at(600)),  # fast: 10 s after its run at 599, not after 590
    ]  # fmt: skip


def test_counts_of_the_services_that_ran_are_merged_and_zeros_left_out() -> None:
    ran: list[tuple[str, datetime]] = []
    idle = TickResult(counts={"b": 0})
    maintainer = Maintainer([Job("a", 0, ran), Job("b", 0, ran, [idle])])
    result = maintainer.run_once(at(0))
    assert (result.processed, result.more, result.counts) == (1, False, {"a": 1})


def test_a_full_batch_makes_that_service_due_at_once_and_the_tick_report_more() -> None:
    ran: list[tuple[str, datetime]] = []
    full = TickResult(processed=500, more=True, counts={"slow": 500})
    maintainer = Maintainer([Job("slow", 600, ran, [full])])
    assert maintainer.run_once(at(0)).more is True
    assert maintainer.run_once(at(1)).counts == {"slow": 1}  # due again at once
    assert maintainer.run_once(at(2)).counts == {}  # then its interval
    assert ran == [("slow", at(0)), ("slow", at(1))]


def test_a_failing_service_does_not_stop_the_others_and_runs_again_next_tick() -> None:
    ran: list[tuple[str, datetime]] = []
    maintainer = Maintainer(
        [Job("letters", 600, ran, [RuntimeError("profile service down")]), Job("gauges", 600, ran)]
    )
    with pytest.raises(MaintenanceStepFailed) as failed:
        maintainer.run_once(at(0))
    assert [name for name, _ in failed.value.failures] == ["letters"]
    assert failed.value.counts == {"gauges": 1}
    assert maintainer.run_once(at(1)).counts == {"letters": 1}  # retried; gauges not due
    assert ran == [("letters", at(0)), ("gauges", at(0)), ("letters", at(1))]


def test_two_services_of_one_name_are_refused() -> None:
    with pytest.raises(ValueError, match="named twice"):
        Maintainer([Job("a", 1, []), Job("a", 2, [])])
