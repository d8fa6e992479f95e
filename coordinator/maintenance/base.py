"""What the maintenance services share: a batch-limited service's TickResult, and the
base of the rescuers, which end rows older than a threshold with one named statement."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any, ClassVar

from sqlalchemy import Engine, Row

from reminder_core.store._statements import query
from reminder_core.worker.loop import TickResult


def counted(name: str, count: int, batch_size: int) -> TickResult:
    """The TickResult of a service that handled `count` items of at most `batch_size`
    (`more`: the batch was full, work may be waiting)."""
    return TickResult(processed=count, more=count >= batch_size, counts={name: count})


@dataclass
class Rescuer:
    """A maintenance service that runs the named reaper `statement` (binds :cutoff, :now,
    :limit) over rows older than a threshold.

    Attributes:
        engine: database engine.
        batch_size: most rows per run.
        interval_s: seconds between runs.
    """

    engine: Engine
    batch_size: int
    interval_s: float
    name: ClassVar[str]
    statement: ClassVar[str]

    def stale_rows(self, now: datetime, older_than_s: float) -> list[Row[Any]]:
        """The statement's rows, run in its own transaction with the cutoff
        `older_than_s` seconds before `now` (aware UTC)."""
        cutoff = now - timedelta(seconds=older_than_s)
        with self.engine.begin() as conn:
            return list(
                conn.execute(
                    query(self.statement),
                    {"cutoff": cutoff, "now": now, "limit": self.batch_size},
                )
            )
