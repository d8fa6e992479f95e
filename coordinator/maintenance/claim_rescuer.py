"""Claim rescuer: reminders stuck in `claimed` past CLAIM_TIMEOUT_S go back to `pending`
at the same next_run_utc (re-driven; the unique delivery row keeps this safe)."""

from __future__ import annotations

import logging
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any, ClassVar

from sqlalchemy import Engine, Row

from reminder_core.db.queries import query
from reminder_core.logging import delivery_fields
from reminder_core.worker.loop import TickResult

log = logging.getLogger(__name__)


@dataclass
class ClaimRescuer:
    """Re-drives stale claims.

    Attributes:
        engine: database engine.
        claim_timeout_s: a claim older than this is re-driven (longer than the longest
            retry horizon: max receives x (visibility timeout + backoff)).
        batch_size: most reminders per run.
        interval_s: seconds between runs.
    """

    engine: Engine
    claim_timeout_s: float
    batch_size: int
    interval_s: float
    name: ClassVar[str] = "reclaimed"

    def run_once(self, now: datetime) -> TickResult:
        """Re-drive reminders claimed more than `claim_timeout_s` before `now` (aware
        UTC), in one transaction; counts {"reclaimed": n}. Logs each one."""
        rows = stale_rows(self.engine, "reap_claimed", now, self.claim_timeout_s, self.batch_size)
        if rows:
            log.warning("re-drove %d reminders stuck in claimed", len(rows))
        for row in rows:
            log.info(
                "delivery re-driven: claimed for too long",
                extra=delivery_fields(row.id, row.next_run_utc, None, None),
            )
        return counted(self.name, len(rows), self.batch_size)


def stale_rows(
    engine: Engine, statement: str, now: datetime, older_than_s: float, limit: int
) -> list[Row[Any]]:
    """Run the named reaper `statement` (binds :cutoff, :now, :limit) in its own
    transaction, with the cutoff `older_than_s` seconds before `now`; its rows."""
    with engine.begin() as conn:
        return list(
            conn.execute(
                query(statement),
                {"cutoff": now - timedelta(seconds=older_than_s), "now": now, "limit": limit},
            )
        )


def counted(name: str, count: int, batch_size: int) -> TickResult:
    """The TickResult of a service that handled `count` items of at most `batch_size`
    (`more`: the batch was full, work may be waiting)."""
    return TickResult(processed=count, more=count >= batch_size, counts={name: count})
