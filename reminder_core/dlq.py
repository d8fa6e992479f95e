"""Dead-letter queue operations behind `reminders dlq` (list, replay, purge)."""

from __future__ import annotations

import uuid
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta

from sqlalchemy import Engine

from reminder_core.db.queries import query
from reminder_core.queue import DeadLetter, Queue


@dataclass(frozen=True, slots=True)
class ReplayReport:
    """redriven: messages sent back to the queue; already_done: dead letters whose
    occurrence had been delivered meanwhile (deleted, not sent again); missing: ids asked
    for that are not in the dead-letter queue (missing_ids: those ids, in the order
    asked)."""

    redriven: int
    already_done: int
    missing: int
    missing_ids: tuple[str, ...] = ()


def replay(
    engine: Engine,
    queue: Queue,
    message_ids: Sequence[str] | None,
    *,
    now: datetime,
    lease_s: float = 0.0,
) -> ReplayReport:
    """Send dead letters back to the queue, safely.

    An occurrence that was delivered after all (its delivery row is `sent`, `bounced` or
    `complained`) is not sent again: its dead letter is deleted. Otherwise the delivery
    row becomes `sending` with no lease and the message is redriven, marked as a replay
    (the sender then sends exactly that occurrence, unless its reminder was cancelled or
    paused meanwhile).

    Args:
        message_ids: dead-letter ids to replay; None for all of them.
        lease_s: DELIVERY_LEASE_S; a `sending` row locked less than this long ago is held
            by a live sender and left to it (the replayed message waits out the lease).
    """
    letters = {d.message_id: d for d in queue.dead_letters(limit=100_000)}
    wanted = list(letters) if message_ids is None else list(message_ids)
    missing = tuple(i for i in wanted if i not in letters)
    redrive: list[str] = []
    done: list[str] = []
    with engine.begin() as conn:
        for message_id in wanted:
            letter = letters.get(message_id)
            if letter is None:
                continue
            try:
                reminder_id = uuid.UUID(str(letter.body["reminder_id"]))
                run_time = datetime.fromisoformat(str(letter.body["run_time_utc"]))
            except (KeyError, ValueError, TypeError):
                done.append(message_id)  # malformed: nothing could ever send it
                continue
            status = conn.execute(
                query("delivery_status"), {"reminder_id": reminder_id, "run_time_utc": run_time}
            ).scalar_one_or_none()
            if status in ("sent", "bounced", "complained"):
                done.append(message_id)
                continue
            conn.execute(
                query("delivery_for_replay"),
                {
                    "reminder_id": reminder_id,
                    "run_time_utc": run_time,
                    "now": now,
                    "lease_cutoff": now - timedelta(seconds=lease_s),
                },
            )
            redrive.append(message_id)
    moved = queue.redrive(redrive, now=now)
    queue.delete_dead_letters(done)
    return ReplayReport(
        redriven=moved, already_done=len(done), missing=len(missing), missing_ids=missing
    )


def list_dead_letters(queue: Queue, *, limit: int = 1000) -> list[DeadLetter]:
    """The dead letters, oldest first."""
    return queue.dead_letters(limit=limit)


def purge(queue: Queue, message_ids: Sequence[str] | None) -> int:
    """Delete dead letters (None: all). Their occurrences stay recorded as `failed`."""
    return queue.delete_dead_letters(message_ids)
