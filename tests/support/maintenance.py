"""The maintenance workload as the tests make it: one builder for every test file."""

from __future__ import annotations

from sqlalchemy import Engine

from coordinator.maintenance.main import services
from coordinator.maintenance.maintainer import Maintainer
from coordinator.maintenance.retention import Retention
from reminder_core.profiles import LocalProfileSource, ProfileSource
from reminder_core.queue import Queue
from reminder_core.scheduling import ScheduleConfig
from reminder_core.settings import Settings


def make_maintainer(
    db: Engine,
    queue: Queue,
    settings: Settings,
    *,
    profiles: ProfileSource | None = None,
    claim_timeout_s: float = 900,
    abandon_after_s: float = 900,
    lease_s: float = 120,
    retention: Retention | None = None,
    interval_s: float = 0.0,
) -> Maintainer:
    """The maintainer with the shipped services (no retention unless given), 15-minute
    claim and abandon thresholds, profiles from the settings' file unless given, and
    every service but retention due at every tick (`interval_s` 0), so that two ticks at
    the same instant both run them."""
    return Maintainer(
        services(
            db,
            queue,
            profiles or LocalProfileSource(settings.effective_profiles_file),
            schedule_config=ScheduleConfig.from_settings(settings),
            claim_timeout_s=claim_timeout_s,
            abandon_after_s=abandon_after_s,
            lease_s=lease_s,
            suppression_recheck_s=settings.suppression_recheck_interval_s,
            rematch_window_s=settings.webhook_rematch_window_s,
            interval_s=interval_s,
            retention=retention,
        )
    )
