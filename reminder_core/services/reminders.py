"""The state changes of a reminder (docs/design.md, "State machines"): the user's create,
update, pause, resume and cancel, written through `reminder_core.store.reminders`.

Every function runs on the caller's `Connection` and never commits; a function that
takes a `locked` record expects it read with `lock` in the same transaction. Errors are
the domain errors of `reminder_core.errors` (the API answers them as problem+json).
"""

from __future__ import annotations

import dataclasses
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime
from zoneinfo import ZoneInfo

from sqlalchemy import Connection

from reminder_core.domain.recurrence import next_occurrence
from reminder_core.domain.states import CANCELLABLE, ReminderStatus
from reminder_core.errors import Conflict, NotFound
from reminder_core.scheduling import (
    ScheduleConfig,
    StoredSchedule,
    first_run,
    schedule_of,
    stored_of,
)
from reminder_core.store import reminders as store
from reminder_core.store.reminders import NewReminder, ReminderRecord

#: The states in which a reminder will still send: its next occurrence is kept.
LIVE = CANCELLABLE


@dataclass(frozen=True, slots=True)
class ReminderContent:
    """What a user writes of a reminder, validated by the caller except for its rule.

    Attributes:
        schedule: the stored schedule columns (parsed; the rule is compiled here).
        timezone: the reminder's fixed IANA zone, None to follow the user's profile.
        misfire_policy: "latest", "skip" or "all"; max_lateness_s: seconds.
    """

    title: str
    body: str | None
    schedule: StoredSchedule
    timezone: str | None
    misfire_policy: str
    max_lateness_s: int


@dataclass(frozen=True, slots=True)
class ReminderDraft:
    """A reminder to create: its content, its owner, and its idempotency key
    (`client_request_id`, None when none was given) with the hash of the request body
    it came with (same key + other body → Conflict)."""

    user_id: str
    content: ReminderContent
    client_request_id: str | None
    request_fingerprint: str


@dataclass(frozen=True, slots=True)
class ReminderEdit:
    """The content a reminder should have after a change (the caller merged the request
    with the locked record); `schedule_changed` says whether the schedule or the zone
    were given, so that next_run_utc is computed again."""

    content: ReminderContent
    schedule_changed: bool


@dataclass(frozen=True, slots=True)
class Created:
    """The reminder a create answered with; `replayed` is True when it was created
    earlier with the same idempotency key and body (nothing was written now)."""

    reminder: ReminderRecord
    replayed: bool


def find_replay(
    conn: Connection, *, user_id: str, client_request_id: str, request_fingerprint: str
) -> ReminderRecord | None:
    """The reminder created earlier with this idempotency key, if any.

    Raises:
        Conflict: the key was used with another request body.
    """
    existing = store.get_by_request_id(conn, user_id=user_id, client_request_id=client_request_id)
    if existing is not None and existing.request_fingerprint != request_fingerprint:
        raise Conflict("this idempotency key was already used with a different request body")
    return existing


def create(
    conn: Connection, draft: ReminderDraft, *, zone: ZoneInfo, now: datetime, config: ScheduleConfig
) -> Created:
    """Create a reminder: `pending` at its first occurrence at or after `now` (aware
    UTC) in `zone` (docs/design.md, "next_run_utc"). Idempotent on
    `draft.client_request_id`: a concurrent create with the same key is waited for and
    answered as a replay.

    Side effects: one INSERT in the caller's transaction.

    Raises:
        InvalidSchedule: the rule cannot be accepted, or the reminder has no occurrence
            at or after now (naming the field).
        Conflict: the idempotency key was used with another request body.
    """
    content = draft.content
    compiled = schedule_of(content.schedule, config)
    next_run = first_run(compiled, zone, now, config)
    new = NewReminder(
        user_id=draft.user_id,
        title=content.title,
        body=content.body,
        start_local=content.schedule.start_local,
        all_day=content.schedule.all_day,
        timezone=content.timezone,
        rrule=compiled.rule.text if compiled.rule is not None else None,
        exdates=content.schedule.exdates,
        dst_nonexistent=content.schedule.nonexistent,
        dst_ambiguous=content.schedule.ambiguous,
        misfire_policy=content.misfire_policy,
        max_lateness_s=content.max_lateness_s,
        next_run_utc=next_run,
        client_request_id=draft.client_request_id,
        request_fingerprint=draft.request_fingerprint,
    )
    created = store.insert(conn, new, now=now)
    if created is not None:
        return Created(created, replayed=False)
    # A concurrent request with the same key won the race (the insert waited for it).
    existing = find_replay(
        conn,
        user_id=draft.user_id,
        client_request_id=draft.client_request_id or "",
        request_fingerprint=draft.request_fingerprint,
    )
    if existing is None:  # pragma: no cover - the conflict implies the row exists
        raise Conflict("idempotency key in use; retry")
    return Created(existing, replayed=True)


def lock(conn: Connection, *, user_id: str, reminder_id: uuid.UUID) -> ReminderRecord:
    """The user's reminder, row-locked until the caller's transaction ends.

    Raises:
        NotFound: no such reminder for this user.
    """
    found = store.lock(conn, user_id=user_id, reminder_id=reminder_id)
    if found is None:
        raise NotFound(f"reminder {reminder_id} not found")
    return found


def update(
    conn: Connection,
    locked: ReminderRecord,
    edit: ReminderEdit,
    *,
    zone: Callable[[str | None], ZoneInfo],
    now: datetime,
    config: ScheduleConfig,
) -> ReminderRecord:
    """Change title, body, schedule or policies; version + 1. A schedule change
    recomputes next_run_utc from `now` (aware UTC) in `zone(timezone)` and, unless
    the reminder is paused, makes it `pending` again: an occurrence claimed but not yet
    sent is then recorded `cancelled` by the sender (docs/design.md, "A cancel or change
    wins"). A finished (completed or failed) reminder given a schedule with occurrences
    left is live again.

    Raises:
        Conflict: the reminder is cancelled.
        InvalidSchedule: the new schedule cannot be accepted or has no occurrence left.
    """
    if locked.status == ReminderStatus.CANCELLED:
        raise Conflict("reminder is cancelled; create a new one")
    content = edit.content
    changed = dataclasses.replace(
        locked,
        title=content.title,
        body=content.body,
        misfire_policy=content.misfire_policy,
        max_lateness_s=content.max_lateness_s,
    )
    if edit.schedule_changed:
        in_zone = zone(content.timezone)
        compiled = schedule_of(content.schedule, config)
        changed = dataclasses.replace(
            changed,
            start_local=content.schedule.start_local,
            all_day=content.schedule.all_day,
            rrule=compiled.rule.text if compiled.rule is not None else None,
            exdates=content.schedule.exdates,
            dst_nonexistent=content.schedule.nonexistent,
            dst_ambiguous=content.schedule.ambiguous,
            timezone=content.timezone,
            next_run_utc=first_run(compiled, in_zone, now, config),
        )
        if locked.status != ReminderStatus.PAUSED:
            changed = dataclasses.replace(
                changed,
                status=ReminderStatus.PENDING,
                claimed_by=None,
                claimed_at=None,
                last_error=None,
            )
    return _write(conn, changed, now)


def pause(conn: Connection, locked: ReminderRecord, *, now: datetime) -> ReminderRecord:
    """Stop sending until resumed (pending or claimed → paused; an occurrence claimed
    but not sent is not sent). A reminder paused by a suppression becomes the user's
    pause: it no longer resumes by itself when the address changes. Pausing a reminder
    the user paused changes nothing.

    Raises:
        Conflict: the reminder is completed, failed or cancelled.
    """
    if locked.status in (ReminderStatus.PENDING, ReminderStatus.CLAIMED) or (
        locked.status == ReminderStatus.PAUSED and locked.suppressed_address is not None
    ):
        paused = dataclasses.replace(
            locked, status=ReminderStatus.PAUSED, claimed_by=None, claimed_at=None
        )
        return _write(conn, _without_suppression(paused), now)
    if locked.status != ReminderStatus.PAUSED:
        raise Conflict(f"reminder is {locked.status}; only live reminders can be paused")
    return locked


def resume(
    conn: Connection,
    locked: ReminderRecord,
    *,
    zone: Callable[[str | None], ZoneInfo],
    now: datetime,
    config: ScheduleConfig,
) -> ReminderRecord:
    """Send again (paused → pending). A recurring reminder continues with its first
    occurrence at or after `now` (aware UTC) in `zone(timezone)` (occurrences during the
    pause are not sent; none left → completed); a one-time reminder whose time passed
    while paused is sent now, subject to its misfire policy. A reminder paused by a
    suppression resumes too. A reminder already pending or claimed is returned as it is.

    Raises:
        Conflict: the reminder is completed, failed or cancelled.
        InvalidSchedule: ("timezone") no zone is known for a recurring reminder.
    """
    if locked.status in (ReminderStatus.PENDING, ReminderStatus.CLAIMED):
        return locked
    if locked.status != ReminderStatus.PAUSED:
        raise Conflict(f"reminder is {locked.status}; only paused reminders can be resumed")
    resumed = dataclasses.replace(locked, status=ReminderStatus.PENDING)
    if locked.rrule is not None:
        in_zone = zone(locked.timezone)
        found = next_occurrence(
            schedule_of(stored_of(locked), config),
            in_zone,
            now,
            inclusive=True,
            limits=config.limits,
        )
        resumed = dataclasses.replace(
            resumed,
            next_run_utc=found,
            status=ReminderStatus.PENDING if found else ReminderStatus.COMPLETED,
        )
    return _write(conn, _without_suppression(resumed), now)


def cancel(
    conn: Connection, *, user_id: str, reminder_id: uuid.UUID, now: datetime
) -> ReminderRecord:
    """Cancel the reminder (pending, claimed or paused → cancelled): nothing more is
    sent; an occurrence claimed but not yet sent is recorded `cancelled` by the sender.
    Cancelling a cancelled reminder returns it unchanged.

    Raises:
        NotFound: no such reminder for this user.
        Conflict: the reminder is completed or failed.
    """
    cancelled = store.cancel(conn, user_id=user_id, reminder_id=reminder_id, now=now)
    if cancelled is not None:
        return cancelled
    current = store.get(conn, user_id=user_id, reminder_id=reminder_id)
    if current is None:
        raise NotFound(f"reminder {reminder_id} not found")
    if current.status != ReminderStatus.CANCELLED:
        raise Conflict(f"reminder is {current.status}; only live reminders can be cancelled")
    return current


def _without_suppression(record: ReminderRecord) -> ReminderRecord:
    return dataclasses.replace(
        record, paused_reason=None, suppressed_address=None, suppression_checked_at=None
    )


def _write(conn: Connection, changed: ReminderRecord, now: datetime) -> ReminderRecord:
    written = store.update(conn, changed, now=now)
    if written is None:  # pragma: no cover - the row is locked at this version
        raise Conflict("the reminder changed meanwhile; re-read it and try again")
    return written
