"""Publishing outbox rows to the queue; shared by the coordinator's fast path and the
outbox sweeper's safety net."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime
from typing import Any

from sqlalchemy import Engine

from reminder_core.messages import run_time_of
from reminder_core.queue import Queue
from reminder_core.store import outbox
from reminder_core.store.outbox import OutboxRow


def message_delay_s(payload: dict[str, Any], now: datetime) -> float:
    """Seconds until the occurrence in `payload` is due (0 when already due).

    A reminder claimed ahead of time (lookahead) is delivered at its due time, not early.

    Raises:
        MalformedMessage: the payload has no valid run_time_utc (never for rows written by
            `reminder_claim_due`).
    """
    run_time = run_time_of(payload)
    return max(0.0, (run_time - now).total_seconds())


def publish_outbox_rows(
    engine: Engine,
    queue: Queue,
    rows: Sequence[OutboxRow],
    *,
    now: datetime,
) -> int:
    """Send the payloads of `rows` (in their order) and mark them published.

    At-least-once: a crash between the send and the mark leaves the rows unpublished and
    the sweeper sends them again; the sender's unique delivery row absorbs the duplicate.

    Returns:
        Number of rows sent.

    Raises:
        InfrastructureError: the queue refused; nothing is marked.
    """
    if not rows:
        return 0
    payloads = [r.payload for r in rows]
    queue.send_batch(payloads, now=now, delays_s=[message_delay_s(p, now) for p in payloads])
    with engine.begin() as conn:
        outbox.mark_published(conn, (r.id for r in rows), now=now)
    return len(rows)
