-- Backlog of the scheduler as the maintenance gauges and `reminders status` see it
-- (docs/design.md, "Metrics"). Each subquery runs on a partial index: ix_reminders_due
-- (pending), ix_reminders_claimed (claimed, a small in-flight set),
-- ix_outbox_unpublished.

-- name: backlog
-- oldest_due: the oldest next_run_utc of a due occurrence not yet delivered (the
-- reminder is pending, or claimed and waiting in the outbox, the queue or a sender);
-- oldest_pending: the same among reminders the coordinator has not claimed yet.
SELECT
    LEAST(p.oldest, c.oldest) AS oldest_due,
    p.oldest AS oldest_pending,
    p.due AS due_backlog,
    o.unpublished AS outbox_unpublished,
    o.oldest AS outbox_oldest_unpublished
FROM
    (SELECT min(next_run_utc) AS oldest, count(*) AS due
     FROM reminders WHERE status = 'pending' AND next_run_utc <= :now) AS p,
    (SELECT min(next_run_utc) AS oldest
     FROM reminders WHERE status = 'claimed' AND next_run_utc <= :now) AS c,
    (SELECT min(created_at) AS oldest, count(*) AS unpublished
     FROM outbox WHERE published_at IS NULL) AS o;

-- name: delivery_failures_since
-- Occurrences that ended failed, bounced, complained or suppressed since :since (the
-- row's last change), per status.
SELECT status, count(*) AS n
FROM delivery_log
WHERE status IN ('failed', 'bounced', 'complained', 'suppressed') AND updated_at >= :since
GROUP BY status;

-- name: delivery_lag_p99_since
-- The 99th percentile of sent_at - run_time_utc (seconds) of the occurrences sent since
-- :since, and how many there were (p99 is NULL when none).
SELECT
    percentile_cont(0.99) WITHIN GROUP (
        ORDER BY CAST(extract(epoch FROM sent_at - run_time_utc) AS double precision)
    ) AS p99,
    count(*) AS n
FROM delivery_log
WHERE status = 'sent' AND sent_at >= :since;
