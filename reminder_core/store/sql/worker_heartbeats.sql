-- Statements on `worker_heartbeats` (docs/design.md, "Workers"): one row per workload loop
-- of each running process. Typed wrappers: reminder_core/store/worker_heartbeats.py.

-- name: worker_heartbeat_beat_many
-- Insert or refresh the rows of one process's loops; :rows is a JSON array of
-- {id, role, last_tick_at, consecutive_failures} and the process fields are binds.
-- A row marked stopped stays stopped (a late beat after the exit must not revive it).
INSERT INTO worker_heartbeats AS w
    (id, role, host, pid, process, version, started_at, last_seen_at, last_tick_at,
     consecutive_failures)
SELECT r.id, r.role, :host, :pid, :process, :version, :started_at, :now, r.last_tick_at,
       r.consecutive_failures
FROM json_to_recordset(CAST(:rows AS json))
     AS r(id uuid, role text, last_tick_at timestamptz, consecutive_failures int)
ON CONFLICT (id) DO UPDATE
SET last_seen_at = excluded.last_seen_at,
    last_tick_at = excluded.last_tick_at,
    consecutive_failures = excluded.consecutive_failures
WHERE w.stopped_at IS NULL;

-- name: worker_heartbeat_mark_stopped
-- A clean exit: the rows of :ids stopped at :now (already stopped ones keep their time).
UPDATE worker_heartbeats
SET stopped_at = :now, last_seen_at = :now
WHERE id = ANY(CAST(:ids AS uuid[])) AND stopped_at IS NULL;

-- name: worker_heartbeat_list_since
-- Every row seen at or after :since, by role, then newest first
-- (ix_worker_heartbeats_role_last_seen_at).
SELECT id, role, host, pid, process, version, started_at, last_seen_at, last_tick_at,
       consecutive_failures, stopped_at
FROM worker_heartbeats
WHERE last_seen_at >= :since
ORDER BY role, last_seen_at DESC, id;

-- name: worker_heartbeat_last_seen_by_role
-- The newest row of each role, however old (a role whose workers all died long ago is
-- still named, with when it was last seen).
SELECT DISTINCT ON (role)
       id, role, host, pid, process, version, started_at, last_seen_at, last_tick_at,
       consecutive_failures, stopped_at
FROM worker_heartbeats
ORDER BY role, last_seen_at DESC, id;

-- name: worker_heartbeat_delete_expired
-- Rows last seen before :cutoff, at most :limit (retention).
DELETE FROM worker_heartbeats
WHERE id = ANY(ARRAY(
        SELECT id FROM worker_heartbeats WHERE last_seen_at < :cutoff LIMIT :limit));
