"""Typed statements on `webhook_endpoints` (`sql/webhook_endpoints.sql`; docs/design.md,
"Webhook channel"). Every function runs on the caller's `Connection` and never commits."""

from __future__ import annotations

import uuid
from dataclasses import dataclass
from datetime import datetime

from sqlalchemy import Connection

from reminder_core.store._statements import query, records, run


@dataclass(frozen=True, slots=True)
class WebhookEndpointRow:
    """One registered endpoint: its URL, its `whsec_` signing secret, when (aware UTC)."""

    id: uuid.UUID
    user_id: str
    url: str
    secret: str
    created_at: datetime


def insert(
    conn: Connection, *, user_id: str, url: str, secret: str, now: datetime, max_per_user: int
) -> WebhookEndpointRow | None:
    """Register an endpoint; None when the user already has `max_per_user`
    (`webhook_endpoint_insert`)."""
    rows = records(
        WebhookEndpointRow,
        run(
            conn,
            query("webhook_endpoint_insert"),
            {
                "user_id": user_id,
                "url": url,
                "secret": secret,
                "now": now,
                "max_per_user": max_per_user,
            },
        ),
    )
    return rows[0] if rows else None


def list_for(conn: Connection, *, user_id: str) -> list[WebhookEndpointRow]:
    """The user's endpoints, oldest first (`webhook_endpoint_list_for`)."""
    return records(
        WebhookEndpointRow, run(conn, query("webhook_endpoint_list_for"), {"user_id": user_id})
    )


def get(conn: Connection, *, user_id: str, endpoint_id: uuid.UUID) -> WebhookEndpointRow | None:
    """The user's endpoint, or None (another user's is None too) (`webhook_endpoint_get`)."""
    rows = records(
        WebhookEndpointRow,
        run(conn, query("webhook_endpoint_get"), {"id": endpoint_id, "user_id": user_id}),
    )
    return rows[0] if rows else None


def delete(conn: Connection, *, user_id: str, endpoint_id: uuid.UUID) -> bool:
    """Delete the user's endpoint; False when there is none (`webhook_endpoint_delete`)."""
    found = run(
        conn, query("webhook_endpoint_delete"), {"id": endpoint_id, "user_id": user_id}
    ).first()
    return found is not None
