"""Typed statements on `webhook_events` (`sql/webhook_events.sql`): verified provider
events, stored once. Every function runs on the caller's `Connection` and never commits."""

from __future__ import annotations

import uuid
from dataclasses import dataclass
from datetime import datetime

from sqlalchemy import Connection

from reminder_core.domain.states import DeliveryStatus
from reminder_core.domain.suppression import ApplyOutcome, FeedbackKind
from reminder_core.store._statements import query, records, run

# --- Webhooks and the rematcher ----------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class RematchableEvent:
    """A stored `unmatched` event whose provider message id now has a delivery row, and
    that row (the newest of that message id): `delivery_id` and `delivery_run_time_utc`
    (aware UTC) its key, `user_id` its user, `delivery_status` its state."""

    id: uuid.UUID
    provider: str
    event_id: str
    kind: FeedbackKind
    recipient: str
    reason: str
    delivery_id: uuid.UUID
    delivery_run_time_utc: datetime
    user_id: str
    delivery_status: DeliveryStatus


def insert(
    conn: Connection,
    *,
    provider: str,
    event_id: str,
    kind: FeedbackKind,
    provider_message_id: str | None,
    recipient: str,
    reason: str,
    occurred_at: datetime | None,
    raw_body: str,
    outcome: ApplyOutcome,
    delivery_id: uuid.UUID | None,
    applied_at: datetime | None,
    now: datetime,
) -> uuid.UUID | None:
    """Store a verified event once, `received_at = now` (aware UTC; `occurred_at` and
    `applied_at` too, None when unknown / not applied) (`webhook_event_insert`). Texts
    must hold no U+0000 nor lone surrogates (`reminder_core.text.storable`). Returns the new
    row's id, or None when (provider, event_id) was stored before (a replay: nothing
    written)."""
    row_id: uuid.UUID | None = run(
        conn,
        query("webhook_event_insert"),
        {
            "provider": provider,
            "event_id": event_id,
            "kind": kind.value,
            "provider_message_id": provider_message_id,
            "recipient": recipient,
            "reason": reason,
            "occurred_at": occurred_at,
            "now": now,
            "raw_body": raw_body,
            "outcome": outcome.value,
            "delivery_id": delivery_id,
            "applied_at": applied_at,
        },
    ).scalar_one_or_none()
    return row_id


def lock_rematchable(conn: Connection, *, since: datetime, limit: int) -> list[RematchableEvent]:
    """Up to `limit` `unmatched` events received at or after `since` (aware UTC) whose
    message now has a delivery row, oldest first, row-locked `FOR UPDATE SKIP LOCKED`
    until the caller's transaction ends (`webhook_event_lock_rematchable`)."""
    rows = run(conn, query("webhook_event_lock_rematchable"), {"since": since, "limit": limit})
    return records(RematchableEvent, rows, kind=FeedbackKind, delivery_status=DeliveryStatus)


def mark_matched(
    conn: Connection,
    *,
    event_row_id: uuid.UUID,
    outcome: ApplyOutcome,
    delivery_id: uuid.UUID,
    now: datetime,
) -> None:
    """Record the `unmatched` event `event_row_id` (`webhook_events.id`) applied to
    `delivery_id` with `outcome`, `applied_at = now` (aware UTC); an event no longer
    `unmatched` is left as it is (`webhook_event_mark_matched`)."""
    run(
        conn,
        query("webhook_event_mark_matched"),
        {"id": event_row_id, "outcome": outcome.value, "delivery_id": delivery_id, "now": now},
    )


# --- Retention ---------------------------------------------------------------------------------


def delete_expired(conn: Connection, *, cutoff: datetime, limit: int) -> int:
    """Delete up to `limit` events received before `cutoff` (aware UTC)
    (`webhook_event_delete_expired`). Returns how many were deleted."""
    result = run(conn, query("webhook_event_delete_expired"), {"cutoff": cutoff, "limit": limit})
    return int(result.rowcount)
