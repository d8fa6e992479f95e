-- Retention (docs/design.md, "Retention"), run by the maintenance workload
-- (coordinator/retention.py): delivery_log's weekly partitions made ahead and dropped
-- when expired (the DDL is in the functions of migration 0005), expired rows of the other
-- tables deleted in chunks. Pending and in-flight work is never deleted: `sending`
-- delivery rows, unpublished outbox rows, and queue messages (this file never touches
-- queue_messages).

-- name: retention_lock_timeout
-- For the rest of the transaction: give up on a lock after :timeout (text, e.g. '500ms').
SELECT set_config('lock_timeout', :timeout, true);

-- name: delivery_log_partitions
-- The weekly partitions of delivery_log, oldest first: the Monday 00:00 UTC their week
-- starts (from the name delivery_log_pYYYYMMDD; NULL for the default partition) and
-- PostgreSQL's row estimate (-1 when never vacuumed nor analyzed).
SELECT c.relname AS name,
       CAST(to_date(substring(c.relname FROM '^delivery_log_p([0-9]{8})$'), 'YYYYMMDD')
            AS timestamp) AT TIME ZONE 'UTC' AS week_start,
       c.reltuples AS estimated_rows
FROM pg_inherits AS i
JOIN pg_class AS c ON c.oid = i.inhrelid
WHERE i.inhparent = CAST('delivery_log' AS regclass)
ORDER BY week_start NULLS FIRST;

-- name: delivery_log_create_partition
-- NULL: it existed already; else how many rows it took over from the default partition.
SELECT reminders_delivery_log_create_partition(:week_start) AS moved;

-- name: delivery_log_drop_partition
-- 'dropped', 'kept' (holds a `sending` row), 'recent' or 'missing'.
SELECT reminders_delivery_log_drop_partition(:week_start, :cutoff) AS outcome;

-- name: delivery_log_default_delete_expired
-- Rows of the default partition (occurrences no weekly partition covered) older than
-- :cutoff and terminal, at most :limit of them.
DELETE FROM delivery_log_default
WHERE ctid = ANY(ARRAY(
        SELECT ctid FROM delivery_log_default
        WHERE run_time_utc < :cutoff AND status <> 'sending'
        LIMIT :limit))
  AND run_time_utc < :cutoff AND status <> 'sending';

-- name: outbox_delete_published
-- Outbox rows published before :cutoff, at most :limit (unpublished ones never).
DELETE FROM outbox
WHERE ctid = ANY(ARRAY(
        SELECT ctid FROM outbox WHERE published_at < :cutoff LIMIT :limit))
  AND published_at < :cutoff;

-- name: webhook_events_delete_expired
-- Provider events received before :cutoff, at most :limit.
DELETE FROM webhook_events
WHERE ctid = ANY(ARRAY(
        SELECT ctid FROM webhook_events WHERE received_at < :cutoff LIMIT :limit))
  AND received_at < :cutoff;
