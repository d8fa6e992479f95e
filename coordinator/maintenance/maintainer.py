"""The maintainer: runs the maintenance services, each when its own interval says, in a
fixed order, one failure never stopping the others (docs/design.md, "Maintenance")."""

from __future__ import annotations

import logging
from collections.abc import Sequence
from datetime import datetime, timedelta
from typing import Protocol

from reminder_core.errors import InfrastructureError
from reminder_core.worker.loop import TickResult

log = logging.getLogger(__name__)


class MaintenanceService(Protocol):
    """One maintenance job (River's `maintenance.Service`).

    Attributes:
        name: the key of its counts and of its failures (e.g. "reclaimed").
        interval_s: seconds between two of its runs (0: every tick); a run that stopped
            at its batch limit (`more`) is followed at the next tick.
    """

    @property
    def name(self) -> str: ...

    @property
    def interval_s(self) -> float: ...

    def run_once(self, now: datetime) -> TickResult: ...


class MaintenanceStepFailed(InfrastructureError):
    """One or more maintenance services failed while the others ran.

    Attributes:
        failures: (service name, exception) per failed service, in order.
        counts: what the services that ran did (as in a TickResult).
    """

    def __init__(self, failures: list[tuple[str, Exception]], counts: dict[str, int]) -> None:
        names = ", ".join(f"{name}: {exc}" for name, exc in failures)
        super().__init__(f"maintenance services failed ({names})")
        self.failures = failures
        self.counts = counts


class Maintainer:
    """The maintenance workload's service for the shared loop: each tick runs, in the
    order given, every service whose interval has passed since its last run (or whose
    last run was cut at its batch limit, or failed).

    Args:
        services: the services, in the order they run (dead letters before the claim
            rescuer: a dead letter's reminder is still `claimed` and must move on rather
            than be re-driven for another round of failing sends).
    """

    name = "maintenance"

    def __init__(self, services: Sequence[MaintenanceService]) -> None:
        names = [s.name for s in services]
        if len(set(names)) != len(names):
            raise ValueError(f"maintenance services named twice: {names}")
        self.services = list(services)
        self._due_at: dict[str, datetime] = {}

    def service(self, name: str) -> MaintenanceService:
        """The service called `name`.

        Raises:
            KeyError: no such service.
        """
        for service in self.services:
            if service.name == name:
                return service
        raise KeyError(name)

    def run_once(self, now: datetime) -> TickResult:
        """Run the services due at `now` (aware UTC); counts of all of them together.

        Raises:
            MaintenanceStepFailed: some services failed (after every other one ran; each
                failure is logged with its traceback): the loop counts the tick as failed
                and backs off; the failed ones run again at the next tick.
        """
        failures: list[tuple[str, Exception]] = []
        counts: dict[str, int] = {}
        more = False
        for service in self.services:
            due = self._due_at.get(service.name)
            if due is not None and now < due:
                continue
            try:
                result = service.run_once(now)
            except Exception as exc:
                log.exception("maintenance service %s failed; the others go on", service.name)
                failures.append((service.name, exc))
                self._due_at[service.name] = now
                continue
            counts.update({k: v for k, v in result.counts.items() if v})
            more = more or result.more
            wait = 0.0 if result.more else service.interval_s
            self._due_at[service.name] = now + timedelta(seconds=wait)
        if failures:
            raise MaintenanceStepFailed(failures, counts)
        return TickResult(processed=sum(counts.values()), more=more, counts=counts)
