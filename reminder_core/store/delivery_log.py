"""Typed statements on `delivery_log` (`sql/delivery_log.sql`): one row per occurrence,
its lease and its outcome (docs/design.md, "Delivery states"). Every function runs on the
caller's `Connection` and never commits."""

from __future__ import annotations

import uuid
from dataclasses import dataclass
from datetime import UTC, datetime

from sqlalchemy import Connection

from reminder_core.domain.states import DeliveryStatus
from reminder_core.store._statements import query

# --- Shared reads ------------------------------------------------------------------------------


def get_status(
    conn: Connection, *, reminder_id: uuid.UUID, run_time_utc: datetime
) -> DeliveryStatus | None:
    """The state of the delivery row of one occurrence (`run_time_utc` aware UTC), or None
    when the occurrence has no row yet (`delivery_get_status`)."""
    status = conn.execute(
        query("delivery_get_status"), {"reminder_id": reminder_id, "run_time_utc": run_time_utc}
    ).scalar_one_or_none()
    return None if status is None else DeliveryStatus(status)


# --- API: a reminder's delivery history --------------------------------------------------------


@dataclass(frozen=True, slots=True)
class DeliveryHistoryItem:
    """What happened to one occurrence, as a user sees it. Instants aware UTC;
    `attempt_count` counts provider calls; `sent_at` is when the provider accepted it."""

    run_time_utc: datetime
    status: DeliveryStatus
    provider: str | None
    attempt_count: int
    error: str | None
    sent_at: datetime | None
    updated_at: datetime


_AFTER_EVERY_OCCURRENCE = datetime.max.replace(tzinfo=UTC)


def list_page(
    conn: Connection, *, reminder_id: uuid.UUID, limit: int, before: datetime | None
) -> list[DeliveryHistoryItem]:
    """Up to `limit` delivery rows of a reminder, newest occurrence first, those strictly
    before `before` (aware UTC; run_time_utc is unique per reminder) when given
    (`delivery_list_page`). The caller has checked that the reminder is the user's."""
    rows = conn.execute(
        query("delivery_list_page"),
        {"reminder_id": reminder_id, "limit": limit, "before": before or _AFTER_EVERY_OCCURRENCE},
    )
    return [
        DeliveryHistoryItem(
            run_time_utc=r.run_time_utc,
            status=DeliveryStatus(r.status),
            provider=r.provider,
            attempt_count=r.attempt_count,
            error=r.error,
            sent_at=r.sent_at,
            updated_at=r.updated_at,
        )
        for r in rows
    ]


# --- Sender: begin, complete, heartbeat, withdraw ----------------------------------------------


# --- Provider feedback and evidence ------------------------------------------------------------


# --- Maintenance, dead letters, status and retention -------------------------------------------
