"""Typed statements on `suppressions`, the suppression list (`sql/suppressions.sql`;
docs/design.md, "Suppression list"). Addresses are case-folded by the caller
(`reminder_core.domain.suppression.normalize_address`). Every function runs on the
caller's `Connection` and never commits."""

from __future__ import annotations

import json
from collections.abc import Iterable
from dataclasses import dataclass
from datetime import datetime

from sqlalchemy import Connection

from reminder_core.domain.suppression import SuppressionReason
from reminder_core.store._statements import query, records, run


@dataclass(frozen=True, slots=True)
class SuppressionEntry:
    """One row of the suppression list, with the reminders it holds paused.

    Attributes:
        email: the case-folded address.
        reason: why it was listed.
        provider, source_event_id, detail: the provider, its event id and its own words
            (None for an entry added by hand).
        created_at: aware UTC.
        paused: how many reminders are `paused` with this `suppressed_address`.
    """

    email: str
    reason: SuppressionReason
    provider: str | None
    source_event_id: str | None
    detail: str | None
    created_at: datetime
    paused: int


def add(
    conn: Connection,
    *,
    email: str,
    reason: SuppressionReason,
    provider: str,
    source_event_id: str,
    detail: str,
    now: datetime,
) -> bool:
    """Put the case-folded `email` on the list, `created_at = now` (aware UTC)
    (`suppression_add`). Returns False when it was listed already: the existing entry and
    its reason stay."""
    added = run(
        conn,
        query("suppression_add"),
        {
            "email": email,
            "reason": reason.value,
            "provider": provider,
            "source_event_id": source_event_id,
            "detail": detail,
            "now": now,
        },
    ).first()
    return added is not None


def list_among(
    conn: Connection, emails: Iterable[str], *, autocommit: bool = False
) -> dict[str, SuppressionReason]:
    """{address: reason} for those of the case-folded `emails` that are on the list, in
    one statement (`suppression_list_among`); {} without a statement for no emails. With
    `autocommit` (`conn` outside a transaction), as a statement of its own."""
    wanted = sorted(set(emails))
    if not wanted:
        return {}
    rows = run(
        conn,
        query("suppression_list_among"),
        {"emails": json.dumps(wanted)},
        autocommit=autocommit,
    )
    return {r.email: SuppressionReason(r.reason) for r in rows}


def list_newest(conn: Connection, *, limit: int) -> list[SuppressionEntry]:
    """Up to `limit` entries, newest first (then by address), each with its count of
    paused reminders (`suppression_list_newest`)."""
    return records(
        SuppressionEntry,
        run(conn, query("suppression_list_newest"), {"limit": limit}),
        reason=SuppressionReason,
    )


def remove(conn: Connection, *, email: str) -> bool:
    """Delete the entry of the case-folded `email` (`suppression_remove`); False when there
    was none. The reminders it paused stay paused (the caller resumes them)."""
    removed = run(conn, query("suppression_remove"), {"email": email}).first()
    return removed is not None
