"""SQLAlchemy 2 declarative schema (docs/design.md, "Data model"); Alembic migrations are
made from it.

Every instant is `timestamptz`; states are text with a CHECK constraint; invariants that
the data must keep are CHECK constraints too, so a bug cannot store an impossible row.
"""

from __future__ import annotations

import uuid
from datetime import datetime
from typing import Any

from sqlalchemy import (
    BigInteger,
    Boolean,
    CheckConstraint,
    DateTime,
    ForeignKey,
    Index,
    Integer,
    MetaData,
    Text,
    UniqueConstraint,
    text,
)
from sqlalchemy.dialects.postgresql import ARRAY, BYTEA, JSONB, TIMESTAMP, UUID
from sqlalchemy.orm import DeclarativeBase, Mapped, mapped_column

from reminder_core.domain.states import DeliveryStatus, ReminderStatus
from reminder_core.domain.suppression import ApplyOutcome, FeedbackKind, SuppressionReason

NAMING = {
    "ix": "ix_%(table_name)s_%(column_0_N_name)s",
    "uq": "uq_%(table_name)s_%(column_0_N_name)s",
    "ck": "ck_%(table_name)s_%(constraint_name)s",
    "fk": "fk_%(table_name)s_%(column_0_name)s_%(referred_table_name)s",
    "pk": "pk_%(table_name)s",
}

UUIDV7 = text("reminders_uuidv7()")
NOW = text("now()")


def _in(column: str, values: list[str]) -> str:
    quoted = ", ".join(f"'{v}'" for v in values)
    return f"{column} IN ({quoted})"


class Base(DeclarativeBase):
    metadata = MetaData(naming_convention=NAMING)


class Reminder(Base):
    """One reminder: its schedule, its state, and the next occurrence to send."""

    __tablename__ = "reminders"

    id: Mapped[uuid.UUID] = mapped_column(UUID, primary_key=True, server_default=UUIDV7)
    user_id: Mapped[str] = mapped_column(Text)
    title: Mapped[str] = mapped_column(Text)
    body: Mapped[str | None] = mapped_column(Text)
    template: Mapped[str] = mapped_column(Text, server_default="reminder")
    # Local wall-clock date-time, no offset (docs/design.md, "Occurrences"): `timestamp
    # without time zone`.
    start_local: Mapped[datetime] = mapped_column(TIMESTAMP(timezone=False))
    all_day: Mapped[bool] = mapped_column(Boolean, server_default=text("false"))
    timezone: Mapped[str | None] = mapped_column(Text)  # NULL: follow the profile's zone
    rrule: Mapped[str | None] = mapped_column(Text)  # NULL: one-time
    exdates: Mapped[list[datetime]] = mapped_column(
        ARRAY(TIMESTAMP(timezone=False)), server_default=text("'{}'")
    )
    dst_nonexistent: Mapped[str] = mapped_column(Text, server_default="shift")
    dst_ambiguous: Mapped[str] = mapped_column(Text, server_default="first")
    misfire_policy: Mapped[str] = mapped_column(Text, server_default="latest")
    max_lateness_s: Mapped[int] = mapped_column(Integer, server_default=text("3600"))
    next_run_utc: Mapped[datetime | None] = mapped_column(DateTime(timezone=True))
    status: Mapped[str] = mapped_column(Text, server_default=ReminderStatus.PENDING.value)
    version: Mapped[int] = mapped_column(Integer, server_default=text("1"))
    claimed_by: Mapped[str | None] = mapped_column(Text)
    claimed_at: Mapped[datetime | None] = mapped_column(DateTime(timezone=True))
    client_request_id: Mapped[str | None] = mapped_column(Text)
    request_fingerprint: Mapped[str | None] = mapped_column(Text)
    last_error: Mapped[str | None] = mapped_column(Text)
    # Paused because the recipient address is on the suppression list (docs/design.md,
    # "Suppression list"): the reason shown to the user, and the case-folded address whose
    # removal (or a profile address change, checked by the maintenance workload) resumes
    # the reminder. NULL for a pause by the user.
    paused_reason: Mapped[str | None] = mapped_column(Text)
    suppressed_address: Mapped[str | None] = mapped_column(Text)
    suppression_checked_at: Mapped[datetime | None] = mapped_column(DateTime(timezone=True))
    created_at: Mapped[datetime] = mapped_column(DateTime(timezone=True), server_default=NOW)
    updated_at: Mapped[datetime] = mapped_column(DateTime(timezone=True), server_default=NOW)
    # For a rule with COUNT: how many instances came before a local time, kept by the
    # sender when it advances the reminder (recurrence.CountProgress.to_json), so that the
    # next occurrence costs the same at any age; NULL: count from the start. Cleared by a
    # schedule change (docs/design.md, "Occurrences").
    count_progress: Mapped[dict[str, Any] | None] = mapped_column(JSONB)
    # The claimed occurrence in hand is held by its user's quiet hours until then (its
    # message comes back at that instant); an older value is stale and means nothing
    # (docs/design.md, "Quiet hours").
    held_until: Mapped[datetime | None] = mapped_column(DateTime(timezone=True))
    # A one-time reminder a snooze link made (docs/design.md, "Links in emails"): the
    # reminder whose email carried the link; its delivery shows in that one's history.
    snoozed_from: Mapped[uuid.UUID | None] = mapped_column(
        UUID, ForeignKey("reminders.id", ondelete="SET NULL")
    )
    # Delivered to this webhook endpoint instead of by email (docs/design.md, "Webhook
    # channel"); NULL: email. An endpoint deleted later leaves NULL: email again.
    webhook_endpoint_id: Mapped[uuid.UUID | None] = mapped_column(
        UUID, ForeignKey("webhook_endpoints.id", ondelete="SET NULL")
    )

    __table_args__ = (
        CheckConstraint(_in("status", [s.value for s in ReminderStatus]), name="status"),
        CheckConstraint(_in("dst_nonexistent", ["shift", "skip"]), name="dst_nonexistent"),
        CheckConstraint(_in("dst_ambiguous", ["first", "last", "both"]), name="dst_ambiguous"),
        CheckConstraint(_in("misfire_policy", ["latest", "skip", "all"]), name="misfire_policy"),
        CheckConstraint("max_lateness_s >= 0", name="max_lateness_s"),
        CheckConstraint("version >= 1", name="version"),
        CheckConstraint("char_length(title) BETWEEN 1 AND 1000", name="title_length"),
        CheckConstraint(
            "status NOT IN ('pending', 'claimed') OR next_run_utc IS NOT NULL",
            name="due_needs_next_run",
        ),
        CheckConstraint(
            "(status = 'claimed') = (claimed_by IS NOT NULL AND claimed_at IS NOT NULL)",
            name="claim_fields",
        ),
        # The create's idempotency key, unique per user; partial, so that a reminder
        # without a key (most) costs no entry in it on each claim and completion
        # (migration 0017; the creates' ON CONFLICT names the predicate).
        Index(
            "uq_reminders_user_id_client_request_id",
            "user_id",
            "client_request_id",
            unique=True,
            postgresql_where=text("client_request_id IS NOT NULL"),
        ),
        # The coordinator's claim scans only due pending rows (docs/design.md,
        # "Data model").
        Index(
            "ix_reminders_due",
            "next_run_utc",
            postgresql_where=text("status = 'pending'"),
        ),
        Index("ix_reminders_user_created", "user_id", "created_at", "id"),
        Index(
            "ix_reminders_snoozed_from",
            "snoozed_from",
            postgresql_where=text("snoozed_from IS NOT NULL"),
        ),
        Index("ix_reminders_claimed", "claimed_at", postgresql_where=text("status = 'claimed'")),
        # Paused by a suppression: found by address (removal) and by last check (the
        # maintenance workload's recheck of the profile address).
        Index(
            "ix_reminders_suppressed_address",
            "suppressed_address",
            postgresql_where=text("status = 'paused' AND suppressed_address IS NOT NULL"),
        ),
        Index(
            "ix_reminders_suppression_check",
            "suppression_checked_at",
            postgresql_where=text("status = 'paused' AND suppressed_address IS NOT NULL"),
        ),
    )


class Outbox(Base):
    """A claimed occurrence waiting to be published to the queue (transactional outbox)."""

    __tablename__ = "outbox"

    id: Mapped[uuid.UUID] = mapped_column(UUID, primary_key=True, server_default=UUIDV7)
    payload: Mapped[dict[str, Any]] = mapped_column(JSONB)
    published_at: Mapped[datetime | None] = mapped_column(DateTime(timezone=True))
    created_at: Mapped[datetime] = mapped_column(DateTime(timezone=True), server_default=NOW)

    __table_args__ = (
        Index(
            "ix_outbox_unpublished",
            "created_at",
            postgresql_where=text("published_at IS NULL"),
        ),
    )


class DeliveryLog(Base):
    """One row per occurrence (reminder_id, run_time_utc): the record of what was sent.

    Partitioned by RANGE (run_time_utc), one partition per ISO week plus a default
    partition (migration 0005; made ahead and dropped by
    `coordinator.maintenance.retention`), so the primary key holds the partition key too:
    (id, run_time_utc). A statement that knows
    the row's run_time_utc names it, so that only one partition is searched.
    """

    __tablename__ = "delivery_log"

    id: Mapped[uuid.UUID] = mapped_column(UUID, primary_key=True, server_default=UUIDV7)
    # Not a foreign key (migration 0016, docs/design.md "Data model"): every writer reads
    # the reminder in its transaction; a cell move deletes a user's delivery rows itself.
    reminder_id: Mapped[uuid.UUID] = mapped_column(UUID)
    user_id: Mapped[str] = mapped_column(Text)
    run_time_utc: Mapped[datetime] = mapped_column(DateTime(timezone=True), primary_key=True)
    status: Mapped[str] = mapped_column(Text)
    provider: Mapped[str | None] = mapped_column(Text)
    provider_message_id: Mapped[str | None] = mapped_column(Text)
    recipient: Mapped[str | None] = mapped_column(Text)
    attempt_count: Mapped[int] = mapped_column(Integer, server_default=text("0"))
    error: Mapped[str | None] = mapped_column(Text)
    # Lease: only the holder of lease_token may complete a `sending` row (fencing token).
    locked_at: Mapped[datetime | None] = mapped_column(DateTime(timezone=True))
    lease_token: Mapped[uuid.UUID | None] = mapped_column(UUID)
    sent_at: Mapped[datetime | None] = mapped_column(DateTime(timezone=True))
    # The end of the quiet hours the occurrence was held for (None: not held).
    held_until: Mapped[datetime | None] = mapped_column(DateTime(timezone=True))
    created_at: Mapped[datetime] = mapped_column(DateTime(timezone=True), server_default=NOW)
    updated_at: Mapped[datetime] = mapped_column(DateTime(timezone=True), server_default=NOW)

    __table_args__ = (
        UniqueConstraint("reminder_id", "run_time_utc"),
        CheckConstraint(_in("status", [s.value for s in DeliveryStatus]), name="status"),
        CheckConstraint("status <> 'sent' OR sent_at IS NOT NULL", name="sent_has_sent_at"),
        CheckConstraint("attempt_count >= 0", name="attempt_count"),
        Index(
            "ix_delivery_log_sending",
            "locked_at",
            postgresql_where=text("status = 'sending'"),
        ),
        # Looked up by a webhook's event (delivery_get_by_provider_message), which always
        # names a message id: rows without one are not indexed (migration 0016).
        Index(
            "ix_delivery_log_provider_message",
            "provider",
            "provider_message_id",
            postgresql_where=text("provider_message_id IS NOT NULL"),
        ),
        {"postgresql_partition_by": "RANGE (run_time_utc)"},
    )


class QueueMessage(Base):
    """A message of the PostgreSQL queue backend, with SQS semantics.

    `visible_at` is the visibility timeout; `receive_count` counts receives; a message
    received more than the maximum receive count is moved to the dead-letter queue
    (`dead_lettered`), as SQS does with a redrive policy.
    """

    __tablename__ = "queue_messages"

    id: Mapped[int] = mapped_column(BigInteger, primary_key=True, autoincrement=True)
    queue_name: Mapped[str] = mapped_column(Text)
    body: Mapped[dict[str, Any]] = mapped_column(JSONB)
    visible_at: Mapped[datetime] = mapped_column(DateTime(timezone=True))
    receive_count: Mapped[int] = mapped_column(Integer, server_default=text("0"))
    # The token of the current receive's handle ("<id>.<token>"): statements find a
    # message by its id and check the token, so it has no index (migration 0018).
    receipt_handle: Mapped[uuid.UUID | None] = mapped_column(UUID)
    dead_lettered: Mapped[bool] = mapped_column(Boolean, server_default=text("false"))
    dead_lettered_at: Mapped[datetime | None] = mapped_column(DateTime(timezone=True))
    # When the maintenance workload recorded the dead letter's occurrence as `failed`.
    dead_letter_recorded_at: Mapped[datetime | None] = mapped_column(DateTime(timezone=True))
    created_at: Mapped[datetime] = mapped_column(DateTime(timezone=True), server_default=NOW)

    __table_args__ = (
        CheckConstraint("receive_count >= 0", name="receive_count"),
        Index(
            "ix_queue_messages_visible",
            "queue_name",
            "visible_at",
            postgresql_where=text("NOT dead_lettered"),
        ),
        Index(
            "ix_queue_messages_dlq",
            "queue_name",
            "dead_lettered_at",
            postgresql_where=text("dead_lettered"),
        ),
        Index(
            "ix_queue_messages_dlq_unrecorded",
            "queue_name",
            "dead_lettered_at",
            postgresql_where=text("dead_lettered AND dead_letter_recorded_at IS NULL"),
        ),
    )


class Suppression(Base):
    """An address that is never mailed again (docs/design.md, "Data model",
    "Suppression list"): a hard bounce or a complaint put it here; `reminders suppressions
    remove` takes it off."""

    __tablename__ = "suppressions"

    # Case-folded (reminder_core.domain.suppression.normalize_address).
    email: Mapped[str] = mapped_column(Text, primary_key=True)
    reason: Mapped[str] = mapped_column(Text)
    provider: Mapped[str | None] = mapped_column(Text)
    source_event_id: Mapped[str | None] = mapped_column(Text)  # webhook_events.event_id
    detail: Mapped[str | None] = mapped_column(Text)  # the provider's own words
    created_at: Mapped[datetime] = mapped_column(DateTime(timezone=True), server_default=NOW)

    __table_args__ = (
        CheckConstraint(_in("reason", [r.value for r in SuppressionReason]), name="reason"),
        CheckConstraint("email <> ''", name="email_not_empty"),
    )


class WebhookEventRecord(Base):
    """One verified provider event (bounce, complaint), stored once per provider event
    id: a replay finds its row and changes nothing. `outcome` says what applying it did."""

    __tablename__ = "webhook_events"

    id: Mapped[uuid.UUID] = mapped_column(UUID, primary_key=True, server_default=UUIDV7)
    provider: Mapped[str] = mapped_column(Text)
    event_id: Mapped[str] = mapped_column(Text)
    kind: Mapped[str] = mapped_column(Text)
    provider_message_id: Mapped[str | None] = mapped_column(Text)
    recipient: Mapped[str] = mapped_column(Text)
    reason: Mapped[str] = mapped_column(Text)
    occurred_at: Mapped[datetime | None] = mapped_column(DateTime(timezone=True))
    received_at: Mapped[datetime] = mapped_column(DateTime(timezone=True))
    raw_body: Mapped[str] = mapped_column(Text)
    outcome: Mapped[str] = mapped_column(Text)
    # The delivery it was about (no foreign key: delivery rows are dropped by retention).
    delivery_id: Mapped[uuid.UUID | None] = mapped_column(UUID)
    applied_at: Mapped[datetime | None] = mapped_column(DateTime(timezone=True))

    __table_args__ = (
        UniqueConstraint("provider", "event_id"),
        CheckConstraint(_in("kind", [k.value for k in FeedbackKind]), name="kind"),
        CheckConstraint(
            _in("outcome", [o.value for o in ApplyOutcome if o is not ApplyOutcome.DUPLICATE]),
            name="outcome",
        ),
        CheckConstraint(
            "(outcome = 'unmatched') = (delivery_id IS NULL)", name="matched_has_delivery"
        ),
        # Unmatched events are matched again by the maintenance workload for a while (the
        # webhook may beat the sender's commit of the provider message id).
        Index(
            "ix_webhook_events_unmatched",
            "received_at",
            postgresql_where=text("outcome = 'unmatched'"),
        ),
    )


class WorkerHeartbeat(Base):
    """One workload loop of one running process (docs/design.md, "Workers"): written
    every WORKER_HEARTBEAT_INTERVAL_S by the process (`reminder_core.worker.registry`),
    marked stopped at a clean exit, read by `reminders status` to tell whether every role
    has a live worker. `id` is made by the process at start, one per loop."""

    __tablename__ = "worker_heartbeats"

    id: Mapped[uuid.UUID] = mapped_column(UUID, primary_key=True)
    # The loop's service name: coordinator, outbox_sweeper, sender, maintenance.
    role: Mapped[str] = mapped_column(Text)
    host: Mapped[str] = mapped_column(Text)
    pid: Mapped[int] = mapped_column(Integer)
    # The process's command (`reminders sender`, `reminders dev`) and package version.
    process: Mapped[str] = mapped_column(Text)
    version: Mapped[str] = mapped_column(Text)
    started_at: Mapped[datetime] = mapped_column(DateTime(timezone=True))
    # The process was alive at this instant (each heartbeat write sets it).
    last_seen_at: Mapped[datetime] = mapped_column(DateTime(timezone=True))
    # The loop's last finished tick (None: none yet); a live process whose loop has not
    # ticked for long is stuck.
    last_tick_at: Mapped[datetime | None] = mapped_column(DateTime(timezone=True))
    consecutive_failures: Mapped[int] = mapped_column(Integer, server_default=text("0"))
    stopped_at: Mapped[datetime | None] = mapped_column(DateTime(timezone=True))

    __table_args__ = (
        CheckConstraint("role <> ''", name="role_not_empty"),
        CheckConstraint("consecutive_failures >= 0", name="consecutive_failures"),
        Index("ix_worker_heartbeats_role_last_seen_at", "role", "last_seen_at"),
    )


class RateLimit(Base):
    """The request budget of one user of the /v1 API (docs/operations.md, "Fair
    limits"): GCRA's theoretical arrival time, written by `reminder_core.store.rate_limits`
    from every API process, so they share one budget."""

    __tablename__ = "rate_limits"

    # The token's subject (`sub`).
    user_id: Mapped[str] = mapped_column(Text, primary_key=True)
    # When the user's budget is whole again (GCRA's TAT); in the past: it is whole now.
    tat: Mapped[datetime] = mapped_column(DateTime(timezone=True))

    __table_args__ = (CheckConstraint("user_id <> ''", name="user_id_not_empty"),)


class LiveReminderBound(Base):
    """An upper bound of one user's live (pending, claimed or paused) reminders
    (docs/operations.md, "Fair limits"): raised by every create or change that makes one
    live, never lowered when one stops being live, recounted exactly only when it passes
    QUOTA_LIVE_REMINDERS (`reminder_core.quotas`). Its row lock serialises one user's
    quota checks."""

    __tablename__ = "live_reminder_bounds"

    user_id: Mapped[str] = mapped_column(Text, primary_key=True)
    # At least the user's live reminders once the transactions raising it commit.
    bound: Mapped[int] = mapped_column(Integer)

    __table_args__ = (
        CheckConstraint("user_id <> ''", name="user_id_not_empty"),
        CheckConstraint("bound >= 0", name="bound_not_negative"),
    )


class CalendarFeed(Base):
    """A user's iCalendar feed (docs/api.md, "Calendar feed and import"; issue 17): the
    SHA-256 of the secret in its URL, written by `reminder_core.store.calendar_feeds`.
    Rotating replaces the digest; revoking deletes the row."""

    __tablename__ = "calendar_feeds"

    # The token's subject (`sub`): one feed per user.
    user_id: Mapped[str] = mapped_column(Text, primary_key=True)
    # SHA-256 of the URL's secret (the secret itself is never stored).
    secret_sha256: Mapped[bytes] = mapped_column(BYTEA, unique=True)
    # When this secret was made (a rotation sets it again).
    created_at: Mapped[datetime] = mapped_column(DateTime(timezone=True), server_default=NOW)

    __table_args__ = (
        CheckConstraint("octet_length(secret_sha256) = 32", name="secret_sha256_length"),
    )


class WebhookEndpoint(Base):
    """A URL a user registered for the webhook channel, and its Standard Webhooks
    signing secret (`whsec_<base64>`), written by `reminder_core.store.webhook_endpoints`
    (docs/design.md, "Webhook channel")."""

    __tablename__ = "webhook_endpoints"

    id: Mapped[uuid.UUID] = mapped_column(UUID, primary_key=True, server_default=UUIDV7)
    user_id: Mapped[str] = mapped_column(Text)
    url: Mapped[str] = mapped_column(Text)
    secret: Mapped[str] = mapped_column(Text)
    created_at: Mapped[datetime] = mapped_column(DateTime(timezone=True), server_default=NOW)

    __table_args__ = (
        CheckConstraint("char_length(url) <= 2000", name="url_length"),
        Index("ix_webhook_endpoints_user", "user_id", "created_at"),
    )


class CellAssignment(Base):
    """Which cell a user lives in (docs/design.md, "Cells"; issue 18): the cell
    directory, read by the API (cached) and written when a user is first seen or moved.
    Only the directory's database (DIRECTORY_DATABASE_URL, else the first cell's) holds
    rows; every cell has the table."""

    __tablename__ = "cell_assignments"

    user_id: Mapped[str] = mapped_column(Text, primary_key=True)
    cell: Mapped[str] = mapped_column(Text)
    assigned_at: Mapped[datetime] = mapped_column(DateTime(timezone=True))

    __table_args__ = (CheckConstraint("user_id <> ''", name="user_id_not_empty"),)


class CellLoad(Base):
    """How many users the directory has assigned to each cell (for "least loaded by
    weight"), kept beside `cell_assignments` in the same transaction: no count(*) over the
    directory per new user."""

    __tablename__ = "cell_loads"

    cell: Mapped[str] = mapped_column(Text, primary_key=True)
    users: Mapped[int] = mapped_column(BigInteger, server_default=text("0"))


class CellMove(Base):
    """A user being moved between cells (docs/design.md, "Moving a user between cells";
    migration 0014): present in both cells' databases while `reminders cells move` runs.
    An API write of the user reads it (after the user's shared move lock) and answers 503
    instead of writing; maintenance does not resume their suppression-paused reminders."""

    __tablename__ = "cell_moves"

    user_id: Mapped[str] = mapped_column(Text, primary_key=True)
    from_cell: Mapped[str] = mapped_column(Text)
    to_cell: Mapped[str] = mapped_column(Text)
    started_at: Mapped[datetime] = mapped_column(DateTime(timezone=True))

    __table_args__ = (CheckConstraint("from_cell <> to_cell", name="two_cells"),)
