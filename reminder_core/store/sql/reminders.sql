-- Statements on `reminders` (and the ones that write another table in the same statement
-- as a reminder's change: reminder_claim_due inserts its outbox rows; reminder_backlog reads
-- the outbox beside). Typed wrappers: reminder_core/store/reminders.py. Time is always a
-- bind (:now). Set-based forms (`_many`) take rows as one JSON array (:rows, see
-- store/_statements.json_rows) unpacked by json_to_recordset and id sets as one array
-- literal (:ids, store/_statements.id_array). Reminders are always locked in id order, so
-- no two of these statements deadlock.

-- name: reminder_get
-- The user's reminder (another user's id finds nothing).
SELECT * FROM reminders WHERE id = :id AND user_id = :user_id;

-- name: reminder_lock
-- reminder_get, row-locked until the caller's transaction ends: a change computed from it
-- is written before anyone else reads it.
SELECT * FROM reminders WHERE id = :id AND user_id = :user_id FOR UPDATE;

-- name: reminder_get_by_request_id
-- The reminder this user created with this idempotency key.
SELECT * FROM reminders WHERE user_id = :user_id AND client_request_id = :client_request_id;

-- name: reminder_lock_owner
-- Serialise one user's count-then-insert of webhook endpoints until the transaction ends:
-- a transaction-level advisory lock on the user id (key space 17, issue 17, for quotas;
-- two users whose ids hash alike only wait for each other). The live-reminder quota is
-- serialised by its bound's row lock instead (live_reminder_bounds.sql).
SELECT pg_advisory_xact_lock(17, hashtext(:user_id));

-- name: reminder_count_live
-- How many of this user's reminders are live (pending, claimed or paused)
-- (ix_reminders_user_created).
SELECT count(*) FROM reminders
WHERE user_id = :user_id AND status IN ('pending', 'claimed', 'paused');

-- name: reminder_insert
-- Create one reminder; nothing back when (user_id, client_request_id) exists already (an
-- idempotent retry, or a concurrent request with the same key: the insert waits for it).
-- The conflict target names its predicate, which changes nothing (a NULL key never
-- conflicts) and lets it infer a partial unique index as well as today's constraint, so
-- that a later migration can make the index partial with this code running
-- (docs/performance.md, "Fewer writes per delivery row").
INSERT INTO reminders
    (user_id, title, body, start_local, all_day, timezone, rrule, exdates, dst_nonexistent,
     dst_ambiguous, misfire_policy, max_lateness_s, next_run_utc, status, client_request_id,
     request_fingerprint, snoozed_from, webhook_endpoint_id, created_at, updated_at)
VALUES
    (:user_id, :title, :body, :start_local, :all_day, :timezone, :rrule,
     CAST(:exdates AS timestamp[]), :dst_nonexistent, :dst_ambiguous, :misfire_policy,
     :max_lateness_s, :next_run_utc, 'pending', :client_request_id, :request_fingerprint,
     :snoozed_from, :webhook_endpoint_id, :now, :now)
ON CONFLICT (user_id, client_request_id) WHERE client_request_id IS NOT NULL DO NOTHING
RETURNING *;

-- name: reminder_insert_within_bound
-- A create's one statement on its fast path: when :user_id's live-reminder bound is below
-- :cap (or :cap <= 0: no quota), raise it by one (as live_reminder_bound_increment:
-- row-locked until the transaction ends, so one user's creates run one at a time) and
-- create the reminder as reminder_insert does. One row when the bound was raised: the new
-- bound (`live_bound`), then the reminder's columns, all NULL when the idempotency key
-- exists already (nothing inserted). No row: nothing was written, the user has no bound
-- yet or it is at :cap (the caller starts it, or counts exactly, in its transaction).
WITH bound AS (
    UPDATE live_reminder_bounds SET bound = bound + 1
    WHERE user_id = :user_id
      AND (CAST(:cap AS integer) <= 0 OR bound < CAST(:cap AS integer))
    RETURNING bound
), inserted AS (
    -- include: reminder_insert_from_bound
)
SELECT bound.bound AS live_bound, inserted.*
FROM bound LEFT JOIN inserted ON true;

-- name: reminder_take_and_insert_within_bound
-- reminder_insert_within_bound after the request's rate-limit take (rate_limit_take in
-- rate_limits.sql, the same statement: :user_id is the token's subject), in one statement
-- (issue 15: one round trip fewer per create): the bound is raised and the reminder
-- inserted only when the take was taken. One row: the TAT after the take and whether it
-- was taken (`rate_tat`, `rate_taken`), then reminder_insert_within_bound's row (all NULL
-- when nothing was raised or inserted). No row: a concurrent first request of the user
-- won the rate row's insert and this one was refused; nothing was written.
WITH
-- include: rate_limit_take_steps
, take AS (
    SELECT tat, true AS taken FROM taken
    UNION ALL
    SELECT tat, false AS taken FROM refused
), bound AS (
    UPDATE live_reminder_bounds SET bound = bound + 1
    WHERE user_id = :user_id
      AND (CAST(:cap AS integer) <= 0 OR bound < CAST(:cap AS integer))
      AND EXISTS (SELECT 1 FROM taken)
    RETURNING bound
), inserted AS (
    -- include: reminder_insert_from_bound
)
SELECT take.tat AS rate_tat, take.taken AS rate_taken, bound.bound AS live_bound,
       inserted.*
FROM take LEFT JOIN bound ON true LEFT JOIN inserted ON true;

-- part: reminder_insert_from_bound
-- The INSERT of the within_bound statements, as reminder_insert's (its conflict target
-- too): one row per row of `bound` (the raised live-reminder bound), none when the key
-- exists already.
INSERT INTO reminders
    (user_id, title, body, start_local, all_day, timezone, rrule, exdates,
     dst_nonexistent, dst_ambiguous, misfire_policy, max_lateness_s, next_run_utc,
     status, client_request_id, request_fingerprint, snoozed_from, webhook_endpoint_id,
     created_at, updated_at)
SELECT :user_id, :title, :body, CAST(:start_local AS timestamp), :all_day, :timezone,
       :rrule, CAST(:exdates AS timestamp[]), :dst_nonexistent, :dst_ambiguous,
       :misfire_policy, :max_lateness_s, CAST(:next_run_utc AS timestamptz), 'pending',
       :client_request_id, :request_fingerprint, CAST(:snoozed_from AS uuid),
       CAST(:webhook_endpoint_id AS uuid), CAST(:now AS timestamptz),
       CAST(:now AS timestamptz)
FROM bound
ON CONFLICT (user_id, client_request_id) WHERE client_request_id IS NOT NULL DO NOTHING
RETURNING *;

-- name: reminder_list_page
-- Up to :limit of the user's reminders with one of :statuses, newest first, strictly
-- before the cursor (:before_created_at, :before_id) (ix_reminders_user_created).
SELECT *
FROM reminders
WHERE user_id = :user_id
  AND (created_at, id) < (:before_created_at, :before_id)
  AND status = ANY(CAST(:statuses AS text[]))
ORDER BY created_at DESC, id DESC
LIMIT :limit;

-- name: reminder_update
-- Write a change the caller computed from the row it locked (reminder_lock) and bump the
-- version; nothing back when the row is no longer at :version.
UPDATE reminders
SET title = :title,
    body = :body,
    start_local = :start_local,
    all_day = :all_day,
    timezone = :timezone,
    rrule = :rrule,
    exdates = CAST(:exdates AS timestamp[]),
    dst_nonexistent = :dst_nonexistent,
    dst_ambiguous = :dst_ambiguous,
    misfire_policy = :misfire_policy,
    max_lateness_s = :max_lateness_s,
    webhook_endpoint_id = :webhook_endpoint_id,
    next_run_utc = :next_run_utc,
    status = :status,
    claimed_by = :claimed_by,
    claimed_at = :claimed_at,
    last_error = :last_error,
    paused_reason = :paused_reason,
    suppressed_address = :suppressed_address,
    suppression_checked_at = :suppression_checked_at,
    count_progress = CAST(:count_progress AS jsonb),
    version = version + 1,
    updated_at = :now
WHERE id = :id AND version = :version
RETURNING *;

-- name: reminder_cancel
-- Cancel a live reminder (pending, claimed or paused) and bump its version; an occurrence
-- claimed but not sent is then recorded `cancelled` by the sender (docs/design.md, "A
-- cancel or change wins"). Nothing back when it was not live.
UPDATE reminders
SET status = 'cancelled', next_run_utc = NULL, claimed_by = NULL, claimed_at = NULL,
    version = version + 1, updated_at = :now
WHERE id = :id AND user_id = :user_id AND status IN ('pending', 'claimed', 'paused')
RETURNING *;

-- name: reminder_cancel_snoozes
-- Cancel the live one-time reminders a snooze link of :snoozed_from made (a stop link
-- stops the snoozes too: docs/design.md, "Links in emails"); ix_reminders_snoozed_from.
UPDATE reminders
SET status = 'cancelled', next_run_utc = NULL, claimed_by = NULL, claimed_at = NULL,
    version = version + 1, updated_at = :now
WHERE snoozed_from = :snoozed_from AND user_id = :user_id
  AND status IN ('pending', 'claimed', 'paused')
RETURNING *;

-- name: reminder_claim_due
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
    -- The locked ids as one array: the update probes the primary key for each. A join
    -- to `due` was planned as a hash join over a sequential scan of the whole table,
    -- every claim (docs/performance.md, "Plans that scan").
    WHERE r.id = ANY (ARRAY(SELECT id FROM due))
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

-- name: reminder_claim_due_to_queue
-- reminder_claim_due for the PostgreSQL queue (queue_messages, in this database): the
-- claimed occurrences are written straight into the queue :queue, each visible at its due
-- time (now when already due), in the claim's own statement. The message row is the
-- outbox row: claim and message commit together, so there is nothing to publish, mark or
-- expire (docs/design.md, "Claim and outbox"). Same body as reminder_claim_due's payload;
-- its due/claimed CTEs are reminder_claim_due's, kept in step (tests/integration/
-- test_coordinator.py runs every claim test on both).
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
    -- The locked ids as one array: the update probes the primary key for each. A join
    -- to `due` was planned as a hash join over a sequential scan of the whole table,
    -- every claim (docs/performance.md, "Plans that scan").
    WHERE r.id = ANY (ARRAY(SELECT id FROM due))
    RETURNING r.id, r.user_id, r.next_run_utc, r.version
), sent AS (
    INSERT INTO queue_messages (queue_name, body, visible_at, created_at)
    SELECT :queue,
           jsonb_build_object(
               'reminder_id', claimed.id,
               'run_time_utc', to_char(claimed.next_run_utc AT TIME ZONE 'UTC',
                                       'YYYY-MM-DD"T"HH24:MI:SS.US"+00:00"'),
               'version', claimed.version,
               'user_id', claimed.user_id
           ),
           greatest(claimed.next_run_utc, :now),
           :now
    FROM claimed
    ORDER BY claimed.next_run_utc
    RETURNING 1
)
SELECT count(*) AS claimed FROM sent;

-- name: reminder_rescue_claimed
-- Re-drive reminders claimed longer ago than :cutoff (their message was lost, or their
-- sender died for good): back to pending with the same next_run_utc. The unique delivery
-- row keeps a second delivery of the same occurrence from being sent twice. A claim held
-- by quiet hours is stuck only if it is still there :cutoff after the hold ended
-- (held_until before claimed_at is a past occurrence's: no effect). With :queue (the
-- PostgreSQL queue's name, in this database) a claim whose message is still live in
-- that queue is not stuck: its message is on its way, and re-driving it would make a
-- second copy of the occurrence (the first send without a lease counts on there being
-- one: reminder_core/queue/postgres.py). One scan of the live messages, only when some
-- claim is that old.
WITH stuck AS (
    SELECT id
    FROM reminders AS r
    WHERE status = 'claimed' AND claimed_at < :cutoff
      AND (held_until IS NULL OR held_until < :cutoff)
      AND (CAST(:queue AS text) IS NULL OR NOT EXISTS (
          SELECT 1 FROM queue_messages AS q
          WHERE q.queue_name = CAST(:queue AS text) AND NOT q.dead_lettered
            AND q.body ->> 'reminder_id' = CAST(r.id AS text)))
    ORDER BY claimed_at
    LIMIT :limit
    FOR UPDATE SKIP LOCKED
)
UPDATE reminders AS r
SET status = 'pending', claimed_by = NULL, claimed_at = NULL, updated_at = :now
FROM stuck
WHERE r.id = stuck.id
RETURNING r.id, r.next_run_utc;

-- name: reminder_get_timezone
-- The zone a dead letter's reminder is moved on in (NULL: its user's profile zone).
SELECT timezone FROM reminders WHERE id = :reminder_id;

-- name: reminder_get_many_for_send
-- With the webhook endpoint of a reminder of the webhook channel (NULLs: email),
-- whether its next occurrence has a delivery row already (one probe of the unique key;
-- the sender's first send without a lease needs none: sender/begin.py), and whether its
-- recipient is on the suppression list.
SELECT r.id, r.user_id, r.title, r.body, r.template, r.timezone, r.rrule, r.status,
       r.next_run_utc, r.start_local, r.all_day, r.exdates, r.dst_nonexistent,
       r.dst_ambiguous, r.misfire_policy, r.max_lateness_s, r.paused_reason,
       r.suppressed_address, r.held_until, w.url AS webhook_url, w.secret AS webhook_secret,
       r.version,
       -- A scalar subquery, not EXISTS: the planner may run an EXISTS as one hashed
       -- sequential scan of every delivery_log partition when it believes them small
       -- (63 of 120 begins in a run of bench/end_to_end.py, while they filled); this is
       -- one probe of the unique key per reminder (docs/performance.md, "Plans that
       -- scan").
       (SELECT true FROM delivery_log AS d
        WHERE d.reminder_id = r.id AND d.run_time_utc = r.next_run_utc
        LIMIT 1) IS NOT NULL AS delivery_recorded,
       -- The suppression list's reason for the recipient the sender will write to
       -- (:recipients, {reminder id: case-folded address}, from the users' profiles),
       -- NULL when not listed: the batch's suppression read in the same statement
       -- (docs/design.md, "Statements of a batch"). A scalar subquery, one probe of the
       -- list's key per reminder: as a join, the planner hashed the whole list.
       (SELECT s.reason FROM suppressions AS s
        WHERE s.email = CAST(:recipients AS jsonb) ->> CAST(r.id AS text)) AS recipient_suppressed
FROM reminders AS r
LEFT JOIN webhook_endpoints AS w ON w.id = r.webhook_endpoint_id
WHERE r.id = ANY(CAST(:ids AS uuid[]));

-- name: reminder_hold_many
-- Record that each claimed occurrence in :rows (reminder_id, run_time_utc, held_until) is
-- held by its user's quiet hours until held_until, where the reminder still wants it.
UPDATE reminders AS r
SET held_until = u.held_until
FROM json_to_recordset(CAST(:rows AS json))
     AS u(reminder_id uuid, run_time_utc timestamptz, held_until timestamptz)
WHERE r.id = u.reminder_id AND r.next_run_utc = u.run_time_utc
  AND r.status IN ('claimed', 'pending');

-- name: reminder_lock_many_for_advance
-- Re-read the reminders under a row lock before moving them on, so that the next
-- occurrence is computed from each one's current schedule, never from a copy read before
-- the send; locked in id order (no deadlock between two senders advancing overlapping
-- sets).
SELECT id, user_id, timezone, rrule, status, next_run_utc, start_local, all_day, exdates,
       dst_nonexistent, dst_ambiguous, count_progress
FROM reminders
WHERE id = ANY(CAST(:ids AS uuid[]))
ORDER BY id
FOR UPDATE;

-- name: reminder_advance_many
-- Move each reminder (each id once) past the occurrence just handled, unless a newer user
-- change (cancel, pause, reschedule) already moved it: never overwrite a newer version
-- (docs/design.md, "A cancel or change wins"). Run after reminder_lock_many_for_advance in
-- the same transaction.
UPDATE reminders AS r
SET status = u.status,
    next_run_utc = u.next_run_utc,
    claimed_by = NULL,
    claimed_at = NULL,
    last_error = u.last_error,
    count_progress = u.count_progress,
    updated_at = :now
FROM json_to_recordset(CAST(:rows AS json))
     AS u(id uuid, run_time_utc timestamptz, status text, next_run_utc timestamptz,
          last_error text, count_progress jsonb)
WHERE r.id = u.id AND r.next_run_utc = u.run_time_utc AND r.status IN ('claimed', 'pending');

-- name: reminder_get_many_send_state
-- What a sender re-reads of its batch's reminders while the batch's sends go on: whether
-- each still wants the occurrence it was claimed for (no lock: the begin transaction
-- took the rows; this only stops sends that have not started).
SELECT id, status, next_run_utc
FROM reminders
WHERE id = ANY(CAST(:ids AS uuid[]));

-- name: reminder_complete_replayed
-- A one-time reminder that failed through the dead-letter queue and was then replayed
-- and sent is complete after all.
UPDATE reminders
SET status = 'completed', last_error = NULL, updated_at = :now
WHERE id = :id AND rrule IS NULL AND status = 'failed';

-- name: reminder_pause_user_for_suppression
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

-- name: reminder_suppress_at_send_many
-- The sender refused an occurrence for a suppressed recipient (recorded `suppressed`): a
-- recurring reminder is paused until the address changes or the entry is removed; a
-- one-time one has nothing left to send and fails. Only a reminder still at that
-- occurrence changes (live, or already paused by a suppression).
WITH u AS (
    SELECT *
    FROM json_to_recordset(CAST(:rows AS json))
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

-- name: reminder_list_suppressed_to_check
-- Reminders paused by a suppression, not checked since :checked_before, never-checked
-- first (just paused): the maintenance workload compares their user's current address.
SELECT id, user_id, suppressed_address
FROM reminders
WHERE status = 'paused' AND suppressed_address IS NOT NULL
  AND (suppression_checked_at IS NULL OR suppression_checked_at <= :checked_before)
ORDER BY suppression_checked_at NULLS FIRST, id
LIMIT :limit;

-- name: reminder_list_suppressed_by_address
-- Every reminder paused because this (case-folded) address was suppressed.
SELECT id, user_id, suppressed_address
FROM reminders
WHERE status = 'paused' AND suppressed_address = :email
ORDER BY id;

-- name: reminder_lock_many_suppressed
-- Reminders about to resume, locked in id order, still paused by a suppression; not
-- those of a user being moved to another cell (cell_moves: resumed here, they could be
-- sent from the old cell after their copy; the new cell's maintenance checks them).
SELECT id, user_id, timezone, rrule, next_run_utc, start_local, all_day, exdates,
       dst_nonexistent, dst_ambiguous, suppressed_address
FROM reminders AS r
WHERE id = ANY(CAST(:ids AS uuid[])) AND status = 'paused' AND suppressed_address IS NOT NULL
  AND NOT EXISTS (SELECT 1 FROM cell_moves AS m WHERE m.user_id = r.user_id)
ORDER BY id
FOR UPDATE;

-- name: reminder_resume_many_from_suppression
UPDATE reminders AS r
SET status = u.status,
    next_run_utc = u.next_run_utc,
    last_error = coalesce(u.last_error, r.last_error),
    paused_reason = NULL,
    suppressed_address = NULL,
    suppression_checked_at = NULL,
    updated_at = :now
FROM json_to_recordset(CAST(:rows AS json))
     AS u(id uuid, status text, next_run_utc timestamptz, last_error text)
WHERE r.id = u.id AND r.status = 'paused' AND r.suppressed_address IS NOT NULL
RETURNING r.id;

-- name: reminder_repoint_many_suppression
-- The profile's address changed, but to another suppressed address: wait on that one.
UPDATE reminders AS r
SET suppressed_address = u.address,
    paused_reason = u.paused_reason,
    suppression_checked_at = :now,
    updated_at = :now
FROM json_to_recordset(CAST(:rows AS json)) AS u(id uuid, address text, paused_reason text)
WHERE r.id = u.id AND r.status = 'paused' AND r.suppressed_address IS NOT NULL;

-- name: reminder_mark_many_suppression_checked
UPDATE reminders
SET suppression_checked_at = :now
WHERE id = ANY(CAST(:ids AS uuid[])) AND status = 'paused' AND suppressed_address IS NOT NULL;

-- name: reminder_backlog
-- oldest_due: the oldest next_run_utc of a due occurrence not yet delivered (the
-- reminder is pending, or claimed and waiting in the outbox, the queue or a sender);
-- oldest_pending: the same among reminders the coordinator has not claimed yet. A claim
-- held by quiet hours is due from the hold's end (GREATEST ignores a NULL held_until). The
-- scheduler's backlog as the maintenance gauges and `reminders status` see it
-- (docs/design.md, "Metrics"); each subquery runs on a partial index: ix_reminders_due
-- (pending), ix_reminders_claimed (claimed, a small in-flight set), ix_outbox_unpublished.
SELECT
    LEAST(p.oldest, c.oldest) AS oldest_due,
    p.oldest AS oldest_pending,
    p.due AS due_backlog,
    o.unpublished AS outbox_unpublished,
    o.oldest AS outbox_oldest_unpublished
FROM
    (SELECT min(next_run_utc) AS oldest, count(*) AS due
     FROM reminders WHERE status = 'pending' AND next_run_utc <= :now) AS p,
    (SELECT min(GREATEST(next_run_utc, held_until)) AS oldest
     FROM reminders WHERE status = 'claimed' AND next_run_utc <= :now
       AND (held_until IS NULL OR held_until <= :now)) AS c,
    (SELECT min(created_at) AS oldest, count(*) AS unpublished
     FROM outbox WHERE published_at IS NULL) AS o;

-- name: reminder_next_due
-- When the next pending reminder is due (NULL: none); served by ix_reminders_due.
SELECT min(next_run_utc) AS next_due FROM reminders WHERE status = 'pending';

-- name: reminder_due_notify
-- Wake the coordinators (Coordinator.wait_for_work) when this transaction commits: a
-- reminder written now is due within DUE_SOON_S.
SELECT pg_notify(:channel, '');
