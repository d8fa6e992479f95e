-- Statements on `rate_limits` (docs/operations.md, "Fair limits"): one row per user of the
-- /v1 API, its GCRA theoretical arrival time (TAT). Typed wrappers:
-- reminder_core/store/rate_limits.py.

-- name: rate_limit_take
-- Take one request from :user_id's budget at :take_now, atomically for every API process: the
-- TAT moves on by :emission_s unless that would put it more than :tolerance_s after :take_now
-- (the burst), in which case nothing changes. One row: the TAT after the statement and
-- whether the request was taken; no row when a concurrent first request of the user won
-- the insert and this one was refused (the caller treats it as refused).
-- A refused request's TAT is read FOR UPDATE: the row is already locked by the ON
-- CONFLICT above, and in READ COMMITTED a locking read returns the row's latest version,
-- where a plain read would return the one in the statement's snapshot, from before a
-- concurrent take this statement waited for (adversarial trial, 2026-12-06: a 429 said
-- `r=6` with q=5). PostgreSQL manual, "Read Committed Isolation Level", §13.2.1.
WITH
-- include: rate_limit_take_steps
SELECT tat, true AS taken FROM taken
UNION ALL
SELECT tat, false AS taken FROM refused;

-- part: rate_limit_take_steps
-- rate_limit_take's two steps, `taken` (the TAT moved on) and `refused` (the TAT read FOR
-- UPDATE when nothing was taken), as common table expressions of a WITH, at :take_now
-- (the take's own time).
taken AS (
    INSERT INTO rate_limits AS r (user_id, tat)
    VALUES (:user_id, CAST(:take_now AS timestamptz) + make_interval(secs => :emission_s))
    ON CONFLICT (user_id) DO UPDATE
    SET tat = GREATEST(r.tat, CAST(:take_now AS timestamptz)) + make_interval(secs => :emission_s)
    WHERE GREATEST(r.tat, CAST(:take_now AS timestamptz)) + make_interval(secs => :emission_s)
          <= CAST(:take_now AS timestamptz) + make_interval(secs => :tolerance_s)
    RETURNING r.tat
), refused AS (
    SELECT tat FROM rate_limits
    WHERE user_id = :user_id AND NOT EXISTS (SELECT 1 FROM taken)
    FOR UPDATE
)
