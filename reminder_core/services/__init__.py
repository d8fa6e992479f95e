"""Services: every state change of a reminder, called by the API, the CLI and the workers
(docs/design.md, "State machines"). A service decides the change and writes it through
`reminder_core.store`; the caller owns the transaction and commits."""
