-- Statements on `live_reminder_bounds` (docs/operations.md, "Fair limits"): one row per
-- user, an upper bound of their live (pending, claimed or paused) reminders. Typed
-- wrappers: reminder_core/store/live_reminder_bounds.py.

-- name: live_reminder_bound_increment
-- One more live reminder for :user_id: raise the bound, row-locked until the transaction
-- ends (the user's quota checks run one at a time). No row: the user has none yet.
UPDATE live_reminder_bounds SET bound = bound + 1
WHERE user_id = :user_id
RETURNING bound;

-- name: live_reminder_bound_start
-- The user's first bound: their live reminders counted now, plus this one; a concurrent
-- first create that inserted the row first (the insert waits for it) is counted in it, so
-- this one only raises it.
INSERT INTO live_reminder_bounds AS b (user_id, bound)
VALUES (
    :user_id,
    (SELECT count(*) FROM reminders
     WHERE user_id = :user_id AND status IN ('pending', 'claimed', 'paused')) + 1
)
ON CONFLICT (user_id) DO UPDATE SET bound = b.bound + 1
RETURNING b.bound;

-- name: live_reminder_bound_reset
-- Set the bound to an exact count taken under its row lock.
UPDATE live_reminder_bounds SET bound = :bound WHERE user_id = :user_id;
