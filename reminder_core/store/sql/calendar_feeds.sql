-- Statements on `calendar_feeds` (docs/api.md, "Calendar feed and import"): one row per
-- user with an iCalendar feed, keyed by the SHA-256 of the feed URL's secret.
-- Typed wrappers: reminder_core/store/calendar_feeds.py.

-- name: calendar_feed_upsert
-- Create the user's feed, or rotate it: the new digest replaces the old one, so the old
-- URL stops working in the same commit.
INSERT INTO calendar_feeds AS f (user_id, secret_sha256, created_at)
VALUES (:user_id, :secret_sha256, :now)
ON CONFLICT (user_id) DO UPDATE
SET secret_sha256 = excluded.secret_sha256,
    created_at = excluded.created_at
RETURNING f.created_at;

-- name: calendar_feed_delete
-- Revoke the user's feed (no row: nothing to revoke).
DELETE FROM calendar_feeds WHERE user_id = :user_id;

-- name: calendar_feed_find
-- The feed whose secret has this digest (uq_calendar_feeds_secret_sha256).
SELECT user_id, secret_sha256 FROM calendar_feeds WHERE secret_sha256 = :secret_sha256;
