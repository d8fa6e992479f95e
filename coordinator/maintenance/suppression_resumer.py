"""Suppression resumer: reminders paused by a suppression (docs/design.md, "Suppression
list") resume when their user's profile address changed to one not suppressed, or the
entry was removed; each is checked every SUPPRESSION_RECHECK_INTERVAL_S (just-paused ones
at the next run) by reminder_core.suppression.recheck_paused."""

from __future__ import annotations

from datetime import datetime

from sqlalchemy import Engine

from reminder_core.profiles import ProfileSource
from reminder_core.scheduling import ScheduleConfig
from reminder_core.suppression import recheck_paused
from reminder_core.worker.loop import TickResult


class SuppressionResumer:
    """Resumes suppression-paused reminders whose address is clear again.

    Args:
        engine: database engine.
        profiles: the users' current addresses and zones.
        recheck_s: SUPPRESSION_RECHECK_INTERVAL_S, seconds between two checks of one
            reminder.
        schedule_config: recurrence limits (a resumed reminder's next occurrence).
        batch_size: most reminders checked per run.
        interval_s: seconds between runs.
    """

    name = "suppression_resumed"

    def __init__(
        self,
        engine: Engine,
        profiles: ProfileSource,
        *,
        recheck_s: float,
        schedule_config: ScheduleConfig,
        batch_size: int,
        interval_s: float,
    ) -> None:
        self._engine = engine
        self._profiles = profiles
        self.recheck_s = recheck_s
        self.schedule_config = schedule_config
        self.batch_size = batch_size
        self.interval_s = interval_s

    def run_once(self, now: datetime) -> TickResult:
        """Check the paused reminders due for a check at `now` (aware UTC); counts
        {"suppression_resumed": n}, `more` when a full batch was checked.

        Raises:
            InfrastructureError: the profile service failed (the others still run).
        """
        result = recheck_paused(
            self._engine,
            self._profiles,
            now=now,
            recheck_interval_s=self.recheck_s,
            limit=self.batch_size,
            config=self.schedule_config,
        )
        return TickResult(
            processed=result.resumed,
            more=result.checked >= self.batch_size,
            counts={self.name: result.resumed},
        )
