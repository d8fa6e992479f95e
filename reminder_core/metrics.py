"""Prometheus metrics of every workload (docs/design.md, "Metrics"; the list is in
docs/operations.md).

Metrics live in the default registry (`prometheus_client.REGISTRY`) and are served on
`/metrics`: by the API on its own port, by each worker on METRICS_PORT
(`reminder_core.metrics_server`). Defining a metric has no side effect beyond the
registry; nothing is served at import time.

The backlog gauges (`BACKLOG_GAUGES`: next_run_lag, outbox, queue and DLQ depth, ...) need
database or queue queries, so only the maintenance workload computes them, each tick
(`reminder_core.backlog.refresh_backlog_gauges`). They are created unregistered and the
maintenance process registers them (`register_backlog_gauges`): another workload does not
export a stale 0 that would hide the real value (or the absence of any maintenance).
"""

from __future__ import annotations

import weakref

from prometheus_client import REGISTRY, CollectorRegistry, Counter, Enum, Gauge, Histogram

from reminder_core.errors import (
    InfrastructureError,
    PermanentDeliveryError,
    TransientDeliveryError,
)

# --- coordinator and outbox sweeper ---------------------------------------------------

CLAIMS = Counter("reminders_claims_total", "Occurrences claimed into the outbox.")
CLAIMS_PER_TICK = Histogram(
    "reminders_claims_per_tick",
    "Reminders claimed by one coordinator tick (at most CLAIM_BATCH_SIZE).",
    buckets=(0, 1, 5, 10, 50, 100, 250, 500, 1000, 2500, 5000, 10_000),
)
PUBLISHED = Counter(
    "reminders_outbox_published_total",
    "Outbox rows published to the queue, by path: fast (coordinator, right after the"
    " claim) or sweeper (the safety net).",
    ["path"],
)

# --- the shared worker loop (reminder_core/worker/loop.py) --------------------------------

TICK_DURATION = Histogram(
    "reminders_tick_duration_seconds",
    "Duration of one tick of a worker loop (run_once), seconds, failed ticks included.",
    ["workload"],
    buckets=(0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120, 300),
)
TICK_FAILURES = Counter(
    "reminders_tick_failures_total", "Ticks that raised (the loop backs off).", ["workload"]
)
HEARTBEAT = Gauge(
    "reminders_worker_heartbeat_timestamp_seconds",
    "Unix time at which a worker loop last started or finished a tick.",
    ["workload"],
)

# --- sender -----------------------------------------------------------------------------

SENDER_RECEIVE_SIZE = Gauge(
    "reminders_sender_receive_size",
    "Messages the sender's next receive asks for: SENDER_BATCH_SIZE until it has measured"
    " its pace, then SENDER_BATCH_TARGET_S of its work at that pace, at most"
    " SENDER_BATCH_MAX.",
)
SENDS = Counter(
    "reminders_sends_total",
    "Occurrences handled by the sender, by provider and outcome (sent, failed, retry,"
    " duplicate, cancelled, missed, busy, dropped, released, suppressed, held).",
    ["provider", "outcome"],
)
POSSIBLE_DUPLICATES = Counter(
    "reminders_possible_duplicates_total",
    "Sends of an occurrence whose earlier sender died with the outcome unknown (its"
    " `sending` row was taken over after the lease ended): a second email where the"
    " provider does not deduplicate on the idempotency key (SES, SMTP), by provider.",
    ["provider"],
)
SENDS_RECOVERED = Counter(
    "reminders_sends_recovered_total",
    "Occurrences whose earlier sender died (or lost the answer) after the provider"
    " accepted the email, found in the provider's own feedback (a `Send`/`Delivery` or"
    " `email.sent`/`email.delivered` webhook naming the idempotency key) and recorded"
    " `sent` without sending again, by provider (counted when found: a sender that dies"
    " before its record commits counts it again).",
    ["provider"],
)
SEND_EVIDENCE = Counter(
    "reminders_send_evidence_total",
    "Provider webhook events reporting that an email was accepted or delivered (they carry"
    " our idempotency key), by provider and outcome: `recorded` on a delivery still"
    " `sending` (its sender has not written the answer, or died), `known` (the delivery"
    " had its answer already), `unknown` (no delivery of ours has that key).",
    ["provider", "outcome"],
)
COMPLETER_FLUSHES = Counter(
    "reminders_completer_flushes_total",
    "Flushes of the sender's streaming completer (one statement each).",
)
COMPLETER_FLUSHED = Counter(
    "reminders_completer_flushed_total",
    "Send outcomes recorded by the sender's streaming completer.",
)
COMPLETER_UNRECORDED = Counter(
    "reminders_completer_unrecorded_total",
    "Send outcomes the streaming completer could not record because the database refused"
    " their row, even with its provider text escaped; the row stays as it was and its"
    " message comes back after its visibility timeout (docs/design.md).",
)
COMPLETER_WAIT = Histogram(
    "reminders_completer_wait_seconds",
    "Seconds from a provider's answer to its outcome being committed (the window in"
    " which a crash repeats an accepted send).",
    buckets=(0.001, 0.002, 0.005, 0.01, 0.02, 0.05, 0.1, 0.25, 0.5, 1.0, 5.0),
)
SEND_FAILURES = Counter(
    "reminders_send_failures_total",
    "Occurrences whose handling ended failed (permanent) or handed back for a retry, by"
    " provider and error class (permanent, transient, ambiguous, infrastructure,"
    " unexpected).",
    ["provider", "error_class"],
)
DELIVERY_LAG = Histogram(
    "delivery_lag_seconds",
    "sent_at - run_time_utc of each sent occurrence, seconds; held: whether the user's"
    ' quiet hours held it (late on purpose; alerts read held="false").',
    ["held"],
    buckets=(0.5, 1, 2, 5, 10, 30, 60, 120, 150, 180, 300, 600, 1800, 3600),
)
for _held in ("false", "true"):  # both series exist from the start, at zero
    DELIVERY_LAG.labels(held=_held)
PROVIDER_REQUESTS = Counter(
    "reminders_provider_requests_total",
    "Calls to an email provider, by provider and result (ok, or the error class).",
    ["provider", "result"],
)
PROVIDER_LATENCY = Histogram(
    "reminders_provider_request_duration_seconds",
    "Duration of one call to an email provider, seconds, failures included.",
    ["provider"],
    buckets=(0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 15, 30, 60),
)
BREAKER_STATE = Enum(
    "reminders_provider_breaker_state",
    "Circuit breaker state of each email provider (1 for the current state).",
    ["provider"],
    states=["closed", "open", "half-open"],
)
BREAKER_NOT_CLOSED_SINCE = Gauge(
    "reminders_provider_breaker_not_closed_since_timestamp_seconds",
    "Unix time at which the circuit breaker of each email provider last left the closed"
    " state (failed half-open probes do not move it); 0 while it is closed.",
    ["provider"],
)

# --- retention (maintenance workload, coordinator/maintenance/retention.py) -------------

RETENTION_DELETED = Counter(
    "reminders_retention_deleted_rows_total",
    "Expired rows deleted by retention, by table: outbox (published), webhook_events, and"
    " delivery_log (terminal rows of its default partition; dropped weekly partitions are"
    " counted in reminders_retention_partitions_total).",
    ["table"],
)
RETENTION_PARTITIONS = Counter(
    "reminders_retention_partitions_total",
    "delivery_log weekly partitions handled by retention, by action: created (ahead),"
    " dropped (expired), kept (expired, but still holding a `sending` row: counted at each"
    " retention run until it can go).",
    ["action"],
)

# --- API ----------------------------------------------------------------------------------

API_REQUESTS = Counter(
    "reminders_api_requests_total",
    "HTTP requests answered by the API, by method, route template and status code.",
    ["method", "route", "status"],
)
API_LATENCY = Histogram(
    "reminders_api_request_duration_seconds",
    "Time to answer one HTTP request, seconds, by method and route template.",
    ["method", "route"],
    buckets=(0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10),
)

API_SHED = Counter(
    "reminders_api_shed_total",
    "Requests answered 503 without being worked on because the process had"
    " API_MAX_IN_FLIGHT requests in flight for API_QUEUE_TIMEOUT_S (overload), by method.",
    ["method"],
)

API_LIMITED = Counter(
    "reminders_api_limited_total",
    'Requests refused 429 by a fair limit (docs/operations.md, "Fair limits"), by'
    " limit: rate (RATE_LIMIT_PER_MINUTE) or the quota's setting, e.g."
    " QUOTA_LIVE_REMINDERS. A snooze link refused by a quota counts too.",
    ["limit"],
)
API_LIMITED.labels(limit="rate")  # exported (0) from the start, as rates need

# --- backlog gauges: computed and exported by the maintenance workload only ---------------

NEXT_RUN_LAG = Gauge(
    "next_run_lag_seconds",
    "now - the oldest next_run_utc of a due reminder not yet delivered (status pending or"
    " claimed), seconds; 0 when none is due.",
    registry=None,
)
OLDEST_PENDING_AGE = Gauge(
    "reminders_oldest_pending_age_seconds",
    "now - the oldest next_run_utc of a due reminder not yet claimed by the coordinator"
    " (status pending), seconds; 0 when none.",
    registry=None,
)
DUE_BACKLOG = Gauge(
    "reminders_due_backlog",
    "Due reminders not yet claimed by the coordinator (status pending, next_run_utc <= now).",
    registry=None,
)
OUTBOX_UNPUBLISHED = Gauge(
    "reminders_outbox_unpublished", "Outbox rows not yet published to the queue.", registry=None
)
OUTBOX_OLDEST_AGE = Gauge(
    "reminders_outbox_oldest_unpublished_age_seconds",
    "Age of the oldest unpublished outbox row, seconds; 0 when none.",
    registry=None,
)
QUEUE_DEPTH = Gauge(
    "reminders_queue_depth",
    "Messages in the queue: visible (waiting for a sender) or not_visible (in flight or"
    " delayed until their due time). SQS: approximate.",
    ["state"],
    registry=None,
)
DLQ_DEPTH = Gauge(
    "reminders_dlq_depth",
    "Messages in the dead-letter queue (recorded or not). SQS: approximate.",
    registry=None,
)
BACKLOG_UPDATED = Gauge(
    "reminders_backlog_updated_timestamp_seconds",
    "Unix time of the last successful refresh of the backlog gauges (maintenance).",
    registry=None,
)

#: The gauges only the maintenance workload computes (see the module docstring).
BACKLOG_GAUGES: tuple[Gauge, ...] = (
    NEXT_RUN_LAG,
    OLDEST_PENDING_AGE,
    DUE_BACKLOG,
    OUTBOX_UNPUBLISHED,
    OUTBOX_OLDEST_AGE,
    QUEUE_DEPTH,
    DLQ_DEPTH,
    BACKLOG_UPDATED,
)

_registered: weakref.WeakSet[CollectorRegistry] = weakref.WeakSet()


def register_backlog_gauges(registry: CollectorRegistry = REGISTRY) -> None:
    """Add `BACKLOG_GAUGES` to `registry` (default: the one `/metrics` serves), once.

    Called by the process that computes them (the maintenance workload, `reminders dev`).
    Idempotent per registry.
    """
    if registry in _registered:
        return
    for gauge in BACKLOG_GAUGES:
        registry.register(gauge)
    _registered.add(registry)


def error_class(exc: BaseException) -> str:
    """The `error_class` / `result` label of a failed send or provider call.

    Returns one of: "permanent" (PermanentDeliveryError: never retried), "ambiguous"
    (TransientDeliveryError that the provider may have accepted), "transient" (any other
    TransientDeliveryError), "infrastructure" (InfrastructureError: a dependency such as
    the profile service), "unexpected" (anything else: a defect).
    """
    if isinstance(exc, PermanentDeliveryError):
        return "permanent"
    if isinstance(exc, TransientDeliveryError):
        return "ambiguous" if exc.ambiguous else "transient"
    if isinstance(exc, InfrastructureError):
        return "infrastructure"
    return "unexpected"
