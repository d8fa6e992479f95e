"""Outbox sweeper workload: republish outbox rows the fast path left unpublished."""
