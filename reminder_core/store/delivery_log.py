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


@dataclass(frozen=True, slots=True)
class DeliveryRef:
    """The delivery a provider event is about; (id, run_time_utc) is the row's primary key
    (delivery_log is partitioned by run_time_utc, aware UTC). `recipient` is None when the
    row recorded none (or, for a rematched event, was not read)."""

    id: uuid.UUID
    run_time_utc: datetime
    user_id: str
    status: DeliveryStatus
    recipient: str | None


@dataclass(frozen=True, slots=True)
class EvidenceWrite:
    """What `record_evidence` found: `found` delivery rows of the occurrence (0 when it is
    not ours, or was removed by retention) and whether the evidence was `recorded`."""

    found: int
    recorded: bool


def get_by_provider_message(
    conn: Connection, *, provider: str, provider_message_id: str
) -> DeliveryRef | None:
    """The delivery row whose (provider, provider_message_id) this is (the newest should
    one ever repeat), or None (`delivery_get_by_provider_message`). No lock."""
    row = conn.execute(
        query("delivery_get_by_provider_message"),
        {"provider": provider, "provider_message_id": provider_message_id},
    ).one_or_none()
    if row is None:
        return None
    return DeliveryRef(
        id=row.id,
        run_time_utc=row.run_time_utc,
        user_id=row.user_id,
        status=DeliveryStatus(row.status),
        recipient=row.recipient,
    )


def record_feedback(
    conn: Connection,
    *,
    delivery_id: uuid.UUID,
    run_time_utc: datetime,
    status: DeliveryStatus,
    error: str,
    now: datetime,
) -> bool:
    """Set the delivery (`delivery_id`, `run_time_utc`) to `status` (`bounced` /
    `complained`) with `error`, its lease cleared, `updated_at = now` (aware UTC), if it is
    `sent`, or `sending` with the provider's evidence (`delivery_record_feedback`). Returns
    False when it was in another state and nothing changed (the first feedback wins)."""
    changed = conn.execute(
        query("delivery_record_feedback"),
        {
            "id": delivery_id,
            "run_time_utc": run_time_utc,
            "status": status.value,
            "error": error,
            "now": now,
        },
    ).first()
    return changed is not None


def suppress_replay(
    conn: Connection,
    *,
    reminder_id: uuid.UUID,
    run_time_utc: datetime,
    recipient: str,
    error: str,
    now: datetime,
) -> bool:
    """Record the unleased `sending` row of a replayed occurrence (`run_time_utc` aware
    UTC) `suppressed`, with `recipient` and `error`, `updated_at = now`
    (`delivery_suppress_replay`). Returns False when no such row was there."""
    changed = conn.execute(
        query("delivery_suppress_replay"),
        {
            "reminder_id": reminder_id,
            "run_time_utc": run_time_utc,
            "recipient": recipient,
            "error": error,
            "now": now,
        },
    ).first()
    return changed is not None


def record_evidence(
    conn: Connection,
    *,
    reminder_id: uuid.UUID,
    run_time_utc: datetime,
    provider: str,
    provider_message_id: str,
    accepted_at: datetime | None,
    recipient: str,
    now: datetime,
) -> EvidenceWrite:
    """Write the provider's evidence of a send on the occurrence's delivery row while it is
    `sending` without a message id: `provider`, `provider_message_id`, `sent_at =
    accepted_at` (aware UTC; `now` when None or outside the row's creation and `now`), the
    `recipient` if the row has none ('' for none), `updated_at = now`
    (`delivery_record_evidence`). The occurrence is matched to the second of `run_time_utc`
    (an idempotency key's precision)."""
    row = conn.execute(
        query("delivery_record_evidence"),
        {
            "reminder_id": reminder_id,
            "run_time_utc": run_time_utc,
            "provider": provider,
            "provider_message_id": provider_message_id,
            "accepted_at": accepted_at,
            "recipient": recipient,
            "now": now,
        },
    ).one()
    return EvidenceWrite(found=int(row.found), recorded=bool(row.recorded))


# --- Maintenance, dead letters, status and retention -------------------------------------------
