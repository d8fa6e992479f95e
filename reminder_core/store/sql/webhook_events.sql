-- Statements on `webhook_events`, the verified provider events (docs/design.md,
-- "Suppression list"): each stored once, matched to its delivery row now or by the
-- webhook rematcher later. Typed wrappers: reminder_core/store/webhook_events.py.

-- name: webhook_event_insert
-- Store a verified event once: no row back means this provider event id was seen before
-- (a replay), and the caller changes nothing.
INSERT INTO webhook_events
    (provider, event_id, kind, provider_message_id, recipient, reason, occurred_at,
     received_at, raw_body, outcome, delivery_id, applied_at)
VALUES
    (:provider, :event_id, :kind, :provider_message_id, :recipient, :reason, :occurred_at,
     :now, :raw_body, :outcome, :delivery_id, :applied_at)
ON CONFLICT (provider, event_id) DO NOTHING
RETURNING id;

-- name: webhook_event_lock_rematchable
-- Unmatched events received since :since whose message now has a delivery row (the
-- webhook beat the sender's commit of the provider message id).
SELECT e.id, e.provider, e.event_id, e.kind, e.recipient, e.reason,
       d.id AS delivery_id, d.run_time_utc AS delivery_run_time_utc, d.user_id,
       d.status AS delivery_status
FROM webhook_events AS e
JOIN LATERAL (
    SELECT id, run_time_utc, user_id, status
    FROM delivery_log
    WHERE provider = e.provider AND provider_message_id = e.provider_message_id
    ORDER BY created_at DESC
    LIMIT 1
) AS d ON true
WHERE e.outcome = 'unmatched' AND e.received_at >= :since
ORDER BY e.received_at
LIMIT :limit
FOR UPDATE OF e SKIP LOCKED;

-- name: webhook_event_mark_matched
UPDATE webhook_events
SET outcome = :outcome, delivery_id = :delivery_id, applied_at = :now
WHERE id = :id AND outcome = 'unmatched';

-- name: webhook_event_delete_expired
-- Provider events received before :cutoff, at most :limit.
DELETE FROM webhook_events
WHERE ctid = ANY(ARRAY(
        SELECT ctid FROM webhook_events WHERE received_at < :cutoff LIMIT :limit))
  AND received_at < :cutoff;
