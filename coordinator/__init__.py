"""Coordinator workload: claim due reminders into the outbox and publish them."""
