-- Statements on `webhook_endpoints` (docs/design.md, "Webhook channel"): the URLs users
-- registered for the webhook channel. Typed wrappers: reminder_core/store/webhook_endpoints.py.

-- name: webhook_endpoint_insert
-- Register one endpoint, unless the user has :max_per_user already (nothing back then);
-- the count is taken under the user's quota lock (reminder_core.quotas), held by the
-- caller's transaction.
INSERT INTO webhook_endpoints (user_id, url, secret, created_at)
SELECT :user_id, :url, :secret, :now
WHERE (SELECT count(*) FROM webhook_endpoints WHERE user_id = :user_id) < :max_per_user
RETURNING id, user_id, url, secret, created_at;

-- name: webhook_endpoint_list_for
-- The user's endpoints, oldest first (ix_webhook_endpoints_user).
SELECT id, user_id, url, secret, created_at
FROM webhook_endpoints
WHERE user_id = :user_id
ORDER BY created_at, id;

-- name: webhook_endpoint_get
SELECT id, user_id, url, secret, created_at
FROM webhook_endpoints
WHERE id = :id AND user_id = :user_id;

-- name: webhook_endpoint_delete
-- Delete the user's endpoint; its reminders fall back to email (ON DELETE SET NULL).
DELETE FROM webhook_endpoints WHERE id = :id AND user_id = :user_id RETURNING id;
