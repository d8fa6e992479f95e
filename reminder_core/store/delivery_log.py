"""Typed statements on `delivery_log` (`sql/delivery_log.sql`): one row per occurrence,
its lease and its outcome (docs/design.md, "Delivery states"). Every function runs on the
caller's `Connection` and never commits."""

from __future__ import annotations

import uuid
from datetime import datetime

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


# --- Sender: begin, complete, heartbeat, withdraw ----------------------------------------------


# --- Provider feedback and evidence ------------------------------------------------------------


# --- Maintenance, dead letters, status and retention -------------------------------------------
