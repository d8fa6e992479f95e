"""Typed statements on `delivery_log` (`sql/delivery_log.sql`): one row per occurrence,
its lease and its outcome (docs/design.md, "Delivery states"). Every function runs on the
caller's `Connection` and never commits."""

from __future__ import annotations

import uuid
from dataclasses import dataclass
from datetime import UTC, datetime
from enum import StrEnum

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
    rows = conn.execute(
        query("delivery_rescue_abandoned"), {"cutoff": cutoff, "now": now, "limit": limit}
    )
    return [
        AbandonedDelivery(
            id=r.id,
            reminder_id=r.reminder_id,
            run_time_utc=r.run_time_utc,
            provider=r.provider,
            attempt_count=r.attempt_count,
            status=DeliveryStatus(r.status),
        )
        for r in rows
    ]


def lock_held_live(
    conn: Connection, *, reminder_id: uuid.UUID, run_time_utc: datetime, lease_cutoff: datetime
) -> list[uuid.UUID]:
    """The ids of the reminder's `sending` rows at or after `run_time_utc` whose lease was
    taken or renewed after `lease_cutoff` (aware UTC): held by a live sender. They stay
    row-locked (`FOR UPDATE`, waiting for a lock another transaction holds) until the
    caller's transaction ends (`delivery_lock_held_live`)."""
    rows = conn.execute(
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
) -> bool:
    """Record a dead-lettered occurrence `failed` with `error`: a new row, or its
    `sending` row ended (lease cleared; `error` appended); a terminal row is left as it is
    (`delivery_fail_dead_letter`). Returns True when a row was written."""
    result = conn.execute(
        query("delivery_fail_dead_letter"),
        {
            "reminder_id": reminder_id,
            "user_id": user_id,
            "run_time_utc": run_time_utc,
            "error": error,
            "now": now,
        },
    )
    return bool(result.rowcount)


def fail_chosen_after(
    conn: Connection, *, reminder_id: uuid.UUID, run_time_utc: datetime, error: str, now: datetime
) -> list[datetime]:
    """Record `failed` (with `error` appended, lease cleared) the reminder's `sending` rows
    after `run_time_utc` (aware UTC): occurrences a sender chose for a dead-lettered one
    under the misfire policy (`delivery_fail_chosen_after`). Returns their run times
    (aware UTC), in no particular order."""
    rows = conn.execute(
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
    result = conn.execute(
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
    rows = conn.execute(query("delivery_count_failures_since"), {"since": since})
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
    row = conn.execute(query("delivery_lag_p99_since"), {"since": since}).one()
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
    rows = conn.execute(query("delivery_list_partitions"))
    return [
        Partition(name=r.name, week_start=r.week_start, estimated_rows=float(r.estimated_rows))
        for r in rows
    ]


def create_partition(conn: Connection, *, week_start: datetime) -> int | None:
    """Create the weekly partition starting at `week_start` (a Monday 00:00 UTC, aware),
    moving into it the rows of its week from the default partition (migration 0005's
    function; DDL: ACCESS EXCLUSIVE on delivery_log until the transaction ends)
    (`delivery_create_partition`). Returns how many rows it took over, or None when it
    existed already."""
    moved = conn.execute(
        query("delivery_create_partition"), {"week_start": week_start}
    ).scalar_one()
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
    outcome = conn.execute(
        query("delivery_drop_partition"), {"week_start": week_start, "cutoff": cutoff}
    ).scalar_one()
    return PartitionDrop(outcome)


def delete_expired_default(conn: Connection, *, cutoff: datetime, limit: int) -> int:
    """Delete up to `limit` terminal rows of the default partition whose occurrence is
    before `cutoff` (aware UTC); `sending` rows are never deleted
    (`delivery_delete_expired_default`). Returns how many were deleted."""
    result = conn.execute(
        query("delivery_delete_expired_default"), {"cutoff": cutoff, "limit": limit}
    )
    return int(result.rowcount)
