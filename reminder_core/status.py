"""What an SRE checks first, read from the database and the queue, each figure against its
threshold (the ALERT_* settings, the values of the alert rules in
k8s/base/prometheusrule.yaml): `reminders status` prints it (reminders/status.py), the
API's admin overview returns it."""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import asdict, dataclass, field, replace
from datetime import datetime, timedelta
from enum import StrEnum
from typing import Any

from redis import Redis
from redis.exceptions import RedisError
from sqlalchemy import Connection, Engine
from sqlalchemy.exc import SQLAlchemyError

from reminder_core.backlog import age_s, read_backlog
from reminder_core.boundary import one_line, schema_missing
from reminder_core.breakers import STATE_CLOSED, BreakerReading, read_shared_breaker
from reminder_core.domain.states import DeliveryStatus
from reminder_core.errors import InfrastructureError
from reminder_core.queue import Queue
from reminder_core.settings import Settings
from reminder_core.store import delivery_log, transaction, worker_heartbeats
from reminder_core.store.worker_heartbeats import WorkerRow

log = logging.getLogger(__name__)

#: Window of the "last hour" figures, seconds.
WINDOW_S = 3600.0

#: Delivery states counted as failures (docs/design.md, "Delivery states": the terminal
#: states that sent nothing usable, apart from cancelled and missed).
FAILURE_STATES = (
    DeliveryStatus.FAILED,
    DeliveryStatus.BOUNCED,
    DeliveryStatus.COMPLAINED,
    DeliveryStatus.SUPPRESSED,
)


class State(StrEnum):
    """Verdict of one check."""

    OK = "ok"  # within its threshold
    ALERT = "alert"  # over its threshold
    INFO = "info"  # shown for context; no threshold
    UNKNOWN = "unknown"  # could not be read


@dataclass(frozen=True, slots=True)
class Check:
    """One line of the report.

    Attributes:
        name: stable key for scripts (`next_run_lag`, `dlq_depth`, ...).
        label: what a person reads.
        value: the figure (seconds for unit "s"), a breaker state, or None (unknown, or
            nothing to measure: see `detail`).
        unit: "s" (seconds) or "" (a count or a state).
        threshold: over this is an alert; None: no threshold. For the `workers_<role>`
            checks it is a floor: fewer live workers than this is an alert.
        state: the verdict.
        detail: why, in words (the error when unknown; a breakdown).
        parts: a breakdown by kind (failures by delivery status), else empty.
        cell: with CELLS, the cell it was read in (None: one cell).
    """

    name: str
    label: str
    value: float | int | str | None
    unit: str
    threshold: float | None
    state: State
    detail: str = ""
    parts: dict[str, int] = field(default_factory=dict)
    cell: str | None = None


def judge(value: float | None, threshold: float | None) -> State:
    """ALERT when `value` is over `threshold` (strictly, as the alert rules' `>`), OK when
    not, INFO without a threshold, UNKNOWN without a value."""
    if value is None:
        return State.UNKNOWN
    if threshold is None:
        return State.INFO
    return State.ALERT if value > threshold else State.OK


def measured(
    name: str, label: str, value: float | None, unit: str, threshold: float | None
) -> Check:
    """A check of `value` against `threshold` (see `judge`)."""
    return Check(name, label, value, unit, threshold, judge(value, threshold))


@dataclass(frozen=True, slots=True)
class StatusReport:
    """Every check, as of `checked_at` (aware UTC)."""

    checked_at: datetime
    checks: list[Check]

    @property
    def exit_code(self) -> int:
        """1 when a check is over its threshold; else 2 when one could not be read; else 0."""
        states = {c.state for c in self.checks}
        if State.ALERT in states:
            return 1
        if State.UNKNOWN in states:
            return 2
        return 0

    @property
    def overall(self) -> str:
        """The verdict as `exit_code` tells it: "alert", "unknown" or "ok"."""
        return {1: "alert", 2: "unknown"}.get(self.exit_code, "ok")

    def to_json(self) -> dict[str, Any]:
        """The report as JSON-ready data: {"checked_at": ISO 8601, "status": "ok" | "alert"
        | "unknown", "exit_code": int, "checks": [{name, label, value, unit, threshold,
        state, detail, parts}, ...]}."""
        return {
            "checked_at": self.checked_at.isoformat(),
            "status": self.overall,
            "exit_code": self.exit_code,
            "checks": [asdict(c) for c in self.checks],
        }


def in_cell(check: Check, cell: str | None) -> Check:
    """`check` as read in `cell` (with CELLS): `cell` set and the label starting
    "cell NAME: "; None: unchanged (one cell)."""
    if cell is None:
        return check
    return replace(check, cell=cell, label=f"cell {cell}: {check.label}")


def collect_status(
    engine: Engine,
    queue: Queue,
    settings: Settings,
    *,
    now: datetime,
    redis_factory: Callable[[str], Redis] | None = None,
) -> StatusReport:
    """Read every figure of the report as of `now` (aware UTC).

    Reads (nothing is written): the backlog statement, delivery_log for the last hour
    (failures by status, p99 of sent_at - run_time_utc), `queue.depth()`, the workers'
    heartbeat rows (one check per role of ALERT_WORKER_ROLES), and with
    BREAKER_REDIS_URL the shared breaker keys. A source that fails makes its checks
    UNKNOWN with the error in `detail`; the others are still read.

    Args:
        redis_factory: builds a Redis client from BREAKER_REDIS_URL (tests); default
            `Redis.from_url` with 2 s timeouts.
    """
    checks: list[Check] = []
    checks += _backlog_checks(engine, settings, now)
    checks += _delivery_checks(engine, settings, now)
    checks += _queue_checks(queue, settings, now)
    checks += _breaker_checks(settings, now, redis_factory)
    checks += _worker_checks(engine, settings, now)
    return StatusReport(checked_at=now, checks=checks)


#: A status read never waits longer than this on a lock or a slow query (a stuck table
#: must show as UNKNOWN, not hang the command; operations trial).
STATEMENT_TIMEOUT_MS = 5000


def _bounded(conn: Connection) -> None:
    """Bound every statement of this read-only transaction (statement and lock waits)."""
    transaction.set_timeouts(conn, timeout_ms=STATEMENT_TIMEOUT_MS)


def _unknown(name: str, label: str, unit: str, threshold: float | None, exc: Exception) -> Check:
    """An UNKNOWN check: the error in one short line (the driver's message, not the
    statement); a database without the schema says to migrate it."""
    if schema_missing(exc):
        detail = "the database lacks the reminders schema: run `reminders migrate`"
    else:
        reason = one_line(str(getattr(exc, "orig", None) or exc))
        detail = f"{type(exc).__name__}: {reason[:300]}"
    return Check(name, label, None, unit, threshold, State.UNKNOWN, detail)


def _backlog_checks(engine: Engine, settings: Settings, now: datetime) -> list[Check]:
    lag = settings.alert_next_run_lag_s
    outbox_age = settings.alert_outbox_age_s
    try:
        with engine.connect() as conn:
            _bounded(conn)
            b = read_backlog(conn, now)
    except SQLAlchemyError as exc:
        return [
            _unknown("next_run_lag", "next_run_lag", "s", lag, exc),
            _unknown("oldest_pending_age", "oldest pending age", "s", lag, exc),
            _unknown("due_backlog", "due backlog", "", None, exc),
            _unknown("outbox_unpublished", "outbox unpublished", "", None, exc),
            _unknown("outbox_oldest_age", "outbox oldest age", "s", outbox_age, exc),
        ]
    return [
        measured("next_run_lag", "next_run_lag", b.next_run_lag_s,
                 "s", lag),
        measured("oldest_pending_age", "oldest pending age", b.oldest_pending_age_s,
                 "s", lag),
        measured("due_backlog", "due backlog", b.due_backlog, "", None),
        measured("outbox_unpublished", "outbox unpublished", b.outbox_unpublished, "", None),
        measured("outbox_oldest_age", "outbox oldest age", b.outbox_oldest_age_s,
                 "s", outbox_age),
    ]  # fmt: skip


def _delivery_checks(engine: Engine, settings: Settings, now: datetime) -> list[Check]:
    since = now - timedelta(seconds=WINDOW_S)
    p99_limit = settings.alert_delivery_lag_p99_s
    failure_limit = settings.alert_failures_last_hour
    p99_label = "delivery_lag p99 (1 h)"
    failures_label = "failures (1 h)"
    try:
        with engine.connect() as conn:
            _bounded(conn)
            lag = delivery_log.lag_p99_since(conn, since=since)
            by_status = delivery_log.count_failures_since(conn, since=since)
    except SQLAlchemyError as exc:
        return [
            _unknown("delivery_lag_p99", p99_label, "s", p99_limit, exc),
            _unknown("failures_last_hour", failures_label, "", failure_limit, exc),
        ]
    if lag.p99_s is not None:  # None: none sent
        p99 = measured("delivery_lag_p99", p99_label, lag.p99_s, "s", p99_limit)
        p99 = replace(p99, detail=f"{lag.sent} sent")
    else:
        p99 = Check("delivery_lag_p99", p99_label, None, "s", p99_limit, State.OK, "none sent")
    parts = {s.value: by_status.get(s, 0) for s in FAILURE_STATES}
    failures = measured("failures_last_hour", failures_label, sum(parts.values()), "",
                        failure_limit)  # fmt: skip
    detail = ", ".join(f"{s} {n}" for s, n in parts.items())
    return [p99, replace(failures, detail=detail, parts=parts)]


def _queue_checks(queue: Queue, settings: Settings, now: datetime) -> list[Check]:
    dlq_limit = settings.alert_dlq_depth
    try:
        depth = queue.depth(now=now)
    except (InfrastructureError, SQLAlchemyError) as exc:
        return [
            _unknown("queue_visible", "queue visible", "", None, exc),
            _unknown("queue_not_visible", "queue in flight/delayed", "", None, exc),
            _unknown("dlq_depth", "DLQ depth", "", dlq_limit, exc),
        ]
    return [
        measured("queue_visible", "queue visible", depth.visible, "", None),
        measured("queue_not_visible", "queue in flight/delayed", depth.not_visible, "", None),
        measured("dlq_depth", "DLQ depth", depth.dead_lettered, "", dlq_limit),
    ]


def _breaker_checks(
    settings: Settings, now: datetime, redis_factory: Callable[[str], Redis] | None
) -> list[Check]:
    names = [settings.email_provider]
    if not settings.email_provider_backup:
        return [
            Check("breakers", "circuit breakers", None, "", None, State.INFO,
                  "no failover (EMAIL_PROVIDER_BACKUP unset): no breaker")
        ]  # fmt: skip
    names.append(settings.email_provider_backup)
    if not settings.breaker_redis_url:
        return [
            Check("breakers", "circuit breakers", None, "", None, State.INFO,
                  "per process (BREAKER_REDIS_URL unset): see the metrics"
                  " reminders_provider_breaker_state and"
                  " reminders_provider_breaker_not_closed_since_timestamp_seconds"
                  " of each sender")
        ]  # fmt: skip
    limit = settings.alert_breaker_open_s
    factory = redis_factory or _redis_client
    checks = []
    try:
        redis = factory(settings.breaker_redis_url)
        try:
            states = {name: read_shared_breaker(redis, name) for name in names}
        finally:
            redis.close()
    except RedisError as exc:
        return [_unknown(f"breaker_{n}", f"breaker {n}", "", limit, exc) for n in names]
    for name, reading in states.items():
        label = f"breaker {name}"
        if reading.state == STATE_CLOSED:
            checks.append(Check(f"breaker_{name}", label, reading.state, "", limit, State.OK))
            continue
        checks.append(_not_closed_check(name, label, reading, limit, now))
    return checks


def _not_closed_check(
    name: str, label: str, reading: BreakerReading, limit: float, now: datetime
) -> Check:
    """How long an open or half-open breaker has not been closed, against `limit`.

    Measured from `not_closed_since` (when it left the closed state), not pybreaker's
    opened_at, which every failed half-open probe moves: a breaker that is down for good
    would otherwise never look older than BREAKER_RESET_TIMEOUT_S. Without the key (a
    sender older than it), opened_at is all there is, and the detail says so.
    """
    if reading.not_closed_since is not None:
        open_s = age_s(now, reading.not_closed_since)
        detail = f"not closed for {open_s:.0f} s"
    elif reading.opened_at is not None:
        open_s = age_s(now, reading.opened_at)
        detail = f"last (re)opened {open_s:.0f} s ago; when it left closed is not recorded"
    else:
        open_s, detail = None, "opened at ?"
    return Check(f"breaker_{name}", label, reading.state, "", limit, judge(open_s, limit), detail)


def live_workers(rows: list[WorkerRow], *, now: datetime, stale_after_s: float) -> list[WorkerRow]:
    """The rows of `rows` whose process is live at `now` (aware UTC): not stopped, and
    heard from within `stale_after_s` seconds (WORKER_STALE_AFTER_S)."""
    return [r for r in rows if r.stopped_at is None and age_s(now, r.last_seen_at) <= stale_after_s]


def _worker_checks(engine: Engine, settings: Settings, now: datetime) -> list[Check]:
    """One check per role of ALERT_WORKER_ROLES: the count of its live workers, ALERT at
    0 (the detail names the last one seen, and when), with each live one's host:pid and
    the age of its loop's last tick; a role outside the list that has live workers is
    shown as INFO."""
    stale = settings.worker_stale_after_s
    roles = list(settings.alert_worker_roles)
    try:
        with engine.connect() as conn:
            _bounded(conn)
            recent = worker_heartbeats.list_since(conn, since=now - timedelta(seconds=stale))
            last_seen = worker_heartbeats.last_seen_by_role(conn)
    except SQLAlchemyError as exc:
        return [_unknown(f"workers_{r}", f"live {r} workers", "", 1, exc) for r in roles]
    live = live_workers(recent, now=now, stale_after_s=stale)
    checks = []
    for role in roles + sorted({r.role for r in live} - set(roles)):
        mine = [r for r in live if r.role == role]
        threshold = 1 if role in roles else None
        if mine:
            detail = ", ".join(_worker_detail(r, now) for r in mine)
            state = State.OK if threshold is not None else State.INFO
        else:
            last = last_seen.get(role)
            detail = (
                "never seen"
                if last is None
                else f"none live; last {last.host}:{last.pid}"
                f" {'stopped' if last.stopped_at else 'seen'}"
                f" {age_s(now, last.stopped_at or last.last_seen_at):.0f} s ago"
            )
            state = State.ALERT
        checks.append(
            Check(f"workers_{role}", f"live {role} workers", len(mine), "", threshold,
                  state, detail)
        )  # fmt: skip
    return checks


def _worker_detail(row: WorkerRow, now: datetime) -> str:
    tick = "no tick yet" if row.last_tick_at is None else (
        f"last tick {age_s(now, row.last_tick_at):.0f} s ago"
    )  # fmt: skip
    failing = f", {row.consecutive_failures} failed ticks" if row.consecutive_failures else ""
    return f"{row.host}:{row.pid} ({row.process}, {tick}{failing})"


def _redis_client(url: str) -> Redis:
    return Redis.from_url(url, socket_timeout=2.0, socket_connect_timeout=2.0)
