"""Typed statements on `reminders` (`sql/reminders.sql`): the API's CRUD, the claim, the
sender's advance, the suppression pauses and the maintenance rescues. Every function runs
on the caller's `Connection` and never commits; reminders are locked in id order."""

from __future__ import annotations

import uuid
from collections.abc import Iterable
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from sqlalchemy import Connection

from reminder_core.domain.states import ReminderStatus
from reminder_core.store._statements import query

# --- API: create, read, list, change, cancel ---------------------------------------------------


@dataclass(frozen=True, slots=True)
class ReminderRecord:
    """One row of `reminders`, every column (docs/design.md, "Data model").

    `start_local` and `exdates` are naive local wall times (all-day: dates at 00:00);
    every other instant is aware UTC. `timezone` None follows the user's profile zone;
    `rrule` None is a one-time reminder.
    """

    id: uuid.UUID
    user_id: str
    title: str
    body: str | None
    template: str
    start_local: datetime
    all_day: bool
    timezone: str | None
    rrule: str | None
    exdates: tuple[datetime, ...]
    dst_nonexistent: str
    dst_ambiguous: str
    misfire_policy: str
    max_lateness_s: int
    next_run_utc: datetime | None
    status: ReminderStatus
    version: int
    claimed_by: str | None
    claimed_at: datetime | None
    client_request_id: str | None
    request_fingerprint: str | None
    last_error: str | None
    paused_reason: str | None
    suppressed_address: str | None
    suppression_checked_at: datetime | None
    created_at: datetime
    updated_at: datetime

    @classmethod
    def of(cls, row: Any) -> ReminderRecord:
        """The record of a `SELECT *` / `RETURNING *` row of `reminders`.

        Raises:
            TypeError: the table has a column this record does not know (a migration
                added one: add the field).
        """
        values = dict(row._mapping)
        values["exdates"] = tuple(values["exdates"] or ())
        values["status"] = ReminderStatus(values["status"])
        return cls(**values)


@dataclass(frozen=True, slots=True)
class NewReminder:
    """What `insert` writes; the row starts `pending` at version 1.

    Attributes as in `ReminderRecord`; `next_run_utc` is the first occurrence (aware UTC),
    `client_request_id` the idempotency key (None: none given) and `request_fingerprint`
    the hash of the request body it was given with.
    """

    user_id: str
    title: str
    body: str | None
    start_local: datetime
    all_day: bool
    timezone: str | None
    rrule: str | None
    exdates: tuple[datetime, ...]
    dst_nonexistent: str
    dst_ambiguous: str
    misfire_policy: str
    max_lateness_s: int
    next_run_utc: datetime
    client_request_id: str | None
    request_fingerprint: str


#: Before every cursor: the first page of `list_page`.
_AFTER_EVERY_ROW = (datetime.max.replace(tzinfo=UTC), uuid.UUID(int=(1 << 128) - 1))


def _one(row: Any) -> ReminderRecord | None:
    return None if row is None else ReminderRecord.of(row)


def get(conn: Connection, *, user_id: str, reminder_id: uuid.UUID) -> ReminderRecord | None:
    """The user's reminder, or None (another user's reminder is None too) (`reminder_get`)."""
    row = conn.execute(query("reminder_get"), {"id": reminder_id, "user_id": user_id}).first()
    return _one(row)


def lock(conn: Connection, *, user_id: str, reminder_id: uuid.UUID) -> ReminderRecord | None:
    """`get`, with the row locked (`FOR UPDATE`) until the caller's transaction ends
    (`reminder_lock`)."""
    row = conn.execute(query("reminder_lock"), {"id": reminder_id, "user_id": user_id}).first()
    return _one(row)


def get_by_request_id(
    conn: Connection, *, user_id: str, client_request_id: str
) -> ReminderRecord | None:
    """The reminder this user created with this idempotency key, or None
    (`reminder_get_by_request_id`)."""
    row = conn.execute(
        query("reminder_get_by_request_id"),
        {"user_id": user_id, "client_request_id": client_request_id},
    ).first()
    return _one(row)


def insert(conn: Connection, new: NewReminder, *, now: datetime) -> ReminderRecord | None:
    """INSERT one reminder created at `now` (aware UTC); None when this user already has
    a reminder with `new.client_request_id` (`reminder_insert`; a concurrent insert with
    the same key is waited for, so the caller can then read it).

    Raises:
        sqlalchemy.exc.IntegrityError: a CHECK constraint refused a value (e.g. a title
            over 1,000 characters); the caller validates first.
    """
    params = {
        "user_id": new.user_id,
        "title": new.title,
        "body": new.body,
        "start_local": new.start_local,
        "all_day": new.all_day,
        "timezone": new.timezone,
        "rrule": new.rrule,
        "exdates": list(new.exdates),
        "dst_nonexistent": new.dst_nonexistent,
        "dst_ambiguous": new.dst_ambiguous,
        "misfire_policy": new.misfire_policy,
        "max_lateness_s": new.max_lateness_s,
        "next_run_utc": new.next_run_utc,
        "client_request_id": new.client_request_id,
        "request_fingerprint": new.request_fingerprint,
        "now": now,
    }
    return _one(conn.execute(query("reminder_insert"), params).first())


def list_page(
    conn: Connection,
    *,
    user_id: str,
    limit: int,
    before: tuple[datetime, uuid.UUID] | None,
    statuses: Iterable[ReminderStatus] | None,
) -> list[ReminderRecord]:
    """Up to `limit` of the user's reminders, newest first (created_at, id descending),
    strictly before the cursor `before` (created_at aware UTC, id) when given, with one
    of `statuses` (None or empty: any) (`reminder_list_page`)."""
    created_at, before_id = before or _AFTER_EVERY_ROW
    wanted = [s.value for s in statuses or ()] or [s.value for s in ReminderStatus]
    rows = conn.execute(
        query("reminder_list_page"),
        {
            "user_id": user_id,
            "before_created_at": created_at,
            "before_id": before_id,
            "statuses": wanted,
            "limit": limit,
        },
    )
    return [ReminderRecord.of(r) for r in rows]


def update(conn: Connection, changed: ReminderRecord, *, now: datetime) -> ReminderRecord | None:
    """Write `changed` (a record read with `lock` in this transaction, then changed with
    `dataclasses.replace`) over its row, version + 1 and updated_at = `now` (aware UTC);
    None when the row is no longer at `changed.version` (`reminder_update`). Columns
    that only the store sets (user_id, template, the idempotency key, created_at) are
    not written."""
    params = {
        "id": changed.id,
        "version": changed.version,
        "title": changed.title,
        "body": changed.body,
        "start_local": changed.start_local,
        "all_day": changed.all_day,
        "timezone": changed.timezone,
        "rrule": changed.rrule,
        "exdates": list(changed.exdates),
        "dst_nonexistent": changed.dst_nonexistent,
        "dst_ambiguous": changed.dst_ambiguous,
        "misfire_policy": changed.misfire_policy,
        "max_lateness_s": changed.max_lateness_s,
        "next_run_utc": changed.next_run_utc,
        "status": changed.status.value,
        "claimed_by": changed.claimed_by,
        "claimed_at": changed.claimed_at,
        "last_error": changed.last_error,
        "paused_reason": changed.paused_reason,
        "suppressed_address": changed.suppressed_address,
        "suppression_checked_at": changed.suppression_checked_at,
        "now": now,
    }
    return _one(conn.execute(query("reminder_update"), params).first())


def cancel(
    conn: Connection, *, user_id: str, reminder_id: uuid.UUID, now: datetime
) -> ReminderRecord | None:
    """Cancel the user's reminder if it is live (pending, claimed or paused): no next
    run, no claim, version + 1, updated_at = `now` (aware UTC). Returns the cancelled
    record, or None when it was not live or not the user's (`reminder_cancel`)."""
    row = conn.execute(
        query("reminder_cancel"), {"id": reminder_id, "user_id": user_id, "now": now}
    ).first()
    return _one(row)


# --- Coordinator and maintenance: claim, rescue, backlog ---------------------------------------


# --- Sender: read for send, lock and advance ---------------------------------------------------


# --- Suppression: pause, refuse, resume --------------------------------------------------------
