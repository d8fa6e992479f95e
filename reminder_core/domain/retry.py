"""Retry planning for sends (docs/design.md, "Retries and the dead-letter queue"):
exponential backoff with full jitter that honours Retry-After, bounded by attempts and by
the delivery budget.

Pure code on top of tenacity's strategies; the sender runs it with tenacity.Retrying.
"""

from __future__ import annotations

from dataclasses import dataclass

from tenacity import RetryCallState, wait_random_exponential

from reminder_core.errors import TransientDeliveryError


@dataclass(frozen=True, slots=True)
class RetryPolicy:
    """How one received message is retried before it goes back to the queue.

    Attributes:
        attempts: provider calls per receive (>= 1).
        base_s: first backoff ceiling; doubles per attempt (full jitter: uniform in
            [0, ceiling], AWS Architecture Blog "Exponential Backoff and Jitter").
        max_wait_s: longest wait between two calls in one receive. A provider that asks
            for more (Retry-After) gets its wish through the queue's visibility timeout.
        budget_s: no retry starts later than this after the first call of the receive.
    """

    attempts: int = 4
    base_s: float = 0.5
    max_wait_s: float = 10.0
    budget_s: float = 300.0


def retry_after_of(state: RetryCallState) -> float | None:
    """The Retry-After (seconds) carried by the last failure, if any."""
    outcome = state.outcome
    exc = outcome.exception() if outcome is not None else None
    return exc.retry_after_s if isinstance(exc, TransientDeliveryError) else None


def next_wait_s(policy: RetryPolicy, state: RetryCallState) -> float:
    """Wait before the next call: full-jitter exponential, but never less than the
    provider's Retry-After (RFC 9110 §10.2.3)."""
    jitter = wait_random_exponential(multiplier=policy.base_s, max=policy.max_wait_s)(state)
    return max(jitter, retry_after_of(state) or 0.0)


def should_stop(policy: RetryPolicy, state: RetryCallState) -> bool:
    """Stop retrying in-process: attempts used up, budget spent, or the provider asked
    for a longer pause than `max_wait_s` (the queue will wait instead)."""
    if state.attempt_number >= policy.attempts:
        return True
    if (state.seconds_since_start or 0.0) >= policy.budget_s:
        return True
    retry_after = retry_after_of(state)
    return retry_after is not None and retry_after > policy.max_wait_s


def requeue_delay_s(policy: RetryPolicy, receive_count: int, retry_after_s: float | None) -> float:
    """How long a message handed back to the queue stays hidden: Retry-After when given,
    else exponential in the receive count, capped at 5 minutes."""
    if retry_after_s is not None:
        return min(max(retry_after_s, 0.0), 12 * 3600)
    return min(policy.base_s * 2.0 ** (receive_count + 2), 300.0)
