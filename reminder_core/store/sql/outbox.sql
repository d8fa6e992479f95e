-- Statements on `outbox`, the transactional outbox (docs/design.md, "Claim and outbox"):
-- rows are inserted by reminder_claim_due (reminders.sql) in the claim's own statement.
-- Typed wrappers: reminder_core/store/outbox.py.

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

-- name: outbox_delete_published
-- Outbox rows published before :cutoff, at most :limit (unpublished ones never).
DELETE FROM outbox
WHERE ctid = ANY(ARRAY(
        SELECT ctid FROM outbox WHERE published_at < :cutoff LIMIT :limit))
  AND published_at < :cutoff;
