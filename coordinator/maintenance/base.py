"""What the maintenance services share: a batch-limited service's TickResult, and the
base of the rescuers, which end rows older than a threshold with one store call."""

from __future__ import annotations

from abc import ABC, abstractmethod
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import ClassVar, Generic, TypeVar

from sqlalchemy import Connection, Engine

from reminder_core.worker.loop import TickResult

RescuedT = TypeVar("RescuedT")


def counted(name: str, count: int, batch_size: int) -> TickResult:
    """The TickResult of a service that handled `count` items of at most `batch_size`
    (`more`: the batch was full, work may be waiting)."""
    return TickResult(processed=count, more=count >= batch_size, counts={name: count})


@dataclass
class Rescuer(ABC, Generic[RescuedT]):
    """A maintenance service that ends, with its store call `rescue`, at most
    `batch_size` rows older than a threshold.

    Attributes:
        engine: database engine.
        batch_size: most rows per run.
        interval_s: seconds between runs.
    """

    engine: Engine
    batch_size: int
    interval_s: float
    name: ClassVar[str]

    @abstractmethod
    def rescue(self, conn: Connection, *, cutoff: datetime, now: datetime) -> list[RescuedT]:
        """End at most `batch_size` stale rows (older than `cutoff`, aware UTC) on `conn`,
        stamped `now`; returns one result per row ended."""

    def stale_rows(self, now: datetime, older_than_s: float) -> list[RescuedT]:
        """`rescue`'s rows, run in its own transaction with the cutoff `older_than_s`
        seconds before `now` (aware UTC)."""
        cutoff = now - timedelta(seconds=older_than_s)
        with self.engine.begin() as conn:
            return self.rescue(conn, cutoff=cutoff, now=now)
