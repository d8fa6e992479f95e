-- Statements on `suppressions`, the suppression list (docs/design.md, "Suppression
-- list"). Typed wrappers: reminder_core/store/suppressions.py.

-- name: suppression_add
-- Put an address on the suppression list; an existing entry (and its reason) stays.
INSERT INTO suppressions (email, reason, provider, source_event_id, detail, created_at)
VALUES (:email, :reason, :provider, :source_event_id, :detail, :now)
ON CONFLICT (email) DO NOTHING
RETURNING email;

-- name: suppression_list_among
-- Which of these (case-folded) addresses are suppressed: one statement per sender batch.
SELECT email, reason
FROM suppressions
WHERE email IN (SELECT jsonb_array_elements_text(CAST(:emails AS jsonb)));

-- name: suppression_list_newest
-- The suppression list, newest first, with how many reminders each entry holds paused.
SELECT s.email, s.reason, s.provider, s.source_event_id, s.detail, s.created_at,
       (SELECT count(*) FROM reminders AS r
        WHERE r.status = 'paused' AND r.suppressed_address = s.email) AS paused
FROM suppressions AS s
ORDER BY s.created_at DESC, s.email
LIMIT :limit;

-- name: suppression_remove
DELETE FROM suppressions WHERE email = :email RETURNING email;
