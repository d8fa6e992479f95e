"""Claim rescuer: reminders stuck in `claimed` past CLAIM_TIMEOUT_S go back to `pending`
at the same next_run_utc (re-driven; the unique delivery row keeps this safe)."""

from __future__ import annotations

import logging
from dataclasses import dataclass
from datetime import datetime
from typing import ClassVar

from sqlalchemy import Connection

from coordinator.maintenance.base import Rescuer, counted
from reminder_core.logging import delivery_fields
from reminder_core.services import reminders as reminder_services
from reminder_core.store.reminders import RescuedClaim
from reminder_core.worker.loop import TickResult

log = logging.getLogger(__name__)


@dataclass
class ClaimRescuer(Rescuer[RescuedClaim]):
    """Re-drives stale claims (besides Rescuer's attributes):

    Attributes:
        claim_timeout_s: a claim older than this is re-driven (longer than the longest
            retry horizon: max receives x (visibility timeout + backoff)).
        live_queue: the PostgreSQL queue's name when its messages are in this database:
            a claim whose message is still live there is left alone (it is on its way;
            `reminder_rescue_claimed`). None (SQS): every old claim is re-driven.
    """

    claim_timeout_s: float
    live_queue: str | None = None
    name: ClassVar[str] = "reclaimed"

    def rescue(self, conn: Connection, *, cutoff: datetime, now: datetime) -> list[RescuedClaim]:
        """Claims older than `cutoff` back to `pending` (`services.reminders.rescue_claimed`)."""
        return reminder_services.rescue_claimed(
            conn, cutoff=cutoff, now=now, limit=self.batch_size, live_queue=self.live_queue
        )

    def run_once(self, now: datetime) -> TickResult:
        """Re-drive reminders claimed more than `claim_timeout_s` before `now` (aware
        UTC), in one transaction; counts {"reclaimed": n}. Logs each one."""
        rows = self.stale_rows(now, self.claim_timeout_s)
        if rows:
            log.warning("re-drove %d reminders stuck in claimed", len(rows))
        for row in rows:
            log.info(
                "delivery re-driven: claimed for too long",
                extra=delivery_fields(row.id, row.next_run_utc, None, None),
            )
        return counted(self.name, len(rows), self.batch_size)
