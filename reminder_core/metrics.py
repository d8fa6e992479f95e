"""Prometheus metrics shared by the workloads (names of DESIGN §6)."""

from __future__ import annotations

from prometheus_client import Counter, Enum, Histogram

CLAIMS = Counter("reminders_claims_total", "Occurrences claimed into the outbox.")
PUBLISHED = Counter(
    "reminders_outbox_published_total", "Outbox rows published to the queue.", ["path"]
)
SENDS = Counter(
    "reminders_sends_total",
    "Occurrences handled by the sender, by provider and outcome.",
    ["provider", "outcome"],
)
DELIVERY_LAG = Histogram(
    "delivery_lag_seconds",
    "sent_at - run_time_utc of each sent occurrence, seconds.",
    buckets=(0.5, 1, 2, 5, 10, 30, 60, 120, 180, 300, 600, 1800, 3600),
)
BREAKER_STATE = Enum(
    "reminders_provider_breaker_state",
    "Circuit breaker state of each email provider (1 for the current state).",
    ["provider"],
    states=["closed", "open", "half-open"],
)
