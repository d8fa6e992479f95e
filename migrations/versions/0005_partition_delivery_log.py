"""delivery_log partitioned weekly; autovacuum of the high-churn tables

Revision ID: 0005
Revises: 0004
Create Date: 2026-12-01 05:10:00

Retention (docs/design.md, "Retention"; issue 7): `delivery_log` becomes a table
partitioned by RANGE on `run_time_utc`, one partition per ISO week (Monday 00:00 UTC to
the next Monday, `delivery_log_pYYYYMMDD` after the Monday), so rows older than the
retention period go by dropping whole partitions (no DELETE, no bloat, no vacuum of what
is gone).

- The primary key becomes (id, run_time_utc): a unique constraint on a partitioned table
  must contain the partition key. The unique (reminder_id, run_time_utc) that the sender
  relies on (ON CONFLICT) already does. `id` stays a UUIDv7 made by reminders_uuidv7(),
  unique by construction; nothing references it with a foreign key
  (webhook_events.delivery_id is a plain column on purpose).
- `delivery_log_default` takes any row no weekly partition covers (an occurrence replayed
  long after its week was dropped, or one further ahead than the partitions made ahead),
  so an insert never fails for want of a partition. The maintenance workload keeps it
  small: weekly partitions are made ahead, a new one takes over the rows the default held
  for its week, and expired terminal rows are deleted from it in chunks.
- Two functions hold the only partition DDL, so the migration and the maintenance
  workload make and drop partitions alike (Python binds a date, never builds DDL text):
  reminders_delivery_log_create_partition(week_start) and
  reminders_delivery_log_drop_partition(week_start, cutoff). The caller sets a short
  lock_timeout: both take an ACCESS EXCLUSIVE lock on delivery_log for milliseconds
  (creation also a SHARE ROW EXCLUSIVE lock on reminders, for the foreign key), and a
  timeout only means "again at the next run".
- Every existing row is copied: partitions are made for each week that holds rows, and
  for the current week and the 4 weeks after it (DELIVERY_LOG_PARTITIONS_AHEAD keeps that
  up afterwards). The copy runs inside this migration's transaction, with delivery_log
  locked: stop the senders first on a large table (1M rows took 11 s on the test
  server, PostgreSQL 15, foreign key checks included).
- Autovacuum thresholds of the high-churn tables (see AUTOVACUUM below).
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0005"
down_revision: str | None = "0004"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

WEEKS_AHEAD = 4

COLUMNS = (
    "id, reminder_id, user_id, run_time_utc, status, provider, provider_message_id,"
    " recipient, attempt_count, error, locked_at, lease_token, sent_at, created_at,"
    " updated_at"
)

# Autovacuum by default waits for 20% of a table to be dead tuples (scale factor 0.2) and
# re-analyzes after 10% changed. These tables churn far faster than they grow:
# - reminders: each occurrence updates its row twice (claim, then advance), and the
#   claim scans ix_reminders_due, whose dead entries slow every tick; at 10M reminders
#   20% is 2M dead rows (a day at 1M occurrences/day). 2% vacuums every ~2 h there.
# - outbox: every row is inserted, updated once (published) and deleted by retention a
#   day later: at steady state as many dead rows as live ones. 2%.
# - queue_messages: a queue: insert, one or more updates (receive, visibility), delete;
#   the live set is small and the dead rows are the bulk. A fixed 1000 dead rows (scale
#   factor 0) keeps it vacuumed whatever its size; analyze at 5% + 1000 rows, since the
#   receive plan depends on the backlog's size.
# - delivery_log partitions: each row is inserted `sending` and updated once or more
#   (heartbeat, completion), nearly all in the current week's partition. 5%, analyzed at
#   2% so that run_time_utc statistics follow the week filling up. Set on each partition
#   (a partitioned table takes no storage parameters), by the partition function.
AUTOVACUUM: dict[str, dict[str, str]] = {
    "reminders": {
        "autovacuum_vacuum_scale_factor": "0.02",
        "autovacuum_analyze_scale_factor": "0.02",
    },
    "outbox": {
        "autovacuum_vacuum_scale_factor": "0.02",
        "autovacuum_analyze_scale_factor": "0.05",
    },
    "queue_messages": {
        "autovacuum_vacuum_scale_factor": "0",
        "autovacuum_vacuum_threshold": "1000",
        "autovacuum_analyze_scale_factor": "0.05",
        "autovacuum_analyze_threshold": "1000",
    },
}
PARTITION_OPTIONS = "autovacuum_vacuum_scale_factor = 0.05, autovacuum_analyze_scale_factor = 0.02"

CREATE_PARTITION_FUNCTION = f"""
CREATE OR REPLACE FUNCTION reminders_delivery_log_create_partition(week_start timestamptz)
RETURNS bigint LANGUAGE plpgsql AS $$
-- Make the partition of the ISO week starting at week_start (a Monday 00:00 UTC), moving
-- into it the rows delivery_log_default held for that week. Returns how many rows were
-- moved, or NULL when the partition already existed (nothing changed).
DECLARE
    week_end timestamptz := week_start + interval '168 hours';
    part text := 'delivery_log_p' || to_char(week_start AT TIME ZONE 'UTC', 'YYYYMMDD');
    moved bigint;
BEGIN
    IF week_start IS NULL
       OR date_trunc('week', week_start AT TIME ZONE 'UTC') <> week_start AT TIME ZONE 'UTC' THEN
        RAISE EXCEPTION 'week_start % is not a Monday 00:00 UTC', week_start
            USING ERRCODE = 'invalid_parameter_value';
    END IF;
    -- No other transaction reads or writes delivery_log while rows move out of the
    -- default partition: an update of a moving row would otherwise find it gone.
    LOCK TABLE ONLY delivery_log IN ACCESS EXCLUSIVE MODE;
    IF to_regclass(part) IS NOT NULL THEN
        RETURN NULL;
    END IF;
    EXECUTE format(
        'CREATE TABLE %I (LIKE delivery_log INCLUDING DEFAULTS INCLUDING CONSTRAINTS)'
        ' WITH ({PARTITION_OPTIONS})', part);
    EXECUTE format(
        'WITH m AS (DELETE FROM delivery_log_default'
        ' WHERE run_time_utc >= $1 AND run_time_utc < $2 RETURNING *)'
        ' INSERT INTO %I SELECT * FROM m', part)
        USING week_start, week_end;
    GET DIAGNOSTICS moved = ROW_COUNT;
    -- Attaching builds the partition's indexes and clones the foreign key.
    EXECUTE format(
        'ALTER TABLE delivery_log ATTACH PARTITION %I FOR VALUES FROM (%L) TO (%L)',
        part, week_start, week_end);
    RETURN moved;
END
$$
"""

DROP_PARTITION_FUNCTION = """
CREATE OR REPLACE FUNCTION reminders_delivery_log_drop_partition(
    week_start timestamptz, cutoff timestamptz
) RETURNS text LANGUAGE plpgsql AS $$
-- Drop the partition of the ISO week starting at week_start if its whole range is
-- older than cutoff and it holds no `sending` row (work in flight is never deleted).
-- Returns 'dropped', 'kept' (a `sending` row is in it), 'recent' (its range reaches
-- cutoff) or 'missing' (no such partition of delivery_log).
DECLARE
    part text := 'delivery_log_p' || to_char(week_start AT TIME ZONE 'UTC', 'YYYYMMDD');
    busy boolean;
BEGIN
    IF week_start + interval '168 hours' > cutoff THEN
        RETURN 'recent';
    END IF;
    -- Locked first, as every statement on delivery_log locks it before its partitions:
    -- nothing can insert a `sending` row between the check and the drop.
    LOCK TABLE ONLY delivery_log IN ACCESS EXCLUSIVE MODE;
    IF NOT EXISTS (
        SELECT 1 FROM pg_inherits
        WHERE inhrelid = to_regclass(part) AND inhparent = 'delivery_log'::regclass
    ) THEN
        RETURN 'missing';
    END IF;
    EXECUTE format('SELECT EXISTS (SELECT 1 FROM %I WHERE status = %L)', part, 'sending')
        INTO busy;
    IF busy THEN
        RETURN 'kept';
    END IF;
    EXECUTE format('DROP TABLE %I', part);
    RETURN 'dropped';
END
$$
"""


def _columns() -> list[sa.Column[object]]:
    return [
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
    ]


def _constraints(pk: tuple[str, ...]) -> list[sa.Constraint]:
    return [
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
        sa.PrimaryKeyConstraint(*pk, name=op.f("pk_delivery_log")),
        sa.UniqueConstraint(
            "reminder_id", "run_time_utc", name=op.f("uq_delivery_log_reminder_id_run_time_utc")
        ),
    ]


def _create_delivery_log(pk: tuple[str, ...], **kw: str) -> None:
    op.create_table("delivery_log", *_columns(), *_constraints(pk), **kw)
    op.create_index(
        "ix_delivery_log_provider_message", "delivery_log", ["provider", "provider_message_id"]
    )
    op.create_index(
        "ix_delivery_log_sending",
        "delivery_log",
        ["locked_at"],
        postgresql_where=sa.text("status = 'sending'"),
    )


def _set_aside_old_table() -> None:
    """Rename the current delivery_log and the names its indexes hold in the schema."""
    op.execute("ALTER TABLE delivery_log RENAME TO delivery_log_old")
    for constraint in ("pk_delivery_log", "uq_delivery_log_reminder_id_run_time_utc"):
        op.execute(
            f"ALTER TABLE delivery_log_old RENAME CONSTRAINT {constraint} TO {constraint}_old"
        )
    for index in ("ix_delivery_log_provider_message", "ix_delivery_log_sending"):
        op.execute(f"ALTER INDEX {index} RENAME TO {index}_old")


def upgrade() -> None:
    op.execute(CREATE_PARTITION_FUNCTION)
    op.execute(DROP_PARTITION_FUNCTION)
    _set_aside_old_table()
    _create_delivery_log(("id", "run_time_utc"), postgresql_partition_by="RANGE (run_time_utc)")
    op.execute(
        "CREATE TABLE delivery_log_default PARTITION OF delivery_log DEFAULT"
        f" WITH ({PARTITION_OPTIONS})"
    )
    # Every week that holds rows, then this week and WEEKS_AHEAD more (ISO weeks, UTC).
    op.execute(
        f"""
        SELECT reminders_delivery_log_create_partition(week_start)
        FROM (
            SELECT date_trunc('week', run_time_utc AT TIME ZONE 'UTC') AT TIME ZONE 'UTC'
            FROM delivery_log_old
            UNION
            SELECT (date_trunc('week', now() AT TIME ZONE 'UTC') + make_interval(weeks => n))
                   AT TIME ZONE 'UTC'
            FROM generate_series(0, {WEEKS_AHEAD}) AS n
        ) AS weeks(week_start)
        ORDER BY week_start
        """
    )
    op.execute(f"INSERT INTO delivery_log ({COLUMNS}) SELECT {COLUMNS} FROM delivery_log_old")
    op.execute("DROP TABLE delivery_log_old")
    # Statistics for the planner at once (autovacuum would analyze the partitions later;
    # it never analyzes a partitioned table itself).
    op.execute("ANALYZE delivery_log")
    for table, options in AUTOVACUUM.items():
        settings = ", ".join(f"{k} = {v}" for k, v in options.items())
        op.execute(f"ALTER TABLE {table} SET ({settings})")


def downgrade() -> None:
    for table, options in AUTOVACUUM.items():
        op.execute(f"ALTER TABLE {table} RESET ({', '.join(options)})")
    _set_aside_old_table()
    _create_delivery_log(("id",))
    op.execute(f"INSERT INTO delivery_log ({COLUMNS}) SELECT {COLUMNS} FROM delivery_log_old")
    op.execute("DROP TABLE delivery_log_old")  # with every partition
    op.execute("DROP FUNCTION reminders_delivery_log_drop_partition(timestamptz, timestamptz)")
    op.execute("DROP FUNCTION reminders_delivery_log_create_partition(timestamptz)")
