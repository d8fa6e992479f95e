"""The store: the only code that runs SQL (docs/design.md, "Data model").

One module per table (`reminders`, `outbox`, `queue_messages`, `delivery_log`,
`suppressions`, `webhook_events`, `calendar_feeds`, ...) wraps the named statements of
`sql/<table>.sql` in typed functions: arguments are typed values, results are
dataclasses, and the caller owns the transaction (every function takes the `Connection`
it runs on and never commits).
"""
