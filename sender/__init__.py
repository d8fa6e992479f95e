"""Sender workload: queue → profile → render → provider → delivery_log."""
