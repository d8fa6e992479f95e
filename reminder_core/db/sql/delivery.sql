-- The sender's state machine on delivery_log (docs/design.md, "Delivery states",
-- "Exactly once per occurrence"): the unique (reminder_id, run_time_utc) row is inserted
-- as `sending` before the provider call; only the holder of its lease (lease_token, a
-- fencing token) may complete it. delivery_log is partitioned by run_time_utc (migration
-- 0005): a statement that reaches a row by id names its run_time_utc too, so it searches
-- one partition, not all of them.

-- name: reminder_for_send
SELECT id, user_id, title, body, template, timezone, rrule, status, next_run_utc, version,
       start_local, all_day, exdates, dst_nonexistent, dst_ambiguous, misfire_policy,
       max_lateness_s
FROM reminders
WHERE id = :reminder_id;

-- name: delivery_in_flight
-- An occurrence of this reminder already being sent (`sending`) at or after :from_utc:
-- a retry keeps the choice an earlier attempt made.
SELECT run_time_utc
FROM delivery_log
WHERE reminder_id = :reminder_id AND status = 'sending' AND run_time_utc >= :from_utc
ORDER BY run_time_utc DESC
LIMIT 1;

-- name: delivery_status
SELECT status FROM delivery_log WHERE reminder_id = :reminder_id AND run_time_utc = :run_time_utc;

-- name: delivery_lease_left
-- Seconds until the lease on a `sending` row ends (NULL when nobody holds it).
SELECT greatest(0, extract(epoch FROM locked_at + make_interval(secs => :lease_s) - :now))
FROM delivery_log
WHERE reminder_id = :reminder_id AND run_time_utc = :run_time_utc AND status = 'sending';

-- name: delivery_pin_provider
-- Record, while still sending, the provider an ambiguous attempt may have reached (a
-- worker that takes the row over after a crash sends there too, with the same key).
UPDATE delivery_log
SET provider = :provider
WHERE id = :id AND run_time_utc = :run_time_utc AND lease_token = :lease_token
  AND status = 'sending';

-- name: reminder_lock_for_advance
-- Re-read the reminder under a row lock before moving it on, so that the next occurrence
-- is computed from its current schedule, never from a copy read before the send.
SELECT id, user_id, timezone, rrule, status, next_run_utc, start_local, all_day, exdates,
       dst_nonexistent, dst_ambiguous
FROM reminders
WHERE id = :id
FOR UPDATE;

-- name: reminder_finish_occurrence
-- Move the reminder past the occurrence just handled, unless a newer user change
-- (cancel, pause, reschedule) already moved it: never overwrite a newer version
-- (docs/design.md, "A cancel or change wins"). Run after reminder_lock_for_advance in the
-- same transaction.
UPDATE reminders
SET status = :status,
    next_run_utc = :next_run_utc,
    claimed_by = NULL,
    claimed_at = NULL,
    last_error = :last_error,
    updated_at = :now
WHERE id = :id AND next_run_utc = :run_time_utc AND status IN ('claimed', 'pending');

-- name: delivery_cancel_replay
-- A replayed occurrence whose reminder was cancelled or paused meanwhile is not sent.
UPDATE delivery_log
SET status = 'cancelled', error = :error, locked_at = NULL, lease_token = NULL, updated_at = :now
WHERE reminder_id = :reminder_id AND run_time_utc = :run_time_utc AND status = 'sending'
  AND locked_at IS NULL;

-- Set-based forms of the statements above, one statement per received batch. Rows come
-- as one JSON array (:rows, see queries.json_rows) unpacked by jsonb_to_recordset, id
-- sets as one array literal (:ids, queries.id_array). Inserts keep the caller's order (the
-- sender sorts by key), so two senders lock the same rows in the same order.

-- name: reminders_for_send
SELECT id, user_id, title, body, template, timezone, rrule, status, next_run_utc, version,
       start_local, all_day, exdates, dst_nonexistent, dst_ambiguous, misfire_policy,
       max_lateness_s, paused_reason, suppressed_address
FROM reminders
WHERE id = ANY(CAST(:ids AS uuid[]));

-- name: delivery_begin_batch
-- Take each occurrence (keys must be distinct): insert it as `sending`, or take over a
-- `sending` row whose lease expired (its worker died) or was released after a transient
-- error; an occurrence another worker holds under a live lease, or already terminal, is
-- not taken. Returns the rows taken;
-- the lease token tells which request took which row. `provider_message_id`,
-- `sent_at` and `recipient` of a row still `sending` are the provider's evidence that it
-- accepted the email (delivery_record_evidence): the taker records it sent without
-- sending again. `taken_over` is true for a row
-- that was `sending` under a lease that ended without a heartbeat (its sender died,
-- maybe after the provider accepted the email: a possible duplicate), false for a new
-- row or one whose lease was released (its outcome was known). `expired` reads the
-- statement's snapshot, i.e. the rows as they were before this insert.
WITH u AS (
    SELECT *
    FROM ROWS FROM (jsonb_to_recordset(CAST(:rows AS jsonb))
                    AS (reminder_id uuid, user_id text, run_time_utc timestamptz,
                        lease_token uuid))
         WITH ORDINALITY AS u(reminder_id, user_id, run_time_utc, lease_token, n)
), expired AS (
    SELECT d.reminder_id, d.run_time_utc
    FROM delivery_log AS d
    JOIN u ON d.reminder_id = u.reminder_id AND d.run_time_utc = u.run_time_utc
    WHERE d.status = 'sending' AND d.locked_at IS NOT NULL
      AND d.locked_at <= :lease_expired_before
), taken AS (
    INSERT INTO delivery_log AS d
        (reminder_id, user_id, run_time_utc, status, attempt_count, locked_at, lease_token,
         created_at, updated_at)
    SELECT u.reminder_id, u.user_id, u.run_time_utc, 'sending', 0, :now, u.lease_token,
           :now, :now
    FROM u
    ORDER BY u.n
    ON CONFLICT (reminder_id, run_time_utc) DO UPDATE
    SET locked_at = EXCLUDED.locked_at,
        lease_token = EXCLUDED.lease_token,
        updated_at = EXCLUDED.updated_at
    WHERE d.status = 'sending'
      AND (d.locked_at IS NULL OR d.locked_at <= :lease_expired_before)
    RETURNING d.id, d.lease_token, d.provider, d.reminder_id, d.run_time_utc,
              d.provider_message_id, d.sent_at, d.recipient
)
SELECT t.id, t.lease_token, t.provider, t.provider_message_id, t.sent_at, t.recipient,
       EXISTS (SELECT 1 FROM expired AS e
               WHERE e.reminder_id = t.reminder_id AND e.run_time_utc = t.run_time_utc)
           AS taken_over
FROM taken AS t;

-- name: delivery_record_terminal_batch
-- Record occurrences that end without a provider call (cancelled, superseded,
-- suppressed, missed; keys distinct); returns the rows recorded. An occurrence that
-- already has a row keeps it, except that a `cancelled` or `suppressed` outcome ends a
-- `sending` row nobody holds any more (its sender stopped and its lease ended before
-- :lease_expired_before): the reminder no longer wants that
-- occurrence, and no one else would finish the row (the reaper would call it `failed`).
-- Such a row that carries the provider's evidence of its send (delivery_record_evidence)
-- is recorded `sent` instead: the email went out. Returns each row recorded with its
-- status.
INSERT INTO delivery_log
    (reminder_id, user_id, run_time_utc, status, error, created_at, updated_at)
SELECT u.reminder_id, u.user_id, u.run_time_utc, u.status, u.error, :now, :now
FROM ROWS FROM (jsonb_to_recordset(CAST(:rows AS jsonb))
                AS (reminder_id uuid, user_id text, run_time_utc timestamptz, status text,
                    error text))
     WITH ORDINALITY AS u(reminder_id, user_id, run_time_utc, status, error, n)
ORDER BY u.n
ON CONFLICT (reminder_id, run_time_utc) DO UPDATE
SET status = CASE WHEN delivery_log.provider_message_id IS NULL THEN excluded.status
                  ELSE 'sent' END,
    error = CASE WHEN delivery_log.provider_message_id IS NULL
                 THEN excluded.error || '; ended a sending row its sender left (a provider'
                      || ' call it made may have delivered it)'
                 ELSE delivery_log.error END,
    locked_at = NULL,
    lease_token = NULL,
    updated_at = excluded.updated_at
WHERE delivery_log.status = 'sending'
  AND excluded.status IN ('cancelled', 'suppressed')
  AND (delivery_log.locked_at IS NULL OR delivery_log.locked_at < :lease_expired_before)
RETURNING reminder_id, run_time_utc, status;

-- name: delivery_record_evidenced_sent
-- Occurrences of reminders their users paused while the messages were on their way
-- (keys distinct): nothing is recorded for them (they are claimed again on resume),
-- except that a `sending` row nobody holds that carries the provider's evidence of its
-- send (delivery_record_evidence) is recorded `sent`: the email went out, and the
-- resumed reminder then moves past it. Returns the rows recorded.
UPDATE delivery_log AS d
SET status = 'sent', locked_at = NULL, lease_token = NULL, updated_at = :now
FROM jsonb_to_recordset(CAST(:rows AS jsonb)) AS u(reminder_id uuid, run_time_utc timestamptz)
WHERE d.reminder_id = u.reminder_id AND d.run_time_utc = u.run_time_utc
  AND d.status = 'sending' AND d.provider_message_id IS NOT NULL
  AND (d.locked_at IS NULL OR d.locked_at < :lease_expired_before)
RETURNING d.reminder_id, d.run_time_utc;

-- name: delivery_record_batch
-- The streaming completer's flush (sender/complete.py): record the outcome of each send,
-- fenced by its own lease token, in one statement (autocommit: one round trip). A row
-- whose `status` is terminal (`sent`, `failed`) is completed; one whose `status` is
-- `sending` is released (a transient error or a shutdown: the next receive retries it at
-- once) and keeps `provider` when the row names no other, the provider an ambiguous
-- attempt may have reached, where whoever retries must go again.
-- In the same statement, so atomically with its delivery row, a one-time reminder still
-- at that occurrence is finished: `completed` when sent, `failed` with the error when
-- not (the rule of reminder_core.delivery.decide_advance for a reminder without a
-- rule); a newer user change is never overwritten (docs/design.md,
-- "A cancel or change wins"). Recurring reminders are moved on by the sender at the batch
-- end (their next occurrence is computed in Python). Returns one row per delivery row
-- recorded (a row missing from the answer was taken over: its holder records it) with
-- `finished`: its reminder was finished here.
WITH u AS (
    SELECT *
    FROM jsonb_to_recordset(CAST(:rows AS jsonb))
         AS u(id uuid, run_time_utc timestamptz, lease_token uuid, status text,
              sent_at timestamptz, provider text, provider_message_id text, recipient text,
              error text, attempts int, reminder_id uuid, occurrence_utc timestamptz)
), recorded AS (
    UPDATE delivery_log AS d
    SET status = u.status,
        -- a released row keeps the provider's evidence of an acceptance
        -- (delivery_record_evidence): the next sender records it sent from there
        sent_at = CASE WHEN u.status = 'sending' THEN d.sent_at ELSE u.sent_at END,
        provider = coalesce(u.provider, d.provider),
        provider_message_id = CASE WHEN u.status = 'sending' THEN d.provider_message_id
                                   ELSE u.provider_message_id END,
        recipient = coalesce(u.recipient, d.recipient),
        error = u.error,
        attempt_count = d.attempt_count + u.attempts,
        locked_at = NULL,
        lease_token = NULL,
        updated_at = :now
    FROM u
    WHERE d.id = u.id AND d.run_time_utc = u.run_time_utc AND d.lease_token = u.lease_token
      AND d.status = 'sending'
    RETURNING d.id, d.status
), finished AS (
    UPDATE reminders AS r
    SET status = CASE WHEN rec.status = 'sent' THEN 'completed' ELSE 'failed' END,
        next_run_utc = NULL,
        claimed_by = NULL,
        claimed_at = NULL,
        last_error = CASE WHEN rec.status = 'sent' THEN NULL ELSE u.error END,
        updated_at = :now
    FROM recorded AS rec
    JOIN u ON u.id = rec.id
    WHERE rec.status IN ('sent', 'failed')
      AND r.id = u.reminder_id AND r.rrule IS NULL AND r.next_run_utc = u.occurrence_utc
      AND r.status IN ('claimed', 'pending')
    RETURNING u.id
)
SELECT rec.id, EXISTS (SELECT 1 FROM finished AS f WHERE f.id = rec.id) AS finished
FROM recorded AS rec;

-- name: delivery_recorded_at
-- After a flush whose commit was not acknowledged (the connection broke): which of its
-- rows that flush did record. Only the lease holder writes a row's status, and it stamps
-- updated_at with the flush's :now (a provider's evidence, the one other writer, stamps
-- its own), so a row with that stamp and status was recorded by it; the retried flush then leaves those rows alone instead of calling them lost.
SELECT d.id
FROM delivery_log AS d
JOIN jsonb_to_recordset(CAST(:rows AS jsonb))
     AS u(id uuid, run_time_utc timestamptz, status text)
  ON d.id = u.id AND d.run_time_utc = u.run_time_utc
WHERE d.updated_at = :now AND d.status = u.status AND d.lease_token IS NULL;

-- name: delivery_heartbeat_batch
-- Extend the lease of every row a sender holds (with the messages' visibility timeout).
-- A row locked right now is skipped, not waited for: it is being recorded by the
-- sender's own completer (which would otherwise deadlock with this statement: each
-- locks the rows it has updated while it waits for the next, in no common order) or
-- taken by another worker; a row still held gets its extension at the next beat (a
-- lease outlasts two beats).
UPDATE delivery_log AS d
SET locked_at = :now
FROM (
    SELECT h.id, h.run_time_utc
    FROM delivery_log AS h
    JOIN jsonb_to_recordset(CAST(:rows AS jsonb))
         AS u(id uuid, run_time_utc timestamptz, lease_token uuid)
      ON h.id = u.id AND h.run_time_utc = u.run_time_utc AND h.lease_token = u.lease_token
    WHERE h.status = 'sending'
    FOR UPDATE OF h SKIP LOCKED
) AS held
WHERE d.id = held.id AND d.run_time_utc = held.run_time_utc;

-- name: reminders_lock_for_advance
-- reminder_lock_for_advance for many reminders, locked in id order (no deadlock between
-- two senders advancing overlapping sets).
SELECT id, user_id, timezone, rrule, status, next_run_utc, start_local, all_day, exdates,
       dst_nonexistent, dst_ambiguous
FROM reminders
WHERE id = ANY(CAST(:ids AS uuid[]))
ORDER BY id
FOR UPDATE;

-- name: reminders_finish_occurrences
-- reminder_finish_occurrence for many reminders (each id once).
UPDATE reminders AS r
SET status = u.status,
    next_run_utc = u.next_run_utc,
    claimed_by = NULL,
    claimed_at = NULL,
    last_error = u.last_error,
    updated_at = :now
FROM jsonb_to_recordset(CAST(:rows AS jsonb))
     AS u(id uuid, run_time_utc timestamptz, status text, next_run_utc timestamptz,
          last_error text)
WHERE r.id = u.id AND r.next_run_utc = u.run_time_utc AND r.status IN ('claimed', 'pending');

-- name: reminders_send_state
-- What a sender re-reads of its batch's reminders while the batch's sends go on: whether
-- each still wants the occurrence it was claimed for (no lock: the begin transaction
-- took the rows; this only stops sends that have not started).
SELECT id, status, next_run_utc
FROM reminders
WHERE id = ANY(CAST(:ids AS uuid[]));

-- name: delivery_withdraw_batch
-- Un-begin the `sending` rows of occurrences withdrawn during their batch (the reminder
-- was cancelled, paused or rescheduled after the batch read it) that no provider call
-- ever touched (no attempt counted, no provider recorded); fenced by the lease token. A
-- row an earlier attempt touched stays: the caller releases its lease instead.
DELETE FROM delivery_log AS d
USING jsonb_to_recordset(CAST(:rows AS jsonb))
      AS u(id uuid, run_time_utc timestamptz, lease_token uuid)
WHERE d.id = u.id AND d.run_time_utc = u.run_time_utc AND d.lease_token = u.lease_token
  AND d.status = 'sending' AND d.attempt_count = 0 AND d.provider IS NULL;

-- name: delivery_evidence
-- The provider's evidence (delivery_record_evidence) that it accepted this sender's
-- email, read before an in-process retry of an ambiguous failure: if the provider took
-- the request whose answer was lost, it is recorded from this instead of sent again.
SELECT provider, provider_message_id, sent_at
FROM delivery_log
WHERE id = :id AND run_time_utc = :run_time_utc AND lease_token = :lease_token
  AND status = 'sending' AND provider_message_id IS NOT NULL;
