-- Statements on `queue_messages`, the PostgreSQL queue backend with SQS semantics
-- (visibility timeout, receive count, redrive to a dead-letter queue after
-- :max_receive_count receives). Typed wrappers: reminder_core/store/queue_messages.py.

-- name: queue_message_send_many
-- One statement per batch: :bodies is a JSON array of message bodies, :delays_s the
-- delay of each (seconds), in the same order; ids follow that order.
INSERT INTO queue_messages (queue_name, body, visible_at, created_at)
SELECT :queue, b.body, :now + make_interval(secs => d.delay_s), :now
FROM jsonb_array_elements(CAST(:bodies AS jsonb)) WITH ORDINALITY AS b(body, n)
JOIN unnest(CAST(:delays_s AS float8[])) WITH ORDINALITY AS d(delay_s, n) USING (n)
ORDER BY n;

-- name: queue_message_receive
-- Like SQS ReceiveMessage: a visible message whose receive count already reached the
-- maximum is moved to the DLQ instead of being returned; the others become invisible for
-- :visibility_timeout_s and get a fresh receipt handle (a stale receiver cannot delete):
-- "<id>.<uuid>", the row's id and a random token; the statements that take a handle
-- find the row by its id (the primary key) and check the token, so the token needs no
-- index of its own (migration 0018).
WITH candidates AS (
    SELECT id, receive_count
    FROM queue_messages
    WHERE queue_name = :queue AND NOT dead_lettered AND visible_at <= :now
    ORDER BY visible_at, id
    LIMIT :limit
    FOR UPDATE SKIP LOCKED
), dead AS (
    UPDATE queue_messages AS q
    SET dead_lettered = true, dead_lettered_at = :now, receipt_handle = NULL
    FROM candidates AS c
    WHERE q.id = c.id AND c.receive_count >= :max_receive_count
    RETURNING q.id
)
UPDATE queue_messages AS q
SET receive_count = q.receive_count + 1,
    visible_at = :now + make_interval(secs => :visibility_timeout_s),
    receipt_handle = gen_random_uuid()
FROM candidates AS c
WHERE q.id = c.id AND c.receive_count < :max_receive_count
RETURNING q.id, q.body::text AS body_json,
    q.id::text || '.' || q.receipt_handle::text AS receipt_handle, q.receive_count, q.created_at;

-- name: queue_message_delete_many
-- :ids, the receipt handles' row ids; :handles, a JSON object whose keys are the handles
-- ("<id>.<token>", as receive writes them). The primary key finds each row and the
-- handle is checked against the object's keys (a binary search), so there is no join to
-- plan. Joined to the handles, the delete was planned as a hash join over a sequential
-- scan of queue_messages (57 of 100 deletes in a run of bench/end_to_end.py), or as a
-- nested loop comparing each row with every handle (docs/performance.md, "Plans that
-- scan").
--
--
-- Committed asynchronously: the uncorrelated subquery is an InitPlan, run once before
-- the first row, that turns synchronous_commit off for this transaction alone (the
-- setting is read when the transaction commits). The delete does not wait for its WAL
-- to reach the disk, 2-3 ms per batch on the machine of docs/performance.md. Nothing it
-- guards is lost in a PostgreSQL crash that loses it: the message comes back after its
-- visibility timeout, with a receive count above 1, and its occurrence is found
-- terminal (DUPLICATE) and deleted again. The next synchronous commit of any session
-- makes it durable (WAL is written in order). docs/design.md, "Statements of a batch".
DELETE FROM queue_messages AS q
WHERE q.queue_name = :queue AND q.id = ANY(CAST(:ids AS bigint[]))
  AND CAST(:handles AS jsonb) ? (q.id::text || '.' || q.receipt_handle::text)
  AND (SELECT set_config('synchronous_commit', 'off', true)) = 'off';

-- name: queue_message_change_visibility
UPDATE queue_messages
SET visible_at = :now + make_interval(secs => :timeout_s)
WHERE queue_name = :queue AND id = :id AND receipt_handle = :token AND NOT dead_lettered;

-- name: queue_message_change_visibility_many
-- (receipt handle's id and token, timeout) rows as JSON (store/_statements.json_rows).
UPDATE queue_messages AS q
SET visible_at = :now + make_interval(secs => c.timeout_s)
FROM json_to_recordset(CAST(:rows AS json)) AS c(id bigint, token uuid, timeout_s float8)
WHERE q.queue_name = :queue AND q.id = c.id AND q.receipt_handle = c.token
  AND NOT q.dead_lettered;

-- name: queue_message_depth
SELECT
    count(*) FILTER (WHERE NOT dead_lettered AND visible_at <= :now) AS visible,
    count(*) FILTER (WHERE NOT dead_lettered AND visible_at > :now) AS not_visible,
    count(*) FILTER (WHERE dead_lettered) AS dead_lettered
FROM queue_messages
WHERE queue_name = :queue;

-- name: queue_message_list_dead
SELECT id, body, receive_count, dead_lettered_at, dead_letter_recorded_at
FROM queue_messages
WHERE queue_name = :queue AND dead_lettered
ORDER BY dead_lettered_at, id
LIMIT :limit;

-- name: queue_message_lock_dead_unrecorded
SELECT id, body, receive_count, dead_lettered_at, dead_letter_recorded_at
FROM queue_messages
WHERE queue_name = :queue AND dead_lettered AND dead_letter_recorded_at IS NULL
ORDER BY dead_lettered_at, id
LIMIT :limit
FOR UPDATE SKIP LOCKED;

-- name: queue_message_mark_dead_recorded
UPDATE queue_messages
SET dead_letter_recorded_at = :now
WHERE queue_name = :queue AND id = ANY(:ids) AND dead_lettered;

-- name: queue_message_redrive
-- Back to the main queue, as SQS's DLQ redrive does: visible now, receive count reset,
-- marked as a replay so the sender sends the occurrence even if its reminder moved on.
UPDATE queue_messages
SET dead_lettered = false,
    dead_lettered_at = NULL,
    dead_letter_recorded_at = NULL,
    receive_count = 0,
    receipt_handle = NULL,
    visible_at = :now,
    body = body || '{"replay": true}'::jsonb
WHERE queue_name = :queue AND id = ANY(:ids) AND dead_lettered
RETURNING id;

-- name: queue_message_count_live_copies
-- Live (not dead-lettered) messages of :queue for the occurrence (:reminder_id,
-- :run_time_utc): a dead letter's occurrence with a live copy is still on its way (a
-- first send without a lease has no delivery row while it runs: docs/design.md, "First
-- sends without a lease"). A scan of the queue, for the rare dead letter.
SELECT count(*) AS n
FROM queue_messages
WHERE queue_name = :queue AND NOT dead_lettered
  AND body ->> 'reminder_id' = CAST(:reminder_id AS text)
  AND CAST(body ->> 'run_time_utc' AS timestamptz) = :run_time_utc;

-- name: queue_message_delete_dead
DELETE FROM queue_messages
WHERE queue_name = :queue AND id = ANY(:ids) AND dead_lettered
RETURNING id;

-- name: queue_message_purge_dead
DELETE FROM queue_messages
WHERE queue_name = :queue AND dead_lettered
RETURNING id;

-- name: queue_message_next_visible
-- When the next message of the queue becomes visible (now or earlier: one is visible);
-- NULL when the queue holds none. Served by ix_queue_messages_visible.
SELECT min(visible_at) AS next_visible FROM queue_messages
WHERE queue_name = :queue AND NOT dead_lettered;

-- name: queue_message_notify
-- Wake the queue's receivers (PostgresQueue.wait_for_messages) when this transaction
-- commits; NOTIFY payloads are folded, one per channel and payload per transaction.
SELECT pg_notify(:channel, :queue);
