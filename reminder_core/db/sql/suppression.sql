-- The suppression list and provider feedback (docs/design.md, "Suppression list";
-- issue 6): bounces and complaints applied to delivery_log, suppressions and reminders; the
-- sender's refusal of suppressed addresses; resuming reminders paused by a suppression.
-- Reminders are always locked in id order (as the sender's advance does), so no two of
-- these deadlock.

-- name: delivery_by_provider_message
-- The delivery a provider event is about (provider message ids are unique per provider;
-- the newest row wins should one ever repeat). One index probe per partition of
-- delivery_log: the message id says nothing of the occurrence's week.
SELECT id, run_time_utc, user_id, status, recipient
FROM delivery_log
WHERE provider = :provider AND provider_message_id = :provider_message_id
ORDER BY created_at DESC
LIMIT 1;

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

-- name: delivery_feedback
-- A `sent` delivery becomes `bounced` or `complained`; so does a `sending` one that
-- carries the provider's evidence of its send (delivery_record_evidence: its sender died
-- or lost the answer, and the bounce came before anyone took it over), its lease ended
-- (a sender still holding it finds its record fenced off and hands the message back).
-- Any other state is left as it is (the first feedback wins; a row that was never sent
-- has no provider message id).
UPDATE delivery_log
SET status = :status, error = :error, locked_at = NULL, lease_token = NULL,
    updated_at = :now
WHERE id = :id AND run_time_utc = :run_time_utc
  AND (status = 'sent' OR (status = 'sending' AND provider_message_id IS NOT NULL))
RETURNING id;

-- name: suppression_add
-- Put an address on the suppression list; an existing entry (and its reason) stays.
INSERT INTO suppressions (email, reason, provider, source_event_id, detail, created_at)
VALUES (:email, :reason, :provider, :source_event_id, :detail, :now)
ON CONFLICT (email) DO NOTHING
RETURNING email;

-- name: reminders_pause_for_suppression
-- Pause the user's live reminders (their recipient is the user's address, which was just
-- suppressed). A claimed one in flight is paused too: the sender re-reads it before
-- sending and records that occurrence `suppressed`.
WITH live AS (
    SELECT id
    FROM reminders
    WHERE user_id = :user_id AND status IN ('pending', 'claimed')
    ORDER BY id
    FOR UPDATE
)
UPDATE reminders AS r
SET status = 'paused',
    claimed_by = NULL,
    claimed_at = NULL,
    paused_reason = :paused_reason,
    suppressed_address = :address,
    suppression_checked_at = NULL,
    updated_at = :now
FROM live
WHERE r.id = live.id
RETURNING r.id;

-- name: suppressed_among
-- Which of these (case-folded) addresses are suppressed: one statement per sender batch.
SELECT email, reason
FROM suppressions
WHERE email IN (SELECT jsonb_array_elements_text(CAST(:emails AS jsonb)));

-- name: reminders_suppressed_at_send
-- The sender refused an occurrence for a suppressed recipient (recorded `suppressed`): a
-- recurring reminder is paused until the address changes or the entry is removed; a
-- one-time one has nothing left to send and fails. Only a reminder still at that
-- occurrence changes (live, or already paused by a suppression).
WITH u AS (
    SELECT *
    FROM jsonb_to_recordset(CAST(:rows AS jsonb))
         AS u(id uuid, run_time_utc timestamptz, address text, paused_reason text, error text)
),
target AS (
    SELECT r.id
    FROM reminders AS r
    JOIN u ON u.id = r.id
    WHERE r.next_run_utc = u.run_time_utc
      AND (r.status IN ('pending', 'claimed')
           OR (r.status = 'paused' AND r.suppressed_address IS NOT NULL))
    ORDER BY r.id
    FOR UPDATE OF r
)
UPDATE reminders AS r
SET status = CASE WHEN r.rrule IS NULL THEN 'failed' ELSE 'paused' END,
    next_run_utc = CASE WHEN r.rrule IS NULL THEN NULL ELSE r.next_run_utc END,
    claimed_by = NULL,
    claimed_at = NULL,
    paused_reason = CASE WHEN r.rrule IS NULL THEN NULL ELSE u.paused_reason END,
    suppressed_address = CASE WHEN r.rrule IS NULL THEN NULL ELSE u.address END,
    last_error = CASE WHEN r.rrule IS NULL THEN u.error ELSE r.last_error END,
    updated_at = :now
FROM target
JOIN u ON u.id = target.id
WHERE r.id = target.id
RETURNING r.id, r.status;

-- name: delivery_suppress_replay
-- A replayed occurrence (dead-letter redrive) whose recipient is suppressed is not sent.
UPDATE delivery_log
SET status = 'suppressed', recipient = :recipient, error = :error, locked_at = NULL,
    lease_token = NULL, updated_at = :now
WHERE reminder_id = :reminder_id AND run_time_utc = :run_time_utc AND status = 'sending'
  AND locked_at IS NULL
RETURNING id;

-- name: suppression_paused_to_check
-- Reminders paused by a suppression, not checked since :checked_before, never-checked
-- first (just paused): the maintenance workload compares their user's current address.
SELECT id, user_id, suppressed_address
FROM reminders
WHERE status = 'paused' AND suppressed_address IS NOT NULL
  AND (suppression_checked_at IS NULL OR suppression_checked_at <= :checked_before)
ORDER BY suppression_checked_at NULLS FIRST, id
LIMIT :limit;

-- name: suppression_paused_by_address
-- Every reminder paused because this (case-folded) address was suppressed.
SELECT id, user_id, suppressed_address
FROM reminders
WHERE status = 'paused' AND suppressed_address = :email
ORDER BY id;

-- name: suppression_lock_paused
-- Reminders about to resume, locked in id order, still paused by a suppression.
SELECT id, user_id, timezone, rrule, next_run_utc, start_local, all_day, exdates,
       dst_nonexistent, dst_ambiguous, suppressed_address
FROM reminders
WHERE id = ANY(CAST(:ids AS uuid[])) AND status = 'paused' AND suppressed_address IS NOT NULL
ORDER BY id
FOR UPDATE;

-- name: reminders_resume_from_suppression
UPDATE reminders AS r
SET status = u.status,
    next_run_utc = u.next_run_utc,
    last_error = coalesce(u.last_error, r.last_error),
    paused_reason = NULL,
    suppressed_address = NULL,
    suppression_checked_at = NULL,
    updated_at = :now
FROM jsonb_to_recordset(CAST(:rows AS jsonb))
     AS u(id uuid, status text, next_run_utc timestamptz, last_error text)
WHERE r.id = u.id AND r.status = 'paused' AND r.suppressed_address IS NOT NULL
RETURNING r.id;

-- name: reminders_repoint_suppression
-- The profile's address changed, but to another suppressed address: wait on that one.
UPDATE reminders AS r
SET suppressed_address = u.address,
    paused_reason = u.paused_reason,
    suppression_checked_at = :now,
    updated_at = :now
FROM jsonb_to_recordset(CAST(:rows AS jsonb)) AS u(id uuid, address text, paused_reason text)
WHERE r.id = u.id AND r.status = 'paused' AND r.suppressed_address IS NOT NULL;

-- name: reminders_suppression_checked
UPDATE reminders
SET suppression_checked_at = :now
WHERE id = ANY(CAST(:ids AS uuid[])) AND status = 'paused' AND suppressed_address IS NOT NULL;

-- name: suppression_list
-- The suppression list, newest first, with how many reminders each entry holds paused.
SELECT s.email, s.reason, s.provider, s.source_event_id, s.detail, s.created_at,
       (SELECT count(*) FROM reminders AS r
        WHERE r.status = 'paused' AND r.suppressed_address = s.email) AS paused
FROM suppressions AS s
ORDER BY s.created_at DESC, s.email
LIMIT :limit;

-- name: suppression_remove
DELETE FROM suppressions WHERE email = :email RETURNING email;

-- name: webhook_events_rematch
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

-- name: webhook_event_matched
UPDATE webhook_events
SET outcome = :outcome, delivery_id = :delivery_id, applied_at = :now
WHERE id = :id AND outcome = 'unmatched';

-- name: delivery_record_evidence
-- A provider's webhook says it accepted (or delivered) the email of one occurrence
-- (webhooks.apply, EventKind.ACCEPTED): write its message id, its provider and the time
-- it accepted the email on the delivery row while that row is still `sending` (its
-- sender has not written the answer yet, or died before it could, or lost it in a
-- timeout), so that whoever takes the row over records it `sent` without calling the
-- provider again (sender/begin.py). A row with its answer, or with evidence already, is
-- left as it is (a replayed event changes nothing). The key names the run time to the
-- second. Returns `found` (delivery rows of that occurrence) and `recorded` (0 or 1).
WITH target AS (
    SELECT d.id, d.run_time_utc
    FROM delivery_log AS d
    WHERE d.reminder_id = :reminder_id
      AND d.run_time_utc >= CAST(:run_time_utc AS timestamptz)
      AND d.run_time_utc < CAST(:run_time_utc AS timestamptz) + interval '1 second'
), recorded AS (
    UPDATE delivery_log AS d
    SET provider = :provider,
        provider_message_id = :provider_message_id,
        -- the provider's time, if it lies between the row's creation (before the first
        -- call; a minute of clock skew allowed) and now; else now
        sent_at = CASE WHEN CAST(:accepted_at AS timestamptz)
                            BETWEEN d.created_at - interval '1 minute'
                                AND CAST(:now AS timestamptz)
                       THEN CAST(:accepted_at AS timestamptz)
                       ELSE CAST(:now AS timestamptz) END,
        recipient = coalesce(d.recipient, nullif(:recipient, '')),
        updated_at = :now
    FROM target AS t
    WHERE d.id = t.id AND d.run_time_utc = t.run_time_utc
      AND d.status = 'sending' AND d.provider_message_id IS NULL
    RETURNING d.id
)
SELECT (SELECT count(*) FROM target) AS found, (SELECT count(*) FROM recorded) AS recorded;
