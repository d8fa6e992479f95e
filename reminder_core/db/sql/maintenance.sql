-- The maintenance workload: nothing stays `claimed` or `sending` forever (docs/design.md,
-- "Every occurrence ends").

-- name: reap_claimed
-- Re-drive reminders claimed longer ago than :cutoff (their message was lost, or their
-- sender died for good): back to pending with the same next_run_utc. The unique delivery
-- row keeps a second delivery of the same occurrence from being sent twice.
WITH stuck AS (
    SELECT id
    FROM reminders
    WHERE status = 'claimed' AND claimed_at < :cutoff
    ORDER BY claimed_at
    LIMIT :limit
    FOR UPDATE SKIP LOCKED
)
UPDATE reminders AS r
SET status = 'pending', claimed_by = NULL, claimed_at = NULL, updated_at = :now
FROM stuck
WHERE r.id = stuck.id
RETURNING r.id, r.next_run_utc;

-- name: abandon_sending
-- `sending` rows nobody holds (lease expired or released long ago) whose reminder will
-- not come back to them (cancelled, finished, or moved past them): recorded `failed`,
-- or `sent` when the provider's feedback reported it accepted the email
-- (provider_message_id written by webhooks.apply.apply_evidence).
-- Rows that their reminder still points at are left: the next claim takes them over,
-- a paused reminder's included (it is claimed again at that occurrence on resume).
WITH stale AS (
    SELECT d.id, d.run_time_utc
    FROM delivery_log AS d
    JOIN reminders AS r ON r.id = d.reminder_id
    WHERE d.status = 'sending'
      AND (d.locked_at IS NULL OR d.locked_at < :cutoff)
      AND d.updated_at < :cutoff
      AND (r.status NOT IN ('pending', 'claimed', 'paused')
           OR r.next_run_utc IS NULL
           OR r.next_run_utc > d.run_time_utc)
    ORDER BY d.updated_at
    LIMIT :limit
    FOR UPDATE OF d SKIP LOCKED
)
UPDATE delivery_log AS d
SET status = CASE WHEN d.provider_message_id IS NULL THEN 'failed' ELSE 'sent' END,
    error = CASE WHEN d.provider_message_id IS NULL
                 THEN coalesce(d.error || '; ', '') || 'abandoned: no worker finished it'
                 ELSE d.error END,
    locked_at = NULL,
    lease_token = NULL,
    updated_at = :now
FROM stale
WHERE d.id = stale.id AND d.run_time_utc = stale.run_time_utc
RETURNING d.id, d.reminder_id, d.run_time_utc, d.provider, d.attempt_count, d.status;

-- name: delivery_held_live
-- A dead letter's occurrence (or a later one a sender chose for it under the misfire
-- policy) that a worker is still sending under a live lease: the dead letter is only a
-- duplicate of the message that worker holds, so nothing is recorded yet (the row is
-- locked so that the check and the recording agree).
SELECT id
FROM delivery_log
WHERE reminder_id = :reminder_id AND run_time_utc >= :run_time_utc
  AND status = 'sending' AND locked_at > :lease_cutoff
FOR UPDATE;

-- name: fail_dead_letter
-- A dead-lettered occurrence (and any later occurrence of the same reminder a sender had
-- chosen for it under the misfire policy) ends `failed`.
INSERT INTO delivery_log AS d
    (reminder_id, user_id, run_time_utc, status, error, created_at, updated_at)
VALUES (:reminder_id, :user_id, :run_time_utc, 'failed', :error, :now, :now)
ON CONFLICT (reminder_id, run_time_utc) DO UPDATE
SET status = 'failed',
    error = coalesce(d.error || '; ', '') || EXCLUDED.error,
    locked_at = NULL,
    lease_token = NULL,
    updated_at = EXCLUDED.updated_at
WHERE d.status = 'sending';

-- name: fail_chosen_after
UPDATE delivery_log
SET status = 'failed',
    error = coalesce(error || '; ', '') || :error,
    locked_at = NULL,
    lease_token = NULL,
    updated_at = :now
WHERE reminder_id = :reminder_id AND status = 'sending' AND run_time_utc > :run_time_utc
RETURNING run_time_utc;

-- name: delivery_for_replay
-- Before a dead letter is replayed: an occurrence already delivered stays as it is (not
-- sent again); a failed or abandoned one becomes `sending` with no lease, for the sender.
-- A row a sender holds under a live lease is left to it: the replayed message waits out
-- that lease and then finds the outcome (clearing it let a second sender call the
-- provider for the same key at the same time).
UPDATE delivery_log
SET status = 'sending',
    locked_at = NULL,
    lease_token = NULL,
    error = coalesce(error || '; ', '') || 'replayed from the dead-letter queue',
    updated_at = :now
WHERE reminder_id = :reminder_id AND run_time_utc = :run_time_utc
  AND (status = 'failed'
       OR (status = 'sending' AND (locked_at IS NULL OR locked_at <= :lease_cutoff)));

-- name: reminder_replayed_sent
-- A one-time reminder that failed through the dead-letter queue and was then replayed
-- and sent is complete after all.
UPDATE reminders
SET status = 'completed', last_error = NULL, updated_at = :now
WHERE id = :id AND rrule IS NULL AND status = 'failed';
