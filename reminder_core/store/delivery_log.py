"""Typed statements on `delivery_log` (`sql/delivery_log.sql`): one row per occurrence,
its lease and its outcome (docs/design.md, "Delivery states"). Every function runs on the
caller's `Connection` and never commits."""

from __future__ import annotations

import uuid
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from enum import StrEnum

from sqlalchemy import Connection

from reminder_core.domain.states import DeliveryStatus
from reminder_core.record import record
from reminder_core.store._statements import json_rows, query, records, run

# --- Shared reads ------------------------------------------------------------------------------


def get_status(
    conn: Connection, *, reminder_id: uuid.UUID, run_time_utc: datetime
) -> DeliveryStatus | None:
    """The state of the delivery row of one occurrence (`run_time_utc` aware UTC), or None
    when the occurrence has no row yet (`delivery_get_status`)."""
    status = run(
        conn,
        query("delivery_get_status"),
        {"reminder_id": reminder_id, "run_time_utc": run_time_utc},
    ).scalar_one_or_none()
    return None if status is None else DeliveryStatus(status)


# --- API: a reminder's delivery history --------------------------------------------------------


@dataclass(frozen=True, slots=True)
class DeliveryHistoryItem:
    """What happened to one occurrence, as a user sees it. Instants aware UTC;
    `attempt_count` counts provider calls; `sent_at` is when the provider accepted it;
    `held_until` the end of the quiet hours that held it (None: not held); `reminder_id`
    the reminder it belongs to (the one asked for, or a snooze of it)."""

    reminder_id: uuid.UUID
    run_time_utc: datetime
    status: DeliveryStatus
    provider: str | None
    attempt_count: int
    error: str | None
    sent_at: datetime | None
    held_until: datetime | None
    updated_at: datetime


_AFTER_EVERY_OCCURRENCE = datetime.max.replace(tzinfo=UTC)


def list_page(
    conn: Connection, *, reminder_id: uuid.UUID, limit: int, before: datetime | None
) -> list[DeliveryHistoryItem]:
    """Up to `limit` delivery rows of a reminder, newest occurrence first, those strictly
    before `before` (aware UTC; run_time_utc is unique per reminder) when given
    (`delivery_list_page`). The caller has checked that the reminder is the user's."""
    rows = run(
        conn,
        query("delivery_list_page"),
        {"reminder_id": reminder_id, "limit": limit, "before": before or _AFTER_EVERY_OCCURRENCE},
    )
    return records(DeliveryHistoryItem, rows, status=DeliveryStatus)


# --- Sender: begin, complete, heartbeat, withdraw ----------------------------------------------


#: An occurrence: (reminder id, run_time_utc aware UTC), the key of its delivery row.
OccurrenceKey = tuple[uuid.UUID, datetime]


@record
class DeliveryLease:
    """A `sending` row as its lease holder names it: the row (`id`, and `run_time_utc`,
    aware UTC, its partition) and the holder's fencing token."""

    id: uuid.UUID
    run_time_utc: datetime
    lease_token: uuid.UUID


@record
class DeliveryToBegin:
    """An occurrence to take (`begin_many`) under the fresh lease token `lease_token`
    (`run_time_utc` aware UTC); `held_until` (aware UTC) when its user's quiet hours held
    it until then (recorded on the row)."""

    reminder_id: uuid.UUID
    user_id: str
    run_time_utc: datetime
    lease_token: uuid.UUID
    held_until: datetime | None = None


@record
class DeliveryTaken:
    """A row `begin_many` took, named by the lease token it now carries.

    Attributes:
        id: the delivery row.
        lease_token: the token of the `DeliveryToBegin` that took it.
        provider: the provider an earlier attempt pinned, or that gave the evidence.
        provider_message_id, sent_at, recipient: the provider's evidence that it already
            accepted the email (`sent_at` aware UTC); None without evidence.
        taken_over: the row was `sending` under a lease that ended without a heartbeat
            (its sender died: a possible duplicate).
    """

    id: uuid.UUID
    lease_token: uuid.UUID
    provider: str | None
    provider_message_id: str | None
    sent_at: datetime | None
    recipient: str | None
    taken_over: bool


@dataclass(frozen=True, slots=True)
class TerminalDelivery:
    """An occurrence that ends without a provider call (`record_terminal_many`): its
    `status` (cancelled, suppressed, missed) and why (`run_time_utc` aware UTC)."""

    reminder_id: uuid.UUID
    user_id: str
    run_time_utc: datetime
    status: DeliveryStatus
    error: str


@record
class DeliveryOutcome:
    """What the completer writes for one send (`complete_many`), fenced by its lease.

    Attributes:
        id, run_time_utc, lease_token: the row and the holder's lease (as DeliveryLease).
        status: SENT or FAILED completes the row; SENDING releases its lease.
        sent_at: aware UTC, when the provider accepted it (SENT).
        provider: the provider that accepted it, or that an ambiguous attempt reached.
        provider_message_id: the provider's id (SENT).
        recipient: the address it went to (None keeps the row's).
        error: why it failed or was handed back (None when sent).
        attempts: provider calls made by this holder (added to the row's count).
        reminder_id, occurrence_utc: the reminder and the occurrence it points at (aware
            UTC); a one-time reminder still there is finished with a SENT or FAILED row.
        user_id, held_until: the row's, for a first send without a lease
            (`record_first_sends_many` inserts its row; lease_token is then None).
    """

    id: uuid.UUID
    run_time_utc: datetime
    lease_token: uuid.UUID | None
    status: DeliveryStatus
    sent_at: datetime | None
    provider: str | None
    provider_message_id: str | None
    recipient: str | None
    error: str | None
    attempts: int
    reminder_id: uuid.UUID
    occurrence_utc: datetime
    user_id: str | None = None
    held_until: datetime | None = None


@dataclass(frozen=True, slots=True)
class DeliveryEvidence:
    """The provider's evidence that it accepted a `sending` row's email (written by its
    webhook together with the provider's name): `sent_at` is aware UTC."""

    provider: str
    provider_message_id: str
    sent_at: datetime


def get_in_flight(
    conn: Connection, *, reminder_id: uuid.UUID, from_utc: datetime
) -> datetime | None:
    """The latest occurrence (aware UTC) of this reminder at or after `from_utc` whose row
    is `sending`, None when there is none (`delivery_get_in_flight`)."""
    return run(
        conn, query("delivery_get_in_flight"), {"reminder_id": reminder_id, "from_utc": from_utc}
    ).scalar_one_or_none()


def get_lease_left(
    conn: Connection,
    *,
    reminder_id: uuid.UUID,
    run_time_utc: datetime,
    lease_s: float,
    now: datetime,
) -> float | None:
    """Seconds (>= 0) until the lease of `lease_s` seconds on this occurrence's `sending`
    row ends, as of `now` (aware UTC); None when the row is not `sending` or nobody holds
    it (`delivery_get_lease_left`)."""
    left = run(
        conn,
        query("delivery_get_lease_left"),
        {"reminder_id": reminder_id, "run_time_utc": run_time_utc, "lease_s": lease_s, "now": now},
    ).scalar_one_or_none()
    return None if left is None else float(left)


def pin_provider(conn: Connection, *, lease: DeliveryLease, provider: str) -> None:
    """Record `provider` on the row while it is still `sending` under `lease` (nothing
    happens once the lease was taken over or the row ended) (`delivery_pin_provider`)."""
    run(
        conn,
        query("delivery_pin_provider"),
        {
            "id": lease.id,
            "run_time_utc": lease.run_time_utc,
            "lease_token": lease.lease_token,
            "provider": provider,
        },
    )


def cancel_replay(
    conn: Connection, *, reminder_id: uuid.UUID, run_time_utc: datetime, error: str, now: datetime
) -> None:
    """End a replayed occurrence's unleased `sending` row as `cancelled` with `error`,
    `updated_at = now` (aware UTC); a row in any other state is left as it is
    (`delivery_cancel_replay`)."""
    run(
        conn,
        query("delivery_cancel_replay"),
        {"reminder_id": reminder_id, "run_time_utc": run_time_utc, "error": error, "now": now},
    )


def begin_many(
    conn: Connection,
    rows: Sequence[DeliveryToBegin],
    *,
    now: datetime,
    lease_expired_before: datetime,
) -> list[DeliveryTaken]:
    """Take each occurrence of `rows` (distinct keys, inserted in this order: sort them by
    key so that two senders lock in the same order): insert its row `sending` under its
    lease token with `locked_at = now`, or take over a `sending` row whose lease was
    released or is older than `lease_expired_before` (both aware UTC). An occurrence
    under another live lease, or terminal, is not taken. Returns the rows taken, in no
    particular order (`delivery_begin_many`)."""
    taken = run(
        conn,
        query("delivery_begin_many"),
        {
            "rows": json_rows(
                {
                    "reminder_id": r.reminder_id,
                    "user_id": r.user_id,
                    "run_time_utc": r.run_time_utc,
                    "lease_token": r.lease_token,
                    "held_until": r.held_until,
                }
                for r in rows
            ),
            "now": now,
            "lease_expired_before": lease_expired_before,
        },
    )
    return records(DeliveryTaken, taken)


def record_terminal_many(
    conn: Connection,
    rows: Sequence[TerminalDelivery],
    *,
    now: datetime,
    lease_expired_before: datetime,
) -> dict[OccurrenceKey, DeliveryStatus]:
    """Insert each occurrence of `rows` (distinct keys, in this order) with its terminal
    status. An occurrence that has a row keeps it, except that a CANCELLED or SUPPRESSED
    one ends a `sending` row whose lease was released or is older than
    `lease_expired_before` (aware UTC) — as SENT when the row carries the provider's
    evidence. Returns occurrence key -> status recorded, for the rows written
    (`delivery_record_terminal_many`)."""
    recorded = run(
        conn,
        query("delivery_record_terminal_many"),
        {
            "rows": json_rows(
                {
                    "reminder_id": r.reminder_id,
                    "user_id": r.user_id,
                    "run_time_utc": r.run_time_utc,
                    "status": r.status.value,
                    "error": r.error,
                }
                for r in rows
            ),
            "now": now,
            "lease_expired_before": lease_expired_before,
        },
    )
    return {(r.reminder_id, r.run_time_utc): DeliveryStatus(r.status) for r in recorded}


def record_evidenced_sent_many(
    conn: Connection,
    keys: Sequence[OccurrenceKey],
    *,
    now: datetime,
    lease_expired_before: datetime,
) -> set[OccurrenceKey]:
    """Record SENT each occurrence of `keys` (distinct) whose `sending` row carries the
    provider's evidence and whose lease was released or is older than
    `lease_expired_before` (aware UTC); other rows are left as they are. Returns the keys
    recorded (`delivery_record_evidenced_sent_many`)."""
    recorded = run(
        conn,
        query("delivery_record_evidenced_sent_many"),
        {
            "rows": json_rows(
                {"reminder_id": reminder_id, "run_time_utc": run_time_utc}
                for reminder_id, run_time_utc in keys
            ),
            "now": now,
            "lease_expired_before": lease_expired_before,
        },
    )
    return {(r.reminder_id, r.run_time_utc) for r in recorded}


def complete_many(
    conn: Connection, outcomes: Sequence[DeliveryOutcome], *, now: datetime
) -> dict[uuid.UUID, bool]:
    """Write each outcome on its row where the row is still `sending` under its lease
    (`updated_at = now`, aware UTC; the lease cleared), and finish, in the same statement,
    a one-time reminder still at that occurrence (`completed` when SENT, `failed` with the
    error when FAILED). Returns delivery id -> whether its reminder was finished, for the
    rows written; a row missing was taken over or ended by someone else
    (`delivery_complete_many`)."""
    done = run(conn, query("delivery_complete_many"), {"rows": _outcome_rows(outcomes), "now": now})
    return {r.id: r.finished for r in done}


def record_first_sends_many(
    conn: Connection, outcomes: Sequence[DeliveryOutcome], *, now: datetime
) -> dict[uuid.UUID, bool]:
    """Insert the delivery row of each first send without a lease (`lease_token` None,
    `user_id` set; distinct keys) with its outcome (`created_at = updated_at = now`, aware
    UTC), where the occurrence has no row yet, and finish, in the same statement, a
    one-time reminder still at that occurrence (as `complete_many`). Returns delivery id
    -> whether its reminder was finished, for the rows inserted; a row missing met a row
    of another copy of its occurrence, which it leaves as it is
    (`delivery_record_first_sends_many`)."""
    done = run(
        conn,
        query("delivery_record_first_sends_many"),
        {"rows": _outcome_rows(outcomes), "now": now},
    )
    return {r.id: r.finished for r in done}


def list_recorded_at(
    conn: Connection, outcomes: Sequence[DeliveryOutcome], *, now: datetime
) -> list[uuid.UUID]:
    """The ids of the rows of `outcomes` that a `complete_many` at `now` (aware UTC, the
    same instant) already wrote, e.g. before its connection broke unacknowledged
    (`delivery_list_recorded_at`)."""
    found = run(
        conn, query("delivery_list_recorded_at"), {"rows": _outcome_rows(outcomes), "now": now}
    )
    return list(found.scalars())


def _outcome_rows(outcomes: Sequence[DeliveryOutcome]) -> str:
    return json_rows(
        {
            "id": o.id,
            "run_time_utc": o.run_time_utc,
            "lease_token": o.lease_token,
            "status": o.status.value,
            "sent_at": o.sent_at,
            "provider": o.provider,
            "provider_message_id": o.provider_message_id,
            "recipient": o.recipient,
            "error": o.error,
            "attempts": o.attempts,
            "reminder_id": o.reminder_id,
            "occurrence_utc": o.occurrence_utc,
            # read by delivery_record_first_sends_many only (the others ignore them)
            "user_id": o.user_id,
            "held_until": o.held_until,
        }
        for o in outcomes
    )


def heartbeat_many(conn: Connection, leases: Sequence[DeliveryLease], *, now: datetime) -> int:
    """Extend (`locked_at = now`, aware UTC) the lease of each row of `leases` still
    `sending` under it; a row locked right now is skipped, not waited for (it gets its
    extension at the next beat). Returns how many were extended
    (`delivery_heartbeat_many`)."""
    result = run(conn, query("delivery_heartbeat_many"), {"rows": _lease_rows(leases), "now": now})
    return int(result.rowcount)


def withdraw_many(conn: Connection, leases: Sequence[DeliveryLease]) -> int:
    """Delete the rows of `leases` still `sending` under them that no provider call ever
    touched (no attempt counted, no provider recorded); the others stay, for the caller
    to release. Returns how many were deleted (`delivery_withdraw_many`)."""
    result = run(conn, query("delivery_withdraw_many"), {"rows": _lease_rows(leases)})
    return int(result.rowcount)


def _lease_rows(leases: Sequence[DeliveryLease]) -> str:
    return json_rows(
        {"id": lease.id, "run_time_utc": lease.run_time_utc, "lease_token": lease.lease_token}
        for lease in leases
    )


def get_evidence(conn: Connection, *, lease: DeliveryLease) -> DeliveryEvidence | None:
    """The provider's evidence on the row while it is `sending` under `lease`, None
    without evidence or once the lease is gone (`delivery_get_evidence`)."""
    row = run(
        conn,
        query("delivery_get_evidence"),
        {"id": lease.id, "run_time_utc": lease.run_time_utc, "lease_token": lease.lease_token},
    ).one_or_none()
    if row is None:
        return None
    return DeliveryEvidence(
        provider=row.provider, provider_message_id=row.provider_message_id, sent_at=row.sent_at
    )


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
    row = run(
        conn,
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
    changed = run(
        conn,
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
    changed = run(
        conn,
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
    row = run(
        conn,
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


@dataclass(frozen=True, slots=True)
class AbandonedDelivery:
    """A `sending` row `rescue_abandoned` ended.

    Attributes:
        id: the delivery row.
        reminder_id: its reminder.
        run_time_utc: aware UTC, its occurrence.
        provider: the provider an attempt may have reached (None: none recorded).
        attempt_count: provider calls made for it.
        status: what it was recorded as: `failed`, or `sent` when it carried the
            provider's evidence of its send.
    """

    id: uuid.UUID
    reminder_id: uuid.UUID
    run_time_utc: datetime
    provider: str | None
    attempt_count: int
    status: DeliveryStatus


def rescue_abandoned(
    conn: Connection, *, cutoff: datetime, now: datetime, limit: int
) -> list[AbandonedDelivery]:
    """End up to `limit` `sending` rows nobody holds (no lease since `cutoff`, aware UTC)
    and unchanged since `cutoff`, whose reminder will not come back to them, oldest first
    (`delivery_rescue_abandoned`).

    Side effects: each becomes `failed` ("abandoned: ...") or, with the provider's
    evidence, `sent`; its lease is cleared and `updated_at` set to `now`. Rows another
    transaction has locked are skipped.
    """
    rows = run(
        conn, query("delivery_rescue_abandoned"), {"cutoff": cutoff, "now": now, "limit": limit}
    )
    return records(AbandonedDelivery, rows, status=DeliveryStatus)


def lock_held_live(
    conn: Connection, *, reminder_id: uuid.UUID, run_time_utc: datetime, lease_cutoff: datetime
) -> list[uuid.UUID]:
    """The ids of the reminder's `sending` rows at or after `run_time_utc` whose lease was
    taken or renewed after `lease_cutoff` (aware UTC): held by a live sender. They stay
    row-locked (`FOR UPDATE`, waiting for a lock another transaction holds) until the
    caller's transaction ends (`delivery_lock_held_live`)."""
    rows = run(
        conn,
        query("delivery_lock_held_live"),
        {"reminder_id": reminder_id, "run_time_utc": run_time_utc, "lease_cutoff": lease_cutoff},
    )
    return list(rows.scalars())


def fail_dead_letter(
    conn: Connection,
    *,
    reminder_id: uuid.UUID,
    user_id: str,
    run_time_utc: datetime,
    error: str,
    now: datetime,
) -> str | None:
    """Record a dead-lettered occurrence `failed` with `error`: a new row, or its
    `sending` row ended (lease cleared; `error` appended to the last attempt's); a
    terminal row is left as it is (`delivery_fail_dead_letter`). Returns the row's error
    as written ("<last attempt's error>; <error>", or `error`), None when no row was
    written."""
    result = run(
        conn,
        query("delivery_fail_dead_letter"),
        {
            "reminder_id": reminder_id,
            "user_id": user_id,
            "run_time_utc": run_time_utc,
            "error": error,
            "now": now,
        },
    )
    written = result.scalar_one_or_none()
    return None if written is None else str(written)


def fail_chosen_after(
    conn: Connection, *, reminder_id: uuid.UUID, run_time_utc: datetime, error: str, now: datetime
) -> list[datetime]:
    """Record `failed` (with `error` appended, lease cleared) the reminder's `sending` rows
    after `run_time_utc` (aware UTC): occurrences a sender chose for a dead-lettered one
    under the misfire policy (`delivery_fail_chosen_after`). Returns their run times
    (aware UTC), in no particular order."""
    rows = run(
        conn,
        query("delivery_fail_chosen_after"),
        {"reminder_id": reminder_id, "run_time_utc": run_time_utc, "error": error, "now": now},
    )
    return list(rows.scalars())


def prepare_replay(
    conn: Connection,
    *,
    reminder_id: uuid.UUID,
    run_time_utc: datetime,
    now: datetime,
    lease_cutoff: datetime,
) -> bool:
    """Ready an occurrence for a dead-letter replay: a `failed` row, or a `sending` row
    with no lease or one not renewed since `lease_cutoff` (aware UTC), becomes `sending`
    with no lease (error noted, `updated_at = now`); any other row, or none, is left
    (`delivery_prepare_replay`). Returns True when a row changed."""
    result = run(
        conn,
        query("delivery_prepare_replay"),
        {
            "reminder_id": reminder_id,
            "run_time_utc": run_time_utc,
            "now": now,
            "lease_cutoff": lease_cutoff,
        },
    )
    return bool(result.rowcount)


def count_failures_since(conn: Connection, *, since: datetime) -> dict[DeliveryStatus, int]:
    """How many rows last changed at or after `since` (aware UTC) are `failed`, `bounced`,
    `complained` or `suppressed`, per status (a status with none is absent); reads only
    (`delivery_count_failures_since`)."""
    rows = run(conn, query("delivery_count_failures_since"), {"since": since})
    return {DeliveryStatus(r.status): int(r.n) for r in rows}


@dataclass(frozen=True, slots=True)
class DeliveryLag:
    """delivery_lag (sent_at - run_time_utc) over the occurrences sent in a window.

    Attributes:
        p99_s: its 99th percentile, seconds (None when none was sent).
        sent: how many were sent.
    """

    p99_s: float | None
    sent: int


def lag_p99_since(conn: Connection, *, since: datetime) -> DeliveryLag:
    """The delivery_lag of the occurrences sent at or after `since` (aware UTC); reads
    only (`delivery_lag_p99_since`)."""
    row = run(conn, query("delivery_lag_p99_since"), {"since": since}).one()
    return DeliveryLag(p99_s=None if row.p99 is None else float(row.p99), sent=int(row.n))


@dataclass(frozen=True, slots=True)
class Partition:
    """A partition of delivery_log.

    Attributes:
        name: its table name (`delivery_log_pYYYYMMDD`, or `delivery_log_default`).
        week_start: aware UTC, the Monday 00:00 its week starts (None: the default
            partition).
        estimated_rows: PostgreSQL's row estimate (-1: never vacuumed nor analyzed).
    """

    name: str
    week_start: datetime | None
    estimated_rows: float


def list_partitions(conn: Connection) -> list[Partition]:
    """Every partition of delivery_log, the default one first, then by week; reads the
    catalog only (`delivery_list_partitions`)."""
    rows = run(conn, query("delivery_list_partitions"))
    return records(Partition, rows, estimated_rows=float)


def create_partition(conn: Connection, *, week_start: datetime) -> int | None:
    """Create the weekly partition starting at `week_start` (a Monday 00:00 UTC, aware),
    moving into it the rows of its week from the default partition (migration 0005's
    function; DDL: ACCESS EXCLUSIVE on delivery_log until the transaction ends)
    (`delivery_create_partition`). Returns how many rows it took over, or None when it
    existed already."""
    moved = run(conn, query("delivery_create_partition"), {"week_start": week_start}).scalar_one()
    return None if moved is None else int(moved)


class PartitionDrop(StrEnum):
    """What `drop_partition` did to a weekly partition."""

    DROPPED = "dropped"
    KEPT = "kept"  # it holds a `sending` row
    RECENT = "recent"  # its week is not wholly before the cutoff
    MISSING = "missing"  # no such partition


def drop_partition(conn: Connection, *, week_start: datetime, cutoff: datetime) -> PartitionDrop:
    """Drop the weekly partition starting at `week_start` (aware UTC) if its whole week
    is before `cutoff` and it holds no `sending` row (migration 0005's function; DDL:
    ACCESS EXCLUSIVE on delivery_log until the transaction ends)
    (`delivery_drop_partition`)."""
    outcome = run(
        conn, query("delivery_drop_partition"), {"week_start": week_start, "cutoff": cutoff}
    ).scalar_one()
    return PartitionDrop(outcome)


def delete_expired_default(conn: Connection, *, cutoff: datetime, limit: int) -> int:
    """Delete up to `limit` terminal rows of the default partition whose occurrence is
    before `cutoff` (aware UTC); `sending` rows are never deleted
    (`delivery_delete_expired_default`). Returns how many were deleted."""
    result = run(conn, query("delivery_delete_expired_default"), {"cutoff": cutoff, "limit": limit})
    return int(result.rowcount)


@dataclass(frozen=True, slots=True)
class LagBucket:
    """Delivery lag of the occurrences sent in one bucket: its start (aware UTC), how
    many were sent, and the p50, p90, p99 and largest lag (seconds)."""

    bucket_start: datetime
    sent: int
    p50_s: float
    p90_s: float
    p99_s: float
    max_s: float


def lag_by_bucket(
    conn: Connection, *, since: datetime, until: datetime, bucket_s: float
) -> list[LagBucket]:
    """Delivery lag percentiles of the occurrences sent in [`since`, `until`) (aware UTC),
    per bucket of `bucket_s` seconds aligned on `since`, oldest first; buckets without a
    send are absent (`delivery_lag_by_bucket`)."""
    result = run(
        conn,
        query("delivery_lag_by_bucket"),
        {"since": since, "until": until, "bucket_s": float(bucket_s)},
    )
    return records(LagBucket, result)
