-- Settings of the current transaction (no table). Typed wrappers:
-- reminder_core/store/transaction.py.

-- name: transaction_set_lock_timeout
-- For the rest of the transaction: give up on a lock after :timeout (text, e.g. '500ms').
SELECT set_config('lock_timeout', :timeout, true);
