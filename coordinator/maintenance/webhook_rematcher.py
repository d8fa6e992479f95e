"""Webhook rematcher: bounce and complaint events whose message id matched no delivery
(the webhook beat the sender's commit) are matched again for WEBHOOK_REMATCH_WINDOW_S and
applied once they match (reminder_core.suppression.rematch_unmatched)."""

from __future__ import annotations

from datetime import datetime, timedelta

from sqlalchemy import Engine

from coordinator.maintenance.base import counted
from reminder_core.suppression import rematch_unmatched
from reminder_core.worker.loop import TickResult


class WebhookRematcher:
    """Matches stored unmatched events again.

    Args:
        engine: database engine.
        window_s: WEBHOOK_REMATCH_WINDOW_S, how long an event is matched again (0: never).
        batch_size: most events per run.
        interval_s: seconds between runs.
    """

    name = "rematched"

    def __init__(
        self, engine: Engine, *, window_s: float, batch_size: int, interval_s: float
    ) -> None:
        self._engine = engine
        self.window_s = window_s
        self.batch_size = batch_size
        self.interval_s = interval_s

    def run_once(self, now: datetime) -> TickResult:
        """Apply the unmatched events received within `window_s` before `now` (aware UTC)
        whose delivery now exists, in one transaction; counts {"rematched": n}."""
        if self.window_s <= 0:
            return TickResult()
        with self._engine.begin() as conn:
            count = rematch_unmatched(
                conn, now=now, since=now - timedelta(seconds=self.window_s), limit=self.batch_size
            )
        return counted(self.name, count, self.batch_size)
