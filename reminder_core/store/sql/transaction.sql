-- Settings of the current transaction (no table). Typed wrappers:
-- reminder_core/store/transaction.py.

-- name: transaction_set_lock_timeout
-- For the rest of the transaction: give up on a lock after :timeout (text, e.g. '500ms').
SELECT set_config('lock_timeout', :timeout, true);

-- name: transaction_set_timeouts
-- For the rest of the transaction: end any statement, and give up on any lock, after
-- :ms milliseconds (text), so that a read-only check never hangs on a stuck table.
SELECT set_config('statement_timeout', :ms, true), set_config('lock_timeout', :ms, true);

-- name: transaction_ping
-- The database answers (readiness).
SELECT 1;
