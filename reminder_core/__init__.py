"""Shared kernel of the reminder scheduler: schema, settings, time rules, queue, workers.

This package imports none of the workload packages (`reminder_api`, `coordinator`,
`outbox_sweeper`, `sender`); they all import it.
"""
