"""initial schema

Revision ID: 0001
Revises:
Create Date: 2026-12-01 00:21:07.250815

Tables of docs/design.md, "Data model", for the walking skeleton: reminders, outbox,
delivery_log and the PostgreSQL queue's queue_messages; plus reminders_uuidv7(), which
makes time-ordered ids (RFC 9562 §5.7) on PostgreSQL 15-17, which lack a built-in
uuidv7().
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects import postgresql

revision: str = "0001"
down_revision: str | None = None
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


# RFC 9562 §5.7 UUIDv7: 48-bit big-endian Unix time in milliseconds, version 7 in bits
# 48-51, variant 10 in bits 64-65, the rest random. We start from a random v4 UUID (which
# already carries variant 10 and version 0100), overlay the timestamp on its first six
# bytes and turn version 0100 into 0111 by setting two more bits of byte 6.
UUIDV7_FUNCTION = """
CREATE OR REPLACE FUNCTION reminders_uuidv7() RETURNS uuid
LANGUAGE sql VOLATILE PARALLEL SAFE AS $$
    SELECT encode(
        set_bit(set_bit(
            overlay(uuid_send(gen_random_uuid())
                    PLACING substring(int8send((extract(epoch FROM clock_timestamp()) * 1000)::bigint)
                                      FROM 3)
                    FROM 1 FOR 6),
            52, 1), 53, 1),
        'hex')::uuid
$$
"""


def upgrade() -> None:
    op.execute(UUIDV7_FUNCTION)
    op.create_table(
        "outbox",
        sa.Column("id", sa.UUID(), server_default=sa.text("reminders_uuidv7()"), nullable=False),
        sa.Column("payload", postgresql.JSONB(astext_type=sa.Text()), nullable=False),
        sa.Column("published_at", sa.DateTime(timezone=True), nullable=True),
        sa.Column(
            "created_at",
            sa.DateTime(timezone=True),
            server_default=sa.text("now()"),
            nullable=False,
        ),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_outbox")),
    )
    op.create_index(
        "ix_outbox_unpublished",
        "outbox",
        ["created_at"],
        unique=False,
        postgresql_where=sa.text("published_at IS NULL"),
    )
    op.create_table(
        "queue_messages",
        sa.Column("id", sa.BigInteger(), autoincrement=True, nullable=False),
        sa.Column("queue_name", sa.Text(), nullable=False),
        sa.Column("body", postgresql.JSONB(astext_type=sa.Text()), nullable=False),
        sa.Column("visible_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("receive_count", sa.Integer(), server_default=sa.text("0"), nullable=False),
        sa.Column("receipt_handle", sa.UUID(), nullable=True),
        sa.Column("dead_lettered", sa.Boolean(), server_default=sa.text("false"), nullable=False),
        sa.Column("dead_lettered_at", sa.DateTime(timezone=True), nullable=True),
        sa.Column(
            "created_at",
            sa.DateTime(timezone=True),
            server_default=sa.text("now()"),
            nullable=False,
        ),
        sa.CheckConstraint("receive_count >= 0", name=op.f("ck_queue_messages_receive_count")),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_queue_messages")),
    )
    op.create_index(
        "ix_queue_messages_dlq",
        "queue_messages",
        ["queue_name", "dead_lettered_at"],
        unique=False,
        postgresql_where=sa.text("dead_lettered"),
    )
    op.create_index(
        "ix_queue_messages_visible",
        "queue_messages",
        ["queue_name", "visible_at"],
        unique=False,
        postgresql_where=sa.text("NOT dead_lettered"),
    )
    op.create_table(
        "reminders",
        sa.Column("id", sa.UUID(), server_default=sa.text("reminders_uuidv7()"), nullable=False),
        sa.Column("user_id", sa.Text(), nullable=False),
        sa.Column("title", sa.Text(), nullable=False),
        sa.Column("body", sa.Text(), nullable=True),
        sa.Column("template", sa.Text(), server_default="reminder", nullable=False),
        sa.Column("start_local", postgresql.TIMESTAMP(), nullable=False),
        sa.Column("all_day", sa.Boolean(), server_default=sa.text("false"), nullable=False),
        sa.Column("timezone", sa.Text(), nullable=True),
        sa.Column("rrule", sa.Text(), nullable=True),
        sa.Column(
            "exdates",
            postgresql.ARRAY(postgresql.TIMESTAMP()),
            server_default=sa.text("'{}'"),
            nullable=False,
        ),
        sa.Column("dst_nonexistent", sa.Text(), server_default="shift", nullable=False),
        sa.Column("dst_ambiguous", sa.Text(), server_default="first", nullable=False),
        sa.Column("misfire_policy", sa.Text(), server_default="latest", nullable=False),
        sa.Column("max_lateness_s", sa.Integer(), server_default=sa.text("3600"), nullable=False),
        sa.Column("next_run_utc", sa.DateTime(timezone=True), nullable=True),
        sa.Column("status", sa.Text(), server_default="pending", nullable=False),
        sa.Column("version", sa.Integer(), server_default=sa.text("1"), nullable=False),
        sa.Column("claimed_by", sa.Text(), nullable=True),
        sa.Column("claimed_at", sa.DateTime(timezone=True), nullable=True),
        sa.Column("client_request_id", sa.Text(), nullable=True),
        sa.Column("request_fingerprint", sa.Text(), nullable=True),
        sa.Column("last_error", sa.Text(), nullable=True),
        sa.Column(
            "created_at",
            sa.DateTime(timezone=True),
            server_default=sa.text("now()"),
            nullable=False,
        ),
        sa.Column(
            "updated_at",
            sa.DateTime(timezone=True),
            server_default=sa.text("now()"),
            nullable=False,
        ),
        sa.CheckConstraint(
            "(status = 'claimed') = (claimed_by IS NOT NULL AND claimed_at IS NOT NULL)",
            name=op.f("ck_reminders_claim_fields"),
        ),
        sa.CheckConstraint(
            "dst_ambiguous IN ('first', 'last', 'both')", name=op.f("ck_reminders_dst_ambiguous")
        ),
        sa.CheckConstraint(
            "dst_nonexistent IN ('shift', 'skip')", name=op.f("ck_reminders_dst_nonexistent")
        ),
        sa.CheckConstraint(
            "misfire_policy IN ('latest', 'skip', 'all')", name=op.f("ck_reminders_misfire_policy")
        ),
        sa.CheckConstraint(
            "status IN ('pending', 'claimed', 'completed', 'cancelled', 'paused', 'failed')",
            name=op.f("ck_reminders_status"),
        ),
        sa.CheckConstraint(
            "status NOT IN ('pending', 'claimed') OR next_run_utc IS NOT NULL",
            name=op.f("ck_reminders_due_needs_next_run"),
        ),
        sa.CheckConstraint(
            "char_length(title) BETWEEN 1 AND 1000", name=op.f("ck_reminders_title_length")
        ),
        sa.CheckConstraint("max_lateness_s >= 0", name=op.f("ck_reminders_max_lateness_s")),
        sa.CheckConstraint("version >= 1", name=op.f("ck_reminders_version")),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_reminders")),
        sa.UniqueConstraint(
            "user_id", "client_request_id", name=op.f("uq_reminders_user_id_client_request_id")
        ),
    )
    op.create_index(
        "ix_reminders_claimed",
        "reminders",
        ["claimed_at"],
        unique=False,
        postgresql_where=sa.text("status = 'claimed'"),
    )
    op.create_index(
        "ix_reminders_due",
        "reminders",
        ["next_run_utc"],
        unique=False,
        postgresql_where=sa.text("status = 'pending'"),
    )
    op.create_index(
        "ix_reminders_user_created", "reminders", ["user_id", "created_at", "id"], unique=False
    )
    op.create_table(
        "delivery_log",
        sa.Column("id", sa.UUID(), server_default=sa.text("reminders_uuidv7()"), nullable=False),
        sa.Column("reminder_id", sa.UUID(), nullable=False),
        sa.Column("user_id", sa.Text(), nullable=False),
        sa.Column("run_time_utc", sa.DateTime(timezone=True), nullable=False),
        sa.Column("status", sa.Text(), nullable=False),
        sa.Column("provider", sa.Text(), nullable=True),
        sa.Column("provider_message_id", sa.Text(), nullable=True),
        sa.Column("recipient", sa.Text(), nullable=True),
        sa.Column("attempt_count", sa.Integer(), server_default=sa.text("0"), nullable=False),
        sa.Column("error", sa.Text(), nullable=True),
        sa.Column("locked_at", sa.DateTime(timezone=True), nullable=True),
        sa.Column("lease_token", sa.UUID(), nullable=True),
        sa.Column("sent_at", sa.DateTime(timezone=True), nullable=True),
        sa.Column(
            "created_at",
            sa.DateTime(timezone=True),
            server_default=sa.text("now()"),
            nullable=False,
        ),
        sa.Column(
            "updated_at",
            sa.DateTime(timezone=True),
            server_default=sa.text("now()"),
            nullable=False,
        ),
        sa.CheckConstraint(
            "status <> 'sent' OR sent_at IS NOT NULL", name=op.f("ck_delivery_log_sent_has_sent_at")
        ),
        sa.CheckConstraint(
            "status IN ('sending', 'sent', 'failed', 'bounced', 'complained', 'suppressed', 'cancelled', 'missed')",
            name=op.f("ck_delivery_log_status"),
        ),
        sa.CheckConstraint("attempt_count >= 0", name=op.f("ck_delivery_log_attempt_count")),
        sa.ForeignKeyConstraint(
            ["reminder_id"],
            ["reminders.id"],
            name=op.f("fk_delivery_log_reminder_id_reminders"),
            ondelete="CASCADE",
        ),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_delivery_log")),
        sa.UniqueConstraint(
            "reminder_id", "run_time_utc", name=op.f("uq_delivery_log_reminder_id_run_time_utc")
        ),
    )
    op.create_index(
        "ix_delivery_log_provider_message",
        "delivery_log",
        ["provider", "provider_message_id"],
        unique=False,
    )
    op.create_index(
        "ix_delivery_log_sending",
        "delivery_log",
        ["locked_at"],
        unique=False,
        postgresql_where=sa.text("status = 'sending'"),
    )


def downgrade() -> None:
    op.drop_index(
        "ix_delivery_log_sending",
        table_name="delivery_log",
        postgresql_where=sa.text("status = 'sending'"),
    )
    op.drop_index("ix_delivery_log_provider_message", table_name="delivery_log")
    op.drop_table("delivery_log")
    op.drop_index("ix_reminders_user_created", table_name="reminders")
    op.drop_index(
        "ix_reminders_due", table_name="reminders", postgresql_where=sa.text("status = 'pending'")
    )
    op.drop_index(
        "ix_reminders_claimed",
        table_name="reminders",
        postgresql_where=sa.text("status = 'claimed'"),
    )
    op.drop_table("reminders")
    op.drop_index(
        "ix_queue_messages_visible",
        table_name="queue_messages",
        postgresql_where=sa.text("NOT dead_lettered"),
    )
    op.drop_index(
        "ix_queue_messages_dlq",
        table_name="queue_messages",
        postgresql_where=sa.text("dead_lettered"),
    )
    op.drop_table("queue_messages")
    op.drop_index(
        "ix_outbox_unpublished",
        table_name="outbox",
        postgresql_where=sa.text("published_at IS NULL"),
    )
    op.drop_table("outbox")
    op.execute("DROP FUNCTION IF EXISTS reminders_uuidv7()")
