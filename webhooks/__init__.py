"""Inbound provider webhooks (bounces, complaints): verify, parse, apply exactly once."""
