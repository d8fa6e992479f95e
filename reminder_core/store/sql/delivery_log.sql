-- Statements on `delivery_log`, the sender's state machine (docs/design.md, "Delivery
-- states", "Exactly once per occurrence"): the unique (reminder_id, run_time_utc) row is
-- inserted as `sending` before the provider call; only the holder of its lease
-- (lease_token, a fencing token) may complete it. delivery_log is partitioned by
-- run_time_utc (migration 0005): a statement that reaches a row by id names its
-- run_time_utc too, so it searches one partition, not all of them. Set-based forms
-- (`_many`) take one JSON array (:rows, store/_statements.json_rows) unpacked by
-- json_to_recordset; inserts keep the caller's order (the sender sorts by key), so two
-- senders lock the same rows in the same order. Retention's partition statements call
-- the functions of migration 0005. Typed wrappers: reminder_core/store/delivery_log.py.

-- name: delivery_list_page
-- Up to :limit delivery rows of one reminder and of the reminders its snooze links made
-- (ix_reminders_snoozed_from), newest occurrence first, strictly before :before
-- (run_time_utc is unique per reminder, so it is the cursor; a snooze at the very instant
-- of another occurrence of the reminder would share a page boundary with it).
SELECT reminder_id, run_time_utc, status, provider, attempt_count, error, sent_at,
       held_until, updated_at
FROM delivery_log
WHERE (reminder_id = :reminder_id
       OR reminder_id IN (SELECT id FROM reminders WHERE snoozed_from = :reminder_id))
  AND run_time_utc < :before
ORDER BY run_time_utc DESC
LIMIT :limit;

-- name: delivery_get_in_flight
-- An occurrence of this reminder already being sent (`sending`) at or after :from_utc:
-- a retry keeps the choice an earlier attempt made.
SELECT run_time_utc
FROM delivery_log
WHERE reminder_id = :reminder_id AND status = 'sending' AND run_time_utc >= :from_utc
ORDER BY run_time_utc DESC
LIMIT 1;

-- name: delivery_get_status
SELECT status FROM delivery_log WHERE reminder_id = :reminder_id AND run_time_utc = :run_time_utc;

-- name: delivery_get_lease_left
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

-- name: delivery_cancel_replay
-- A replayed occurrence whose reminder was cancelled or paused meanwhile is not sent.
UPDATE delivery_log
SET status = 'cancelled', error = :error, locked_at = NULL, lease_token = NULL, updated_at = :now
WHERE reminder_id = :reminder_id AND run_time_utc = :run_time_utc AND status = 'sending'
  AND locked_at IS NULL;

-- name: delivery_begin_many
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
    FROM ROWS FROM (json_to_recordset(CAST(:rows AS json))
                    AS (reminder_id uuid, user_id text, run_time_utc timestamptz,
                        lease_token uuid, held_until timestamptz))
         WITH ORDINALITY AS u(reminder_id, user_id, run_time_utc, lease_token, held_until, n)
), expired AS (
    SELECT d.reminder_id, d.run_time_utc
    FROM delivery_log AS d
    JOIN u ON d.reminder_id = u.reminder_id AND d.run_time_utc = u.run_time_utc
    WHERE d.status = 'sending' AND d.locked_at IS NOT NULL
      AND d.locked_at <= :lease_expired_before
), taken AS (
    INSERT INTO delivery_log AS d
        (reminder_id, user_id, run_time_utc, status, attempt_count, locked_at, lease_token,
         held_until, created_at, updated_at)
    SELECT u.reminder_id, u.user_id, u.run_time_utc, 'sending', 0, :now, u.lease_token,
           u.held_until, :now, :now
    FROM u
    ORDER BY u.n
    ON CONFLICT (reminder_id, run_time_utc) DO UPDATE
    SET locked_at = EXCLUDED.locked_at,
        lease_token = EXCLUDED.lease_token,
        held_until = COALESCE(EXCLUDED.held_until, d.held_until),
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

-- name: delivery_record_terminal_many
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
FROM ROWS FROM (json_to_recordset(CAST(:rows AS json))
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

-- name: delivery_record_evidenced_sent_many
-- Occurrences of reminders their users paused while the messages were on their way
-- (keys distinct): nothing is recorded for them (they are claimed again on resume),
-- except that a `sending` row nobody holds that carries the provider's evidence of its
-- send (delivery_record_evidence) is recorded `sent`: the email went out, and the
-- resumed reminder then moves past it. Returns the rows recorded.
UPDATE delivery_log AS d
SET status = 'sent', locked_at = NULL, lease_token = NULL, updated_at = :now
FROM json_to_recordset(CAST(:rows AS json)) AS u(reminder_id uuid, run_time_utc timestamptz)
WHERE d.reminder_id = u.reminder_id AND d.run_time_utc = u.run_time_utc
  AND d.status = 'sending' AND d.provider_message_id IS NOT NULL
  AND (d.locked_at IS NULL OR d.locked_at < :lease_expired_before)
RETURNING d.reminder_id, d.run_time_utc;

-- name: delivery_complete_many
-- The streaming completer's flush (sender/complete.py): record the outcome of each send,
-- fenced by its own lease token, in one statement (autocommit: one round trip). A row
-- whose `status` is terminal (`sent`, `failed`) is completed; one whose `status` is
-- `sending` is released (a transient error or a shutdown: the next receive retries it at
-- once) and keeps `provider` when the row names no other, the provider an ambiguous
-- attempt may have reached, where whoever retries must go again.
-- In the same statement, so atomically with its delivery row, a one-time reminder still
-- at that occurrence is finished: `completed` when sent, `failed` with the error when
-- not (the rule of reminder_core.services.reminders.decide_advance for a reminder
-- without a rule); a newer user change is never overwritten (docs/design.md,
-- "A cancel or change wins"). This is the one reminder transition made outside
-- reminder_core/services/reminders.py (docs/design.md, "Reminder states"). Recurring
-- reminders are moved on by the sender at the batch end (services.reminders.advance_many:
-- their next occurrence is computed in Python). Returns one row per delivery row
-- recorded (a row missing from the answer was taken over: its holder records it) with
-- `finished`: its reminder was finished here.
WITH u AS (
    SELECT *
    FROM json_to_recordset(CAST(:rows AS json))
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
-- include: delivery_finish_one_time

-- name: delivery_record_first_sends_many
-- The streaming completer's flush of first sends without a lease (sender/begin.py,
-- docs/design.md "First sends without a lease"): each occurrence's delivery row is
-- inserted once, with its outcome (`sent` or `failed`; `sending` released, with the
-- provider an ambiguous attempt may have reached, for a retry that goes under a lease).
-- The sender's receipt handle held the occurrence, and begin found no row for it: an
-- occurrence that has a row by now (another copy's, which cannot be sent meanwhile but
-- by a provider that delivers the key once) keeps it, and its outcome is not recorded
-- here. In the same statement, as delivery_complete_many does, a one-time reminder still
-- at that occurrence is finished (`completed` when sent, `failed` with the error when
-- not; docs/design.md, "Reminder states"). Returns one row per delivery row inserted
-- with `finished`: its reminder was finished here.
WITH u AS (
    SELECT *
    FROM ROWS FROM (json_to_recordset(CAST(:rows AS json))
                    AS (id uuid, user_id text, run_time_utc timestamptz, status text,
                        sent_at timestamptz, provider text, provider_message_id text,
                        recipient text, error text, attempts int, held_until timestamptz,
                        reminder_id uuid, occurrence_utc timestamptz))
         WITH ORDINALITY AS u(id, user_id, run_time_utc, status, sent_at, provider,
                              provider_message_id, recipient, error, attempts, held_until,
                              reminder_id, occurrence_utc, n)
), recorded AS (
    INSERT INTO delivery_log
        (id, reminder_id, user_id, run_time_utc, status, sent_at, provider,
         provider_message_id, recipient, error, attempt_count, held_until, created_at,
         updated_at)
    SELECT u.id, u.reminder_id, u.user_id, u.run_time_utc, u.status, u.sent_at, u.provider,
           u.provider_message_id, u.recipient, u.error, u.attempts, u.held_until, :now, :now
    FROM u
    ORDER BY u.n
    ON CONFLICT (reminder_id, run_time_utc) DO NOTHING
    RETURNING id, status
-- include: delivery_finish_one_time

-- part: delivery_finish_one_time
-- The end of the completer's two statements (delivery_complete_many,
-- delivery_record_first_sends_many), after their `u` (the outcomes) and `recorded` (the
-- rows written: id, status): a one-time reminder still at its occurrence is finished,
-- `completed` when sent, `failed` with the error when not.
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

-- name: delivery_list_recorded_at
-- After a flush whose commit was not acknowledged (the connection broke): which of its
-- rows that flush did record. Only the lease holder writes a row's status, and it stamps
-- updated_at with the flush's :now (a provider's evidence, the one other writer, stamps
-- its own), so a row with that stamp and status was recorded by it; the retried flush then leaves those rows alone instead of calling them lost.
SELECT d.id
FROM delivery_log AS d
JOIN json_to_recordset(CAST(:rows AS json))
     AS u(id uuid, run_time_utc timestamptz, status text)
  ON d.id = u.id AND d.run_time_utc = u.run_time_utc
WHERE d.updated_at = :now AND d.status = u.status AND d.lease_token IS NULL;

-- name: delivery_heartbeat_many
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
    JOIN json_to_recordset(CAST(:rows AS json))
         AS u(id uuid, run_time_utc timestamptz, lease_token uuid)
      ON h.id = u.id AND h.run_time_utc = u.run_time_utc AND h.lease_token = u.lease_token
    WHERE h.status = 'sending'
    FOR UPDATE OF h SKIP LOCKED
) AS held
WHERE d.id = held.id AND d.run_time_utc = held.run_time_utc;

-- name: delivery_withdraw_many
-- Un-begin the `sending` rows of occurrences withdrawn during their batch (the reminder
-- was cancelled, paused or rescheduled after the batch read it) that no provider call
-- ever touched (no attempt counted, no provider recorded); fenced by the lease token. A
-- row an earlier attempt touched stays: the caller releases its lease instead.
DELETE FROM delivery_log AS d
USING json_to_recordset(CAST(:rows AS json))
      AS u(id uuid, run_time_utc timestamptz, lease_token uuid)
WHERE d.id = u.id AND d.run_time_utc = u.run_time_utc AND d.lease_token = u.lease_token
  AND d.status = 'sending' AND d.attempt_count = 0 AND d.provider IS NULL;

-- name: delivery_get_evidence
-- The provider's evidence (delivery_record_evidence) that it accepted this sender's
-- email, read before an in-process retry of an ambiguous failure: if the provider took
-- the request whose answer was lost, it is recorded from this instead of sent again.
SELECT provider, provider_message_id, sent_at
FROM delivery_log
WHERE id = :id AND run_time_utc = :run_time_utc AND lease_token = :lease_token
  AND status = 'sending' AND provider_message_id IS NOT NULL;

-- name: delivery_rescue_abandoned
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

-- name: delivery_lock_held_live
-- A dead letter's occurrence (or a later one a sender chose for it under the misfire
-- policy) that a worker is still sending under a live lease: the dead letter is only a
-- duplicate of the message that worker holds, so nothing is recorded yet (the row is
-- locked so that the check and the recording agree).
SELECT id
FROM delivery_log
WHERE reminder_id = :reminder_id AND run_time_utc >= :run_time_utc
  AND status = 'sending' AND locked_at > :lease_cutoff
FOR UPDATE;

-- name: delivery_fail_dead_letter
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
WHERE d.status = 'sending'
RETURNING d.error;

-- name: delivery_fail_chosen_after
UPDATE delivery_log
SET status = 'failed',
    error = coalesce(error || '; ', '') || :error,
    locked_at = NULL,
    lease_token = NULL,
    updated_at = :now
WHERE reminder_id = :reminder_id AND status = 'sending' AND run_time_utc > :run_time_utc
RETURNING run_time_utc;

-- name: delivery_prepare_replay
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

-- name: delivery_get_by_provider_message
-- The delivery a provider event is about (provider message ids are unique per provider;
-- the newest row wins should one ever repeat). One index probe per partition of
-- delivery_log: the message id says nothing of the occurrence's week.
SELECT id, run_time_utc, user_id, status, recipient
FROM delivery_log
WHERE provider = :provider AND provider_message_id = :provider_message_id
ORDER BY created_at DESC
LIMIT 1;

-- name: delivery_record_feedback
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

-- name: delivery_suppress_replay
-- A replayed occurrence (dead-letter redrive) whose recipient is suppressed is not sent.
UPDATE delivery_log
SET status = 'suppressed', recipient = :recipient, error = :error, locked_at = NULL,
    lease_token = NULL, updated_at = :now
WHERE reminder_id = :reminder_id AND run_time_utc = :run_time_utc AND status = 'sending'
  AND locked_at IS NULL
RETURNING id;

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

-- name: delivery_count_failures_since
-- Occurrences that ended failed, bounced, complained or suppressed since :since (the
-- row's last change), per status.
SELECT status, count(*) AS n
FROM delivery_log
WHERE status IN ('failed', 'bounced', 'complained', 'suppressed') AND updated_at >= :since
GROUP BY status;

-- name: delivery_lag_p99_since
-- The 99th percentile of sent_at - run_time_utc (seconds) of the occurrences sent since
-- :since, and how many there were (p99 is NULL when none). Occurrences held by quiet
-- hours were late on purpose: left out (docs/design.md, "Quiet hours").
SELECT
    percentile_cont(0.99) WITHIN GROUP (
        ORDER BY CAST(extract(epoch FROM sent_at - run_time_utc) AS double precision)
    ) AS p99,
    count(*) AS n
FROM delivery_log
WHERE status = 'sent' AND sent_at >= :since AND held_until IS NULL;

-- name: delivery_lag_by_bucket
-- Delivery lag (sent_at - run_time_utc, seconds) of the occurrences sent in
-- [:since, :until), per bucket of :bucket_s seconds aligned on :since: how many, p50, p90,
-- p99 and the largest (the console's chart; the same definition as delivery_lag_p99_since,
-- occurrences held by quiet hours left out).
SELECT date_bin(make_interval(secs => :bucket_s), sent_at, :since) AS bucket_start,
       count(*) AS sent,
       percentile_cont(0.5) WITHIN GROUP (ORDER BY lag_s) AS p50_s,
       percentile_cont(0.9) WITHIN GROUP (ORDER BY lag_s) AS p90_s,
       percentile_cont(0.99) WITHIN GROUP (ORDER BY lag_s) AS p99_s,
       max(lag_s) AS max_s
FROM (
    SELECT sent_at, CAST(extract(epoch FROM sent_at - run_time_utc) AS double precision) AS lag_s
    FROM delivery_log
    WHERE status = 'sent' AND sent_at >= :since AND sent_at < :until AND held_until IS NULL
) AS sent
GROUP BY 1
ORDER BY 1;

-- name: delivery_list_partitions
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

-- name: delivery_create_partition
-- NULL: it existed already; else how many rows it took over from the default partition.
SELECT reminders_delivery_log_create_partition(:week_start) AS moved;

-- name: delivery_drop_partition
-- 'dropped', 'kept' (holds a `sending` row), 'recent' or 'missing'.
SELECT reminders_delivery_log_drop_partition(:week_start, :cutoff) AS outcome;

-- name: delivery_delete_expired_default
-- Rows of the default partition (occurrences no weekly partition covered) older than
-- :cutoff and terminal, at most :limit of them.
DELETE FROM delivery_log_default
WHERE ctid = ANY(ARRAY(
        SELECT ctid FROM delivery_log_default
        WHERE run_time_utc < :cutoff AND status <> 'sending'
        LIMIT :limit))
  AND run_time_utc < :cutoff AND status <> 'sending';
