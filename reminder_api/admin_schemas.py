"""Response and request bodies of the operators' routes (`/v1/admin/*`,
reminder_api/routes/admin.py): the console's SRE pages read them."""

from __future__ import annotations

from datetime import datetime
from typing import Any

from pydantic import BaseModel, ConfigDict, Field

#: Most dead-letter ids one replay names (the rest: another request).
MAX_REPLAY_IDS = 1000


class _Out(BaseModel):
    model_config = ConfigDict(extra="forbid")


class CheckOut(_Out):
    """One line of `reminders status`: name, label, value (seconds for unit "s"), unit,
    threshold (None: none), state ("ok", "alert", "info", "unknown"), detail, parts, and
    with CELLS the cell it was read in (None: one cell)."""

    name: str
    label: str
    value: float | int | str | None
    unit: str
    threshold: float | None
    state: str
    detail: str
    parts: dict[str, int]
    cell: str | None = None


class WorkerOut(_Out):
    """One workload loop of one process, from its heartbeat row; `live`: not stopped and
    heard from within WORKER_STALE_AFTER_S. Instants are aware UTC."""

    id: str
    role: str
    host: str
    pid: int
    process: str
    version: str
    started_at: datetime
    last_seen_at: datetime
    last_tick_at: datetime | None
    consecutive_failures: int
    stopped_at: datetime | None
    live: bool


class OverviewOut(_Out):
    """What `reminders status --json` says (same checks, same thresholds, same verdict),
    and the workers seen in the last hour."""

    checked_at: datetime
    status: str = Field(description='"ok", "alert" or "unknown" (as `reminders status`)')
    exit_code: int = Field(description="The exit status `reminders status` would give.")
    checks: list[CheckOut]
    workers: list[WorkerOut]


class LagBucketOut(_Out):
    """Delivery lag (sent_at - run_time_utc, seconds) of the occurrences sent in one
    bucket starting at `start` (aware UTC)."""

    start: datetime
    sent: int
    p50_s: float
    p90_s: float
    p99_s: float
    max_s: float


class DeliveryLagOut(_Out):
    """Delivery lag percentiles per bucket over [since, until), from the delivery log;
    buckets without a send are absent."""

    since: datetime
    until: datetime
    bucket_s: int
    buckets: list[LagBucketOut]


class DeadLetterOut(_Out):
    """A message in the dead-letter queue and the occurrence it names (None when its body
    is no occurrence message)."""

    message_id: str
    body: dict[str, Any]
    receive_count: int
    dead_lettered_at: datetime | None
    recorded_at: datetime | None
    reminder_id: str | None
    run_time_utc: datetime | None


class ReplayIn(BaseModel):
    """Which dead letters to replay: `ids` (None: every one)."""

    model_config = ConfigDict(extra="forbid")

    ids: list[str] | None = Field(
        default=None,
        max_length=MAX_REPLAY_IDS,
        description="Dead-letter ids (`message_id`); null or absent: all of them.",
    )


class ReplayOut(_Out):
    """What a replay did (as `reminders dlq replay` prints): redriven to the queue,
    already delivered (dropped, not resent), malformed (dropped), ids not found, and
    dead letters held by another reader (not reached: ask again)."""

    redriven: int
    already_done: int
    malformed: int
    missing_ids: list[str]
    held: int


class SuppressionOut(_Out):
    """An address on the suppression list and the reminders it holds paused."""

    email: str
    reason: str
    provider: str | None
    source_event_id: str | None
    detail: str | None
    created_at: datetime
    paused: int


class SuppressionRemovedOut(_Out):
    """Taking an address off the list: whether it was listed, reminders resumed, and
    reminders left paused (their profile could not be read: the maintenance workload
    resumes them)."""

    email: str
    removed: bool
    resumed: int
    left_paused: int
