"""A provider wrapper that measures every call: latency and result per provider."""

from __future__ import annotations

import time

from reminder_core.metrics import PROVIDER_LATENCY, PROVIDER_REQUESTS, error_class
from sender.providers.base import (
    OutgoingEmail,
    Provider,
    SendReceipt,
    close_provider,
    deduplicates_keys,
)


class InstrumentedProvider:
    """A `Provider` that forwards each call to `inner` and records, labelled with
    `inner.name`: `reminders_provider_request_duration_seconds` (the call's duration,
    failures included) and `reminders_provider_requests_total{result}` ("ok", or the
    error class of `reminder_core.metrics.error_class`).

    `sender.main.build_provider` wraps each concrete provider (under the failover, if
    any), so a call refused by an open circuit breaker is not a provider call and is not
    counted here.
    """

    def __init__(self, inner: Provider) -> None:
        self.inner = inner
        self.name = inner.name
        self.deduplicates_keys = deduplicates_keys(inner)

    def send(self, email: OutgoingEmail, *, idempotency_key: str) -> SendReceipt:
        """`inner.send`, measured; same return value and exceptions."""
        started = time.perf_counter()
        result = "ok"
        try:
            return self.inner.send(email, idempotency_key=idempotency_key)
        except BaseException as exc:
            result = error_class(exc)
            raise
        finally:
            PROVIDER_LATENCY.labels(provider=self.name).observe(time.perf_counter() - started)
            PROVIDER_REQUESTS.labels(provider=self.name, result=result).inc()

    def close(self) -> None:
        """Close the wrapped provider (`close_provider`)."""
        close_provider(self.inner)
