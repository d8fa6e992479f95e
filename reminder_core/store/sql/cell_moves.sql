-- Statements of a user's move between cells (docs/design.md, "Moving a user between
-- cells"; issue 18): the `cell_moves` marker, the user's advisory lock (key space 18),
-- the freeze, drain and resume of their reminders, and the copy of their rows. Typed
-- wrappers: reminder_core/store/cell_moves.py.

-- name: cell_move_lock
-- Wait for every API write of :user_id in progress in this cell to end, then keep new
-- ones out until this transaction ends.
SELECT pg_advisory_xact_lock(18, hashtext(:user_id));

-- name: cell_move_lock_shared
-- Taken by each API write of :user_id before it reads the marker: a move's marker
-- committed while it waited is then seen by the next statement.
SELECT pg_advisory_xact_lock_shared(18, hashtext(:user_id));

-- name: cell_move_try_lock
-- In the directory's database, for the whole of one move (a session lock: released by
-- cell_move_unlock, or when the mover's connection ends, e.g. it was killed): false when
-- another move of :user_id holds it.
SELECT pg_try_advisory_lock(19, hashtext(:user_id));

-- name: cell_move_unlock
SELECT pg_advisory_unlock(19, hashtext(:user_id));

-- name: cell_move_get
SELECT from_cell, to_cell, started_at FROM cell_moves WHERE user_id = :user_id;

-- name: cell_move_insert
-- Mark :user_id as moving; an existing marker is kept (a resumed move): read it back.
INSERT INTO cell_moves (user_id, from_cell, to_cell, started_at)
VALUES (:user_id, :from_cell, :to_cell, :now)
ON CONFLICT (user_id) DO NOTHING;

-- name: cell_move_delete
DELETE FROM cell_moves WHERE user_id = :user_id;

-- name: cell_move_pause
-- Freeze :user_id's reminders where they are, as paused: pending ones (paused_reason
-- 'cell-move'), and claims held by quiet hours past :held_after whose delivery row no
-- sender holds a live lease on ('cell-move-held': the hold's message comes back after
-- the copy, and the copied delivery row keeps held_until).
-- next_run_utc is kept: resumed, a due occurrence is claimed at once, under its misfire
-- policy. Run again until nothing is in flight: a claim that finishes meanwhile comes
-- back pending.
UPDATE reminders AS r
SET paused_reason = CASE r.status WHEN 'pending' THEN 'cell-move' ELSE 'cell-move-held' END,
    status = 'paused', claimed_by = NULL, claimed_at = NULL, version = r.version + 1,
    updated_at = :now
WHERE r.user_id = :user_id
  AND (r.status = 'pending'
       OR (r.status = 'claimed' AND r.held_until > :held_after
           AND NOT EXISTS (
               SELECT 1 FROM delivery_log AS d
               WHERE d.reminder_id = r.id AND d.run_time_utc = r.next_run_utc
                 AND d.status = 'sending' AND d.locked_at > :lease_cutoff)))
RETURNING r.id;

-- name: cell_move_in_flight
-- What still keeps :user_id's move from copying: reminders claimed, delivery rows a
-- sender holds under a live lease (through the small partial index of `sending` rows),
-- and messages of the PostgreSQL queue a receiver holds now (received, hidden, not
-- dead-lettered) for a reminder quiet hours do not hold: a first send without a lease
-- has no row while its call runs, and its reminder may no longer be claimed (cancelled
-- or paused meanwhile), yet its outcome is still to be written here (docs/design.md,
-- "First sends without a lease"). One scan of the queue table per poll of the drain.
SELECT (SELECT count(*) FROM reminders WHERE user_id = :user_id AND status = 'claimed')
           AS claimed,
       (SELECT count(*) FROM delivery_log
        WHERE user_id = :user_id AND status = 'sending' AND locked_at > :lease_cutoff)
           AS sending,
       (SELECT count(*) FROM queue_messages AS q
        JOIN reminders AS r ON CAST(r.id AS text) = q.body ->> 'reminder_id'
        WHERE q.body ->> 'user_id' = :user_id AND NOT q.dead_lettered
          AND q.receive_count > 0 AND q.visible_at > :now
          AND (r.held_until IS NULL OR r.held_until <= :now))
           AS receiving;

-- name: cell_move_resume
-- In the new cell, after the switch: every reminder cell_move_pause froze is pending
-- (a held claim is claimed anew there: its old message belongs to the old cell).
UPDATE reminders
SET status = 'pending', paused_reason = NULL, version = version + 1, updated_at = :now
WHERE user_id = :user_id AND status = 'paused'
  AND paused_reason IN ('cell-move', 'cell-move-held')
RETURNING id;

-- name: cell_move_undo
-- In the old cell, when the move is abandoned before the switch: each frozen reminder
-- back as it was (a held claim claimed again, by 'cell-move' from :now, its message still
-- in this cell's queue; the claim rescuer counts from its hold's end).
UPDATE reminders
SET status = CASE paused_reason WHEN 'cell-move' THEN 'pending' ELSE 'claimed' END,
    claimed_by = CASE paused_reason WHEN 'cell-move' THEN NULL ELSE 'cell-move' END,
    claimed_at = CASE paused_reason WHEN 'cell-move' THEN NULL ELSE :now END,
    paused_reason = NULL, version = version + 1, updated_at = :now
WHERE user_id = :user_id AND status = 'paused'
  AND paused_reason IN ('cell-move', 'cell-move-held')
RETURNING id;

-- name: cell_move_summary
-- A fingerprint of :user_id's rows: counts, and digests of (id, status, version) of the
-- reminders and (id, status) of the delivery rows, to compare two cells (delivery rows
-- found through the user's reminders: every delivery row names one of them).
SELECT (SELECT count(*) FROM reminders WHERE user_id = :user_id) AS reminders,
       (SELECT coalesce(md5(string_agg(id::text || ':' || status || ':' || version, ','
                                       ORDER BY id)), '')
        FROM reminders WHERE user_id = :user_id) AS reminders_digest,
       (SELECT count(*) FROM delivery_log
        WHERE reminder_id IN (SELECT id FROM reminders WHERE user_id = :user_id))
           AS deliveries,
       (SELECT coalesce(md5(string_agg(id::text || ':' || status, ',' ORDER BY id)), '')
        FROM delivery_log
        WHERE reminder_id IN (SELECT id FROM reminders WHERE user_id = :user_id))
           AS deliveries_digest,
       (SELECT count(*) FROM calendar_feeds WHERE user_id = :user_id) AS calendar_feeds,
       (SELECT count(*) FROM webhook_endpoints WHERE user_id = :user_id) AS webhook_endpoints;

-- name: cell_move_export_reminders
SELECT CAST(coalesce(json_agg(t), '[]') AS text) FROM reminders AS t WHERE t.user_id = :user_id;

-- name: cell_move_export_delivery_log
-- By the user's reminders (the unique (reminder_id, run_time_utc) index of each
-- partition), not by delivery_log.user_id, which no index covers.
SELECT CAST(coalesce(json_agg(t), '[]') AS text) FROM delivery_log AS t
WHERE t.reminder_id IN (SELECT id FROM reminders WHERE user_id = :user_id);

-- name: cell_move_export_calendar_feeds
SELECT CAST(coalesce(json_agg(t), '[]') AS text) FROM calendar_feeds AS t WHERE t.user_id = :user_id;

-- name: cell_move_export_webhook_endpoints
SELECT CAST(coalesce(json_agg(t), '[]') AS text) FROM webhook_endpoints AS t WHERE t.user_id = :user_id;

-- name: cell_move_import_webhook_endpoints
-- The rows of cell_move_export_* written as they were (same ids), in the table's
-- column order; both cells are at the same migration (checked first).
INSERT INTO webhook_endpoints
SELECT * FROM json_populate_recordset(NULL::webhook_endpoints, CAST(:rows AS json));

-- name: cell_move_import_reminders
-- One statement: a snooze's snoozed_from names a reminder of the same user, checked at
-- its end.
INSERT INTO reminders
SELECT * FROM json_populate_recordset(NULL::reminders, CAST(:rows AS json));

-- name: cell_move_import_delivery_log
INSERT INTO delivery_log
SELECT * FROM json_populate_recordset(NULL::delivery_log, CAST(:rows AS json));

-- name: cell_move_import_calendar_feeds
INSERT INTO calendar_feeds
SELECT * FROM json_populate_recordset(NULL::calendar_feeds, CAST(:rows AS json));

-- name: cell_move_delete_reminders
-- With their delivery rows, found by the user's reminders as the export found them
-- (delivery_log.reminder_id is no foreign key: migration 0016).
WITH deliveries AS (
    DELETE FROM delivery_log
    WHERE reminder_id IN (SELECT id FROM reminders WHERE user_id = :user_id)
)
DELETE FROM reminders WHERE user_id = :user_id;

-- name: cell_move_delete_webhook_endpoints
DELETE FROM webhook_endpoints WHERE user_id = :user_id;

-- name: cell_move_delete_calendar_feeds
DELETE FROM calendar_feeds WHERE user_id = :user_id;

-- name: cell_move_delete_rate_limits
DELETE FROM rate_limits WHERE user_id = :user_id;

-- name: cell_move_delete_live_reminder_bounds
-- The quota's bound of the user's live reminders (started afresh, from an exact count, by
-- their first create in the cell they live in).
DELETE FROM live_reminder_bounds WHERE user_id = :user_id;

-- name: cell_move_delete_queue_messages
-- The user's messages still in this cell's PostgreSQL queue (a quiet-hours hold's, due
-- back later) once they live elsewhere: nothing here would send them. Dead letters stay
-- for the operator.
DELETE FROM queue_messages
WHERE NOT dead_lettered AND body ->> 'user_id' = :user_id;

-- name: cell_move_schema_version
SELECT version_num FROM alembic_version;
