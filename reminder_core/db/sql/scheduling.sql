-- Hot paths of the coordinator and the outbox sweeper. Time is always a bind (:now).

-- name: claim_due
-- Claim up to :limit pending reminders due by :horizon and write one outbox row for each,
-- in one statement (so in one transaction): a crash loses neither (docs/design.md,
-- "Claim and outbox"). SKIP LOCKED lets several coordinators claim disjoint sets
-- concurrently.
WITH due AS (
    SELECT id
    FROM reminders
    WHERE status = 'pending' AND next_run_utc <= :horizon
    ORDER BY next_run_utc
    LIMIT :limit
    FOR UPDATE SKIP LOCKED
), claimed AS (
    UPDATE reminders AS r
    SET status = 'claimed', claimed_by = :worker, claimed_at = :now, updated_at = :now
    FROM due
    WHERE r.id = due.id
    RETURNING r.id, r.user_id, r.next_run_utc, r.version
)
INSERT INTO outbox (payload, created_at)
SELECT jsonb_build_object(
           'reminder_id', claimed.id,
           'run_time_utc', to_char(claimed.next_run_utc AT TIME ZONE 'UTC',
                                   'YYYY-MM-DD"T"HH24:MI:SS.US"+00:00"'),
           'version', claimed.version,
           'user_id', claimed.user_id
       ),
       :now
FROM claimed
RETURNING id, payload;

-- name: outbox_mark_published
UPDATE outbox
SET published_at = :now
WHERE id = ANY(CAST(:ids AS uuid[])) AND published_at IS NULL;

-- name: outbox_lock_unpublished
-- Rows the fast path did not publish (crash between commit and publish, queue outage).
SELECT id, payload
FROM outbox
WHERE published_at IS NULL AND created_at <= :older_than
ORDER BY created_at
LIMIT :limit
FOR UPDATE SKIP LOCKED;
