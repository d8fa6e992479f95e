"""Delivery rescuer: `sending` delivery rows that no worker holds and that their reminder
will not come back to are ended: `failed` ("abandoned"), or `sent` when the provider's
feedback reported the email accepted (docs/design.md, "Provider feedback: what the
provider knows that the sender lost")."""

from __future__ import annotations

import logging
from dataclasses import dataclass
from datetime import datetime
from typing import ClassVar

from sqlalchemy import Connection

from coordinator.maintenance.base import Rescuer, counted
from reminder_core.domain.states import DeliveryStatus
from reminder_core.logging import delivery_fields
from reminder_core.store import delivery_log
from reminder_core.store.delivery_log import AbandonedDelivery
from reminder_core.worker.loop import TickResult

log = logging.getLogger(__name__)


@dataclass
class DeliveryRescuer(Rescuer[AbandonedDelivery]):
    """Ends orphaned `sending` rows (besides Rescuer's attributes):

    Attributes:
        abandon_after_s: an unheld `sending` row older than this may be abandoned.
    """

    abandon_after_s: float
    name: ClassVar[str] = "abandoned"

    def rescue(
        self, conn: Connection, *, cutoff: datetime, now: datetime
    ) -> list[AbandonedDelivery]:
        """Orphaned `sending` rows unheld since `cutoff`, ended
        (`delivery_log.rescue_abandoned`)."""
        return delivery_log.rescue_abandoned(conn, cutoff=cutoff, now=now, limit=self.batch_size)

    def run_once(self, now: datetime) -> TickResult:
        """Record unheld, orphaned `sending` rows as failed (as sent with the provider's
        evidence), in one transaction; counts {"abandoned": n}. Logs each one."""
        rows = self.stale_rows(now, self.abandon_after_s)
        failed = sum(1 for row in rows if row.status == DeliveryStatus.FAILED)
        if failed:
            log.warning("recorded %d abandoned deliveries as failed", failed)
        for row in rows:
            log.info(
                "delivery abandoned: recorded failed"
                if row.status == DeliveryStatus.FAILED
                else "delivery abandoned: recorded sent (the provider reported it accepted)",
                extra=delivery_fields(
                    row.reminder_id, row.run_time_utc, None, row.provider,
                    provider_calls=row.attempt_count,
                ),
            )  # fmt: skip
        return counted(self.name, len(rows), self.batch_size)
