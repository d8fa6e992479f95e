"""Settle stage: delete the finished messages, hand the others back for their backoff;
count and log each outcome."""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence
from datetime import datetime

from prometheus_client import Histogram

from reminder_core.logging import delivery_fields
from reminder_core.metrics import DELIVERY_LAG, SEND_FAILURES, SENDS, error_class
from reminder_core.queue import Queue
from sender.work import Decided, Outcome, ShutdownRequested, log

#: Outcomes logged one line per message when a batch settles, and at which level; RETRY,
#: FAILED and DROPPED are logged where they are decided, with their error. SENT is DEBUG:
#: a JSON line per sent message adds some 40% to the CPU of an in-process send
#: (docs/operations.md "Logs"); each batch logs one INFO summary ("deliveries settled") instead.
OUTCOME_LOG_LEVELS = {
    Outcome.SENT: logging.DEBUG,
    Outcome.CANCELLED: logging.INFO,
    Outcome.MISSED: logging.INFO,
    Outcome.SUPPRESSED: logging.INFO,
    Outcome.HELD: logging.INFO,
    Outcome.DUPLICATE: logging.DEBUG,
    Outcome.BUSY: logging.DEBUG,
    Outcome.RELEASED: logging.DEBUG,
}


def settle(queue: Queue, decided: Sequence[Decided], *, now: datetime, provider: str) -> None:
    """Delete the messages whose occurrence is done (one call) and change the visibility
    of those handed back (one batch call): a RETRY for its backoff, a RELEASED at once,
    a BUSY until its holder's lease ends, a HELD until its quiet hours end. Counts
    reminders_sends_total, failures and delivery_lag (before the queue calls, so that a
    queue that fails loses no count); logs each outcome (OUTCOME_LOG_LEVELS) and one
    INFO summary.

    Args:
        decided: the batch's messages, each once.
        now: aware UTC, the base of the visibility changes.
        provider: the provider name for outcomes that reached none.

    Raises:
        InfrastructureError / sqlalchemy.exc.DBAPIError: the queue failed; a message not
            deleted comes back and is found terminal (a DUPLICATE).
    """
    delete: list[str] = []
    hide: list[tuple[str, float]] = []
    outcomes: dict[tuple[str, str], int] = {}
    # Resolved once per batch (`labels()` takes a lock and builds a key at every call).
    lag = {held: DELIVERY_LAG.labels(held="true" if held else "false") for held in (False, True)}
    for d in decided:
        if not d.handed_back:
            delete.append(d.message.receipt_handle)
        elif d.hide_for_s is not None:
            hide.append((d.message.receipt_handle, d.hide_for_s))
        by = d.provider or provider
        outcomes[(by, d.outcome.value)] = outcomes.get((by, d.outcome.value), 0) + 1
        _observe(d, by, lag)
    # Counted before the queue calls: the outcomes happened (and are recorded) whether
    # or not the queue then answers (a delete that raised left 2 of 4,000 sends uncounted
    # in a trial's crash run; its messages come back and are counted `duplicate`).
    for (by, outcome), n in outcomes.items():
        SENDS.labels(provider=by, outcome=outcome).inc(n)
    queue.delete(delete)
    if hide:
        queue.change_visibility_batch(hide, now=now)
    if log.isEnabledFor(logging.INFO):
        _summary(len(decided), outcomes)


def _observe(d: Decided, provider: str, lag: Mapping[bool, Histogram]) -> None:
    """Failure and lag metrics, and the outcome's log line, of one message; `lag` is
    `delivery_lag_seconds` by whether quiet hours held the occurrence."""
    if (
        d.outcome in (Outcome.FAILED, Outcome.RETRY)
        and d.error is not None
        and not isinstance(d.error, ShutdownRequested)
    ):
        SEND_FAILURES.labels(provider=provider, error_class=error_class(d.error)).inc()
    if d.outcome is Outcome.SENT and d.sent_at is not None and d.run_time_utc is not None:
        lag[d.held].observe(max(0.0, (d.sent_at - d.run_time_utc).total_seconds()))
    level = OUTCOME_LOG_LEVELS.get(d.outcome)
    if level is not None and log.isEnabledFor(level):
        log.log(
            level,
            "delivery %s",
            d.outcome.value,
            extra=delivery_fields(
                d.reminder_id, d.run_time_utc, d.message.receive_count, provider,
                outcome=d.outcome.value, provider_calls=d.attempts, recipient=d.recipient,
                sent_at=d.sent_at,
            ),
        )  # fmt: skip


def _summary(messages: int, outcomes: dict[tuple[str, str], int]) -> None:
    totals: dict[str, int] = {}
    sent_by: dict[str, int] = {}
    for (provider, outcome), n in outcomes.items():
        totals[outcome] = totals.get(outcome, 0) + n
        if outcome == Outcome.SENT:
            sent_by[provider] = sent_by.get(provider, 0) + n
    log.info(
        "deliveries settled",
        extra={"messages": messages, "outcomes": totals, "sent_by_provider": sent_by},
    )
