"""Typed statements on `reminders` (`sql/reminders.sql`): the API's CRUD, the claim, the
sender's advance, the suppression pauses and the maintenance rescues. Every function runs
on the caller's `Connection` and never commits; reminders are locked in id order."""

from __future__ import annotations

import dataclasses
import json
import uuid
from collections.abc import Collection, Iterable, Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime

import orjson
from sqlalchemy import Connection

from reminder_core.domain.localtime import Ambiguous, Nonexistent
from reminder_core.domain.misfire import MisfirePolicy
from reminder_core.domain.recurrence import CountProgress
from reminder_core.domain.states import ReminderStatus
from reminder_core.domain.suppression import SuppressionReason
from reminder_core.record import record
from reminder_core.store._statements import Rows, id_array, json_rows, query, records, run
from reminder_core.store.outbox import OutboxRow
from reminder_core.store.rate_limits import RateTake, Taken

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
    count_progress: CountProgress | None
    held_until: datetime | None = None  # quiet hours held the claim until then
    snoozed_from: uuid.UUID | None = None  # made by a snooze link of that reminder
    webhook_endpoint_id: uuid.UUID | None = None  # the webhook channel (None: email)


@dataclass(frozen=True, slots=True)
class NewReminder:
    """What `insert` writes; the row starts `pending` at version 1.

    Attributes as in `ReminderRecord`; `next_run_utc` is the first occurrence (aware UTC),
    `client_request_id` the idempotency key (None: none given) and `request_fingerprint`
    the hash of the request body it was given with (None without a key: nothing to
    compare a retry with).
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
    request_fingerprint: str | None
    snoozed_from: uuid.UUID | None = None  # made by a snooze link of that reminder
    webhook_endpoint_id: uuid.UUID | None = None  # the webhook channel (None: email)


#: Before every cursor: the first page of `list_page`.
_AFTER_EVERY_ROW = (datetime.max.replace(tzinfo=UTC), uuid.UUID(int=(1 << 128) - 1))


def _reminders(result: Rows) -> list[ReminderRecord]:
    """The records of a `SELECT *` / `RETURNING *` result of `reminders` (a column a
    migration added without its field fails loudly: see `records`)."""
    return records(
        ReminderRecord,
        result,
        exdates=tuple,
        status=ReminderStatus,
        count_progress=CountProgress.from_json,
    )


def _binds(record: NewReminder | ReminderRecord, **extra: object) -> dict[str, object]:
    """Bind parameters named as the fields of `record` (`exdates` as a list, which
    psycopg sends as an array), and `extra`; a statement reads those it names."""
    binds = {f.name: getattr(record, f.name) for f in dataclasses.fields(record)}
    binds["exdates"] = list(record.exdates)
    if isinstance(record, ReminderRecord):
        binds["count_progress"] = _progress_json(record.count_progress)
    binds.update(extra)
    return binds


def _progress_json(progress: CountProgress | None) -> str | None:
    """`count_progress` as JSON text for `CAST(:count_progress AS jsonb)`."""
    return orjson.dumps(progress.to_json()).decode() if progress is not None else None


def _one(result: Rows) -> ReminderRecord | None:
    found = _reminders(result)
    return found[0] if found else None


def get(conn: Connection, *, user_id: str, reminder_id: uuid.UUID) -> ReminderRecord | None:
    """The user's reminder, or None (another user's reminder is None too) (`reminder_get`)."""
    return _one(run(conn, query("reminder_get"), {"id": reminder_id, "user_id": user_id}))


def lock(conn: Connection, *, user_id: str, reminder_id: uuid.UUID) -> ReminderRecord | None:
    """`get`, with the row locked (`FOR UPDATE`) until the caller's transaction ends
    (`reminder_lock`)."""
    return _one(run(conn, query("reminder_lock"), {"id": reminder_id, "user_id": user_id}))


def get_by_request_id(
    conn: Connection, *, user_id: str, client_request_id: str, autocommit: bool = False
) -> ReminderRecord | None:
    """The reminder this user created with this idempotency key, or None
    (`reminder_get_by_request_id`); with `autocommit`, outside any transaction (`conn`
    must have none: no BEGIN, no COMMIT)."""
    return _one(
        run(
            conn,
            query("reminder_get_by_request_id"),
            {"user_id": user_id, "client_request_id": client_request_id},
            autocommit=autocommit,
        )
    )


def lock_owner(conn: Connection, *, user_id: str) -> None:
    """Take `user_id`'s quota lock until the caller's transaction ends: one user's
    count-then-insert of webhook endpoints runs one at a time (`reminder_lock_owner`)."""
    run(conn, query("reminder_lock_owner"), {"user_id": user_id})


def count_live(conn: Connection, *, user_id: str) -> int:
    """How many of `user_id`'s reminders are pending, claimed or paused: the exact count
    `reminder_core.quotas` takes when the bound passes the quota (`reminder_count_live`)."""
    return int(run(conn, query("reminder_count_live"), {"user_id": user_id}).scalar_one())


def insert(conn: Connection, new: NewReminder, *, now: datetime) -> ReminderRecord | None:
    """INSERT one reminder created at `now` (aware UTC); None when this user already has
    a reminder with `new.client_request_id` (`reminder_insert`; a concurrent insert with
    the same key is waited for, so the caller can then read it).

    Raises:
        sqlalchemy.exc.IntegrityError: a CHECK constraint refused a value (e.g. a title
            over 1,000 characters); the caller validates first.
    """
    params = _binds(new, now=now)
    return _notify_if_due_soon(conn, _one(run(conn, query("reminder_insert"), params)), now)


@dataclass(frozen=True, slots=True)
class BoundedInsert:
    """The outcome of `insert_within_bound`: `live_bound` the user's raised live-reminder
    bound (None: they have none yet or it is at the cap; nothing was raised or written);
    `created` the new reminder, None when nothing was inserted."""

    live_bound: int | None
    created: ReminderRecord | None
    #: The outcome of the rate-limit take run in the same statement; None when none was.
    taken: Taken | None = None


def insert_within_bound(
    conn: Connection, new: NewReminder, *, now: datetime, cap: int, autocommit: bool = False
) -> BoundedInsert:
    """When `new.user_id`'s live-reminder bound is below `cap` (or `cap` <= 0: no quota),
    raise it by one and INSERT the reminder created at `now` (aware UTC), in one statement
    (`reminder_insert_within_bound`): a create's quota check and insert in one round trip
    (issue 15). Nothing is written when the user has no bound row or it is at `cap`
    (`live_bound` None); the bound is raised and nothing inserted when the user already
    has a reminder with `new.client_request_id` (`insert`'s idempotency: `live_bound`
    set, `created` None).

    With `autocommit` (`conn` outside a transaction) the statement is a transaction of
    its own, committed as it runs: the bound's raise and the reminder together, or
    neither (issue 15: no BEGIN and COMMIT round trips).

    Side effects: the raised bound's row stays locked until the caller's transaction ends
    (reminder_core.quotas.check_one_more_live), or, with `autocommit`, is committed at
    once with the reminder; a reminder written pending and due within DUE_SOON_S wakes
    the coordinators when the caller next commits.

    Raises:
        sqlalchemy.exc.IntegrityError: a CHECK constraint refused a value.
    """
    result = run(
        conn,
        query("reminder_insert_within_bound"),
        _binds(new, now=now, cap=cap),
        autocommit=autocommit,
    )
    return _bounded(conn, result, now, taken=None)


def take_and_insert_within_bound(
    conn: Connection, new: NewReminder, *, now: datetime, cap: int, take: RateTake
) -> BoundedInsert:
    """`insert_within_bound` in autocommit (`conn` outside a transaction), after taking
    one request from `new.user_id`'s rate budget at `take.clock()`, read just before the
    statement is sent (`rate_limits.take`'s rule), in
    one statement (`reminder_take_and_insert_within_bound`; issue 15: a create's take,
    quota check and insert in one round trip). The bound is raised and the reminder
    inserted only when the take was taken; `taken` is its outcome (refused: nothing was
    written, `live_bound` and `created` None). `take.record` is not called here.

    Side effects: as `insert_within_bound` with `autocommit`, and the user's rate row
    moved on when taken, committed with them.

    Raises:
        sqlalchemy.exc.IntegrityError: a CHECK constraint refused a value.
    """
    params = _binds(new, now=now, cap=cap)
    params.update(emission_s=take.emission_s, tolerance_s=take.tolerance_s)
    params["take_now"] = take.clock()
    result = run(conn, query("reminder_take_and_insert_within_bound"), params, autocommit=True)
    tats, result = result.split_first()
    takens, result = result.split_first()
    # No row: refused against a concurrent first request's row (as rate_limits.take).
    taken = Taken(tat=tats[0], taken=bool(takens[0])) if tats else Taken(None, taken=False)
    return _bounded(conn, result, now, taken=taken)


def _bounded(
    conn: Connection, result: Rows, now: datetime, *, taken: Taken | None
) -> BoundedInsert:
    """The BoundedInsert of a result whose first column is the raised bound (NULL or no
    row: none) and whose others are the inserted reminder's (all NULL: none)."""
    bounds, rows = result.split_first()
    if not bounds or bounds[0] is None:
        return BoundedInsert(live_bound=None, created=None, taken=taken)
    first = rows.first()
    created = _one(rows) if first is not None and first.id is not None else None
    return BoundedInsert(
        live_bound=int(bounds[0]), created=_notify_if_due_soon(conn, created, now), taken=taken
    )


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
    rows = run(
        conn,
        query("reminder_list_page"),
        {
            "user_id": user_id,
            "before_created_at": created_at,
            "before_id": before_id,
            "statuses": wanted,
            "limit": limit,
        },
    )
    return _reminders(rows)


def update(conn: Connection, changed: ReminderRecord, *, now: datetime) -> ReminderRecord | None:
    """Write `changed` (a record read with `lock` in this transaction, then changed with
    `dataclasses.replace`) over its row, version + 1 and updated_at = `now` (aware UTC);
    None when the row is no longer at `changed.version` (`reminder_update`). Columns
    that only the store sets (user_id, template, the idempotency key, created_at) are
    not written."""
    params = _binds(changed, status=changed.status.value, now=now)
    return _notify_if_due_soon(conn, _one(run(conn, query("reminder_update"), params)), now)


#: LISTEN/NOTIFY channel that wakes the coordinators (Coordinator.wait_for_work).
DUE_CHANNEL = "reminders_due"
#: A reminder written due within this many seconds wakes the coordinators at commit; one
#: due later is claimed in time by their regular ticks (LOOKAHEAD_S ahead, at least once
#: per COORDINATOR_POLL_INTERVAL_S).
DUE_SOON_S = 10.0


def _notify_if_due_soon(
    conn: Connection, written: ReminderRecord | None, now: datetime
) -> ReminderRecord | None:
    if (
        written is not None
        and written.status == ReminderStatus.PENDING
        and written.next_run_utc is not None
        and (written.next_run_utc - now).total_seconds() <= DUE_SOON_S
    ):
        due_notify(conn)
    return written


def due_notify(conn: Connection) -> None:
    """Wake the coordinators when this transaction commits (`reminder_due_notify`;
    PostgreSQL NOTIFY on DUE_CHANNEL). `insert` and `update` call it for a reminder they
    write pending and due within DUE_SOON_S."""
    run(conn, query("reminder_due_notify"), {"channel": DUE_CHANNEL})


def next_due(conn: Connection) -> datetime | None:
    """When the next pending reminder is due (aware UTC), None when none is pending
    (`reminder_next_due`)."""
    value: datetime | None = run(conn, query("reminder_next_due")).scalar_one()
    return value


def cancel(
    conn: Connection, *, user_id: str, reminder_id: uuid.UUID, now: datetime
) -> ReminderRecord | None:
    """Cancel the user's reminder if it is live (pending, claimed or paused): no next
    run, no claim, version + 1, updated_at = `now` (aware UTC). Returns the cancelled
    record, or None when it was not live or not the user's (`reminder_cancel`)."""
    return _one(
        run(conn, query("reminder_cancel"), {"id": reminder_id, "user_id": user_id, "now": now})
    )


def cancel_snoozes(
    conn: Connection, *, user_id: str, snoozed_from: uuid.UUID, now: datetime
) -> list[ReminderRecord]:
    """Cancel the user's live reminders made by a snooze link of `snoozed_from`, as
    `cancel` does; updated_at = `now` (aware UTC). Returns the records cancelled (none
    when no snooze was live) (`reminder_cancel_snoozes`)."""
    return _reminders(
        run(
            conn,
            query("reminder_cancel_snoozes"),
            {"snoozed_from": snoozed_from, "user_id": user_id, "now": now},
        )
    )


# --- Coordinator and maintenance: claim, rescue, backlog ---------------------------------------


def claim_due(
    conn: Connection, *, horizon: datetime, now: datetime, limit: int, worker: str
) -> list[OutboxRow]:
    """Claim up to `limit` `pending` reminders due by `horizon` (aware UTC), earliest
    first, and insert one outbox row per claimed occurrence, in one statement
    (`reminder_claim_due`).

    Side effects: the reminders become `claimed` by `worker` at `now` (aware UTC);
    reminders another transaction has locked are skipped (`FOR UPDATE SKIP LOCKED`).
    Returns the outbox rows written (payload: reminder_id, run_time_utc, version,
    user_id), in no particular order.
    """
    rows = run(
        conn,
        query("reminder_claim_due"),
        {"horizon": horizon, "now": now, "limit": limit, "worker": worker},
    )
    return records(OutboxRow, rows, payload=dict)


def claim_due_to_queue(
    conn: Connection, *, horizon: datetime, now: datetime, limit: int, worker: str, queue: str
) -> int:
    """`claim_due` for the PostgreSQL queue in this database: the claimed occurrences go
    straight into `queue_messages` as messages of `queue`, each visible at its due time
    (`now`, aware UTC, when already due), in the claim's own statement
    (`reminder_claim_due_to_queue`); no outbox row is written. The body is the outbox
    payload's. Returns how many reminders were claimed (= messages written).
    """
    return int(
        run(
            conn,
            query("reminder_claim_due_to_queue"),
            {"horizon": horizon, "now": now, "limit": limit, "worker": worker, "queue": queue},
        ).scalar_one()
    )


@dataclass(frozen=True, slots=True)
class RescuedClaim:
    """A reminder put back to `pending` by `rescue_claimed`, at the same occurrence
    (`next_run_utc`, aware UTC)."""

    id: uuid.UUID
    next_run_utc: datetime


def rescue_claimed(
    conn: Connection,
    *,
    cutoff: datetime,
    now: datetime,
    limit: int,
    live_queue: str | None = None,
) -> list[RescuedClaim]:
    """Put up to `limit` reminders claimed before `cutoff` (aware UTC), oldest claim first,
    back to `pending` with the same `next_run_utc` (`reminder_rescue_claimed`); with
    `live_queue` (a PostgreSQL queue's name) not those with a live message in that queue.

    Side effects: their claim is cleared and `updated_at` set to `now`; reminders another
    transaction has locked are skipped.
    """
    rows = run(
        conn,
        query("reminder_rescue_claimed"),
        {"cutoff": cutoff, "now": now, "limit": limit, "queue": live_queue},
    )
    return records(RescuedClaim, rows)


def get_timezone(conn: Connection, *, reminder_id: uuid.UUID) -> str | None:
    """The reminder's IANA time zone; None when it follows its user's profile or when no
    reminder has that id (`reminder_get_timezone`)."""
    return run(
        conn, query("reminder_get_timezone"), {"reminder_id": reminder_id}
    ).scalar_one_or_none()


@dataclass(frozen=True, slots=True)
class BacklogReading:
    """What `backlog` read at one instant (aware UTC instants; None when there is none).

    Attributes:
        oldest_due: the oldest `next_run_utc` of a due occurrence not yet delivered
            (reminder `pending`, or `claimed` and on its way).
        oldest_pending: the same among `pending` reminders (not yet claimed).
        due_backlog: how many `pending` reminders are due.
        outbox_unpublished: outbox rows not yet published.
        outbox_oldest_unpublished: `created_at` of the oldest of them.
    """

    oldest_due: datetime | None
    oldest_pending: datetime | None
    due_backlog: int
    outbox_unpublished: int
    outbox_oldest_unpublished: datetime | None


def backlog(conn: Connection, *, now: datetime) -> BacklogReading:
    """Read the scheduler's backlog as of `now` (aware UTC): due reminders and the outbox,
    in one read-only statement (`reminder_backlog`)."""
    row = run(conn, query("reminder_backlog"), {"now": now}).one()
    return BacklogReading(
        oldest_due=row.oldest_due,
        oldest_pending=row.oldest_pending,
        due_backlog=int(row.due_backlog),
        outbox_unpublished=int(row.outbox_unpublished),
        outbox_oldest_unpublished=row.outbox_oldest_unpublished,
    )


# --- Sender: read for send, lock and advance ---------------------------------------------------


@record
class ReminderForSend:
    """A reminder as the sender's begin stage reads it (`get_many_for_send`): what it
    decides on (status, next_run_utc, misfire policy, suppression pause), renders
    (title, body, template) and computes occurrences from (the schedule columns, as
    `reminder_core.scheduling.stored_of` reads them). Attributes are the columns:
    `start_local` and `exdates` are naive local wall-clock times, `next_run_utc` aware
    UTC, `timezone` None follows the profile's zone, `rrule` None is a one-time reminder."""

    id: uuid.UUID
    user_id: str
    title: str
    body: str | None
    template: str
    timezone: str | None
    rrule: str | None
    status: ReminderStatus
    next_run_utc: datetime | None
    start_local: datetime
    all_day: bool
    exdates: Sequence[datetime]
    dst_nonexistent: Nonexistent
    dst_ambiguous: Ambiguous
    misfire_policy: MisfirePolicy
    max_lateness_s: int
    paused_reason: str | None
    suppressed_address: str | None
    held_until: datetime | None = None  # quiet hours held the claim until then (aware UTC)
    webhook_url: str | None = None  # the webhook channel's endpoint (None: email)
    webhook_secret: str | None = None  # its whsec_ signing secret
    version: int = 0  # bumped by every change of the reminder (not by a claim)
    # A delivery row exists for the occurrence `next_run_utc` points at (any status).
    delivery_recorded: bool = False
    # The suppression list's reason for the recipient the caller named (None: not listed).
    recipient_suppressed: SuppressionReason | None = None


@dataclass(frozen=True, slots=True)
class ReminderToAdvance:
    """A reminder row-locked to be moved past an occurrence (`lock_many_for_advance`):
    its state and its current schedule (columns as in `ReminderForSend`)."""

    id: uuid.UUID
    user_id: str
    timezone: str | None
    rrule: str | None
    status: ReminderStatus
    next_run_utc: datetime | None
    start_local: datetime
    all_day: bool
    exdates: Sequence[datetime]
    dst_nonexistent: Nonexistent
    dst_ambiguous: Ambiguous
    count_progress: CountProgress | None


@dataclass(frozen=True, slots=True)
class ReminderAdvance:
    """One reminder to move on (`advance_many`): from the occurrence `run_time_utc` (aware
    UTC) to `status` with `next_run_utc` (aware UTC; None when there is none),
    `last_error` (None clears it) and, for a COUNT rule, the count progress to keep (None:
    count from the start next time)."""

    id: uuid.UUID
    run_time_utc: datetime
    status: ReminderStatus
    next_run_utc: datetime | None
    last_error: str | None
    count_progress: CountProgress | None = None


@dataclass(frozen=True, slots=True)
class ReminderSendState:
    """What the sender re-reads of a reminder during its batch (`get_many_send_state`):
    whether it still wants the occurrence it was claimed for (`next_run_utc` aware UTC)."""

    id: uuid.UUID
    status: ReminderStatus
    next_run_utc: datetime | None


def get_many_for_send(
    conn: Connection,
    ids: Iterable[uuid.UUID],
    *,
    recipients: Mapping[uuid.UUID, str] | None = None,
    autocommit: bool = False,
) -> list[ReminderForSend]:
    """The reminders of `ids` that exist, in no particular order, unlocked
    (`reminder_get_many_for_send`); with `autocommit` (`conn` outside a transaction), as
    a statement of its own.

    Args:
        recipients: {reminder id: case-folded address} to look up on the suppression
            list in the same statement: each such reminder's `recipient_suppressed` is
            its address's reason, None when not listed (and for reminders not named).
    """
    params = {"ids": id_array(ids), "recipients": _json_object(recipients or {})}
    rows = run(conn, query("reminder_get_many_for_send"), params, autocommit=autocommit)
    return records(ReminderForSend, rows, status=ReminderStatus, recipient_suppressed=_reason)


def _reason(value: str | None) -> SuppressionReason | None:
    return None if value is None else SuppressionReason(value)


def _json_object(mapping: Mapping[uuid.UUID, str]) -> str:
    """`mapping` as one JSON object keyed by the UUIDs' text, by orjson (UUID keys in C);
    text orjson refuses (a lone surrogate) goes through `json.dumps`, as in `json_rows`."""
    try:
        return orjson.dumps(mapping, option=orjson.OPT_NON_STR_KEYS).decode()
    except orjson.JSONEncodeError:
        return json.dumps({str(k): v for k, v in mapping.items()})


@dataclass(frozen=True, slots=True)
class Hold:
    """The claimed occurrence `run_time_utc` of a reminder, held by its user's quiet hours
    until `held_until` (both aware UTC)."""

    reminder_id: uuid.UUID
    run_time_utc: datetime
    held_until: datetime


def hold_many(conn: Connection, holds: Sequence[Hold]) -> None:
    """Record each hold on its reminder (`held_until`), where the reminder is still
    `claimed` or `pending` at that occurrence (`reminder_hold_many`). The claim rescuer
    and the backlog's lag then read the claim as due from `held_until`."""
    if holds:
        run(
            conn,
            query("reminder_hold_many"),
            {
                "rows": json_rows(
                    {
                        "reminder_id": h.reminder_id,
                        "run_time_utc": h.run_time_utc,
                        "held_until": h.held_until,
                    }
                    for h in holds
                )
            },
        )


def lock_many_for_advance(conn: Connection, ids: Iterable[uuid.UUID]) -> list[ReminderToAdvance]:
    """The reminders of `ids` that exist, in id order, row-locked `FOR UPDATE` until the
    caller's transaction ends, so that the next occurrence is computed from the current
    schedule (`reminder_lock_many_for_advance`)."""
    rows = run(conn, query("reminder_lock_many_for_advance"), {"ids": id_array(ids)})
    return records(
        ReminderToAdvance, rows, status=ReminderStatus, count_progress=CountProgress.from_json
    )


def advance_many(conn: Connection, advances: Sequence[ReminderAdvance], *, now: datetime) -> None:
    """Move each reminder of `advances` (each id at most once) as it says, only where it
    is still `claimed` or `pending` at `run_time_utc`: a newer user change is never
    overwritten. Clears the claim; `updated_at = now` (aware UTC). Run after
    `lock_many_for_advance` in the same transaction (`reminder_advance_many`)."""
    run(
        conn,
        query("reminder_advance_many"),
        {
            "rows": json_rows(
                {
                    "id": a.id,
                    "run_time_utc": a.run_time_utc,
                    "status": a.status.value,
                    "next_run_utc": a.next_run_utc,
                    "last_error": a.last_error,
                    "count_progress": a.count_progress.to_json() if a.count_progress else None,
                }
                for a in advances
            ),
            "now": now,
        },
    )


def get_many_send_state(
    conn: Connection, ids: Iterable[uuid.UUID], *, autocommit: bool = False
) -> list[ReminderSendState]:
    """The state of the reminders of `ids` that exist, in no particular order, unlocked
    (`reminder_get_many_send_state`); with `autocommit` (`conn` outside a transaction), as
    a statement of its own."""
    rows = run(
        conn, query("reminder_get_many_send_state"), {"ids": id_array(ids)}, autocommit=autocommit
    )
    return records(ReminderSendState, rows, status=ReminderStatus)


def complete_replayed(conn: Connection, *, reminder_id: uuid.UUID, now: datetime) -> None:
    """Set a one-time reminder that is `failed` to `completed` (its replayed dead letter was
    sent), clearing last_error, `updated_at = now` (aware UTC); any other reminder is left
    as it is (`reminder_complete_replayed`)."""
    run(conn, query("reminder_complete_replayed"), {"id": reminder_id, "now": now})


# --- Suppression: pause, refuse, resume --------------------------------------------------------


@dataclass(frozen=True, slots=True)
class SendRefusal:
    """An occurrence the sender recorded `suppressed` (`suppress_at_send_many`).

    Attributes:
        id: the reminder.
        run_time_utc: aware UTC; the occurrence (the reminder changes only while still at it).
        address: the case-folded suppressed address, for `suppressed_address`.
        paused_reason: for a recurring reminder's `paused_reason`.
        error: for a one-time reminder's `last_error`.
    """

    id: uuid.UUID
    run_time_utc: datetime
    address: str
    paused_reason: str
    error: str


@dataclass(frozen=True, slots=True)
class SuppressedRef:
    """A reminder `paused` by a suppression: its user and the case-folded address it waits on."""

    id: uuid.UUID
    user_id: str
    suppressed_address: str


@dataclass(frozen=True, slots=True)
class SuppressedForResume:
    """A reminder paused by a suppression, locked to resume: the columns its next
    occurrence is computed from (names as in `reminders`; `start_local` and `exdates` are
    naive local times, `next_run_utc` aware UTC; `timezone` None follows the profile)."""

    id: uuid.UUID
    user_id: str
    timezone: str | None
    rrule: str | None
    next_run_utc: datetime | None
    start_local: datetime
    all_day: bool
    exdates: tuple[datetime, ...]
    dst_nonexistent: str
    dst_ambiguous: str
    suppressed_address: str


@dataclass(frozen=True, slots=True)
class SuppressionResume:
    """Where one reminder goes when its suppression ends (`resume_many_from_suppression`):
    `status` with `next_run_utc` (aware UTC; None when `completed` or `failed`);
    `last_error` None keeps the reminder's own."""

    id: uuid.UUID
    status: ReminderStatus
    next_run_utc: datetime | None
    last_error: str | None


@dataclass(frozen=True, slots=True)
class SuppressionRepoint:
    """A paused reminder now waiting on another suppressed (case-folded) `address`."""

    id: uuid.UUID
    address: str
    paused_reason: str


def pause_user_for_suppression(
    conn: Connection, *, user_id: str, address: str, paused_reason: str, now: datetime
) -> list[uuid.UUID]:
    """Pause the `pending` and `claimed` reminders of `user_id` (claims cleared,
    `paused_reason`, `suppressed_address = address`, `suppression_checked_at` NULL,
    `updated_at = now`, aware UTC), locked in id order
    (`reminder_pause_user_for_suppression`). Returns their ids, ascending."""
    rows = run(
        conn,
        query("reminder_pause_user_for_suppression"),
        {"user_id": user_id, "address": address, "paused_reason": paused_reason, "now": now},
    ).scalars()
    return sorted(rows)


def suppress_at_send_many(
    conn: Connection, refusals: Sequence[SendRefusal], *, now: datetime
) -> dict[uuid.UUID, ReminderStatus]:
    """For each refusal whose reminder is still at that occurrence (live, or paused by a
    suppression): a recurring reminder becomes `paused` waiting on the address, a one-time
    one `failed` with `last_error = error`; claims cleared, `updated_at = now` (aware UTC);
    locked in id order, one statement (`reminder_suppress_at_send_many`). Returns reminder
    id -> new status for those that changed; {} without a statement for no refusals."""
    if not refusals:
        return {}
    rows = json_rows(
        {
            "id": r.id,
            "run_time_utc": r.run_time_utc,
            "address": r.address,
            "paused_reason": r.paused_reason,
            "error": r.error,
        }
        for r in refusals
    )
    changed = run(conn, query("reminder_suppress_at_send_many"), {"rows": rows, "now": now})
    return {r.id: ReminderStatus(r.status) for r in changed}


def list_suppressed_to_check(
    conn: Connection, *, checked_before: datetime, limit: int
) -> list[SuppressedRef]:
    """Up to `limit` reminders paused by a suppression and not checked since
    `checked_before` (aware UTC), never-checked first, then oldest check, then id
    (`reminder_list_suppressed_to_check`). No lock."""
    rows = run(
        conn,
        query("reminder_list_suppressed_to_check"),
        {"checked_before": checked_before, "limit": limit},
    )
    return records(SuppressedRef, rows)


def list_suppressed_by_address(conn: Connection, *, email: str) -> list[SuppressedRef]:
    """Every reminder paused because the case-folded `email` was suppressed, by id
    (`reminder_list_suppressed_by_address`). No lock."""
    rows = run(conn, query("reminder_list_suppressed_by_address"), {"email": email})
    return records(SuppressedRef, rows)


def lock_many_suppressed(conn: Connection, ids: Collection[uuid.UUID]) -> list[SuppressedForResume]:
    """Those of `ids` still paused by a suppression, by id, row-locked `FOR UPDATE` in id
    order until the caller's transaction ends (`reminder_lock_many_suppressed`); [] without
    a statement for no ids."""
    if not ids:
        return []
    rows = run(conn, query("reminder_lock_many_suppressed"), {"ids": id_array(sorted(ids))})
    return records(SuppressedForResume, rows, exdates=tuple)


def resume_many_from_suppression(
    conn: Connection, resumes: Sequence[SuppressionResume], *, now: datetime
) -> list[uuid.UUID]:
    """Set each reminder still paused by a suppression to its `status` and `next_run_utc`
    (`last_error` replaced only when given), clear `paused_reason`, `suppressed_address`
    and `suppression_checked_at`, `updated_at = now` (aware UTC), in one statement
    (`reminder_resume_many_from_suppression`). Returns the ids changed, ascending; []
    without a statement for no resumes."""
    if not resumes:
        return []
    rows = json_rows(
        {
            "id": r.id,
            "status": r.status.value,
            "next_run_utc": r.next_run_utc,
            "last_error": r.last_error,
        }
        for r in resumes
    )
    resumed = run(
        conn, query("reminder_resume_many_from_suppression"), {"rows": rows, "now": now}
    ).scalars()
    return sorted(resumed)


def repoint_many_suppression(
    conn: Connection, repoints: Sequence[SuppressionRepoint], *, now: datetime
) -> None:
    """Make each reminder still paused by a suppression wait on its new `address` (with its
    `paused_reason`), `suppression_checked_at = updated_at = now` (aware UTC), in one
    statement (`reminder_repoint_many_suppression`); none for no repoints."""
    if not repoints:
        return
    rows = json_rows(
        {"id": r.id, "address": r.address, "paused_reason": r.paused_reason} for r in repoints
    )
    run(conn, query("reminder_repoint_many_suppression"), {"rows": rows, "now": now})


def mark_many_suppression_checked(
    conn: Connection, ids: Collection[uuid.UUID], *, now: datetime
) -> None:
    """Set `suppression_checked_at = now` (aware UTC) on those of `ids` still paused by a
    suppression (`reminder_mark_many_suppression_checked`); no statement for no ids."""
    if not ids:
        return
    run(conn, query("reminder_mark_many_suppression_checked"), {"ids": id_array(ids), "now": now})
