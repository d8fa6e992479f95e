"""Typed statements on `calendar_feeds` (`sql/calendar_feeds.sql`; docs/api.md, "Calendar
feed and import"). Every function runs on the caller's `Connection` and never commits."""

from __future__ import annotations

import hashlib
import hmac
import secrets
from dataclasses import dataclass
from datetime import datetime

from sqlalchemy import Connection

from reminder_core.store._statements import query, records, run

#: Bytes of randomness in a feed secret (256 bits; RFC 4086 §8's bar is far below).
SECRET_BYTES = 32


@dataclass(frozen=True, slots=True)
class FeedRow:
    """The feed found for a secret: its owner and the stored digest."""

    user_id: str
    secret_sha256: bytes


def digest(secret: str) -> bytes:
    """SHA-256 of a feed secret (UTF-8): 32 bytes, what the table stores."""
    return hashlib.sha256(secret.encode("utf-8", "surrogatepass")).digest()


def new_secret() -> str:
    """A fresh feed secret: URL-safe base64 text of SECRET_BYTES random bytes."""
    return secrets.token_urlsafe(SECRET_BYTES)


def upsert(conn: Connection, *, user_id: str, secret: str, now: datetime) -> datetime:
    """Store `secret`'s digest as the user's feed, replacing any earlier one (a
    rotation: the old secret is refused from this commit on); returns the feed's
    `created_at` (aware UTC, `now`) (`calendar_feed_upsert`)."""
    row = run(
        conn,
        query("calendar_feed_upsert"),
        {"user_id": user_id, "secret_sha256": digest(secret), "now": now},
    ).one()
    created_at: datetime = row.created_at
    return created_at


def delete(conn: Connection, *, user_id: str) -> bool:
    """Revoke the user's feed; True if there was one (`calendar_feed_delete`)."""
    return bool(run(conn, query("calendar_feed_delete"), {"user_id": user_id}).rowcount)


def find(conn: Connection, *, secret: str) -> str | None:
    """The user whose feed has this secret, None for an unknown or revoked one
    (`calendar_feed_find`).

    The lookup is by the secret's SHA-256 (an index probe on the digest tells nothing
    about the secret, whose preimage the caller chose); the digest found is compared
    again in constant time (`hmac.compare_digest`)."""
    wanted = digest(secret)
    rows = records(FeedRow, run(conn, query("calendar_feed_find"), {"secret_sha256": wanted}))
    for row in rows:
        if hmac.compare_digest(bytes(row.secret_sha256), wanted):
            return row.user_id
    return None
