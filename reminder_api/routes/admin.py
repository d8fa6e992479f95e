"""/v1/admin: what an operator (SRE) looks at and acts on, for the console's SRE pages; every
route needs a token with the `reminders:admin` scope (`reminders token --admin`; 403
otherwise). The figures are those of `reminders status` (reminder_core.status), the
actions those of the CLI, each for one cell with CELLS (`?cell=NAME`, default the first):
a replay here is `reminders dlq replay` (reminder_core.dlq.replay, which never resends a
delivered occurrence), a removal `reminders suppressions remove`."""

from __future__ import annotations

from datetime import datetime, timedelta
from typing import Annotated

from fastapi import APIRouter, Depends, Path, Query

from reminder_api.admin_schemas import (
    CheckOut,
    DeadLetterOut,
    DeliveryLagOut,
    LagBucketOut,
    OverviewOut,
    ReplayIn,
    ReplayOut,
    SuppressionOut,
    SuppressionRemovedOut,
    WorkerOut,
)
from reminder_api.deps import AppContext, context, current_admin, in_worker_thread
from reminder_api.openapi import problem_responses
from reminder_core.dlq import list_dead_letters, replay
from reminder_core.domain.suppression import normalize_address
from reminder_core.errors import InvalidInput
from reminder_core.messages import MalformedMessage, OccurrenceMessage
from reminder_core.queue import DeadLetter
from reminder_core.scheduling import ScheduleConfig
from reminder_core.status import StatusReport, collect_status, in_cell, live_workers
from reminder_core.store import delivery_log, worker_heartbeats
from reminder_core.store.worker_heartbeats import WorkerRow
from reminder_core.suppression import list_suppressions, remove_suppression

router = APIRouter(
    prefix="/v1/admin",
    tags=["admin"],
    dependencies=[Depends(current_admin)],
    responses=problem_responses(403),
)

Ctx = Annotated[AppContext, Depends(context)]
#: With CELLS, the cell a route reads or acts on (default: the first; docs/design.md,
#: "Cells"). An unknown cell is a 422 naming `cell`.
CellQuery = Annotated[
    str | None,
    Query(max_length=32, description="With CELLS: the cell (default: the first one)."),
]

#: Workers listed by the overview: those seen in the last hour.
WORKERS_WINDOW_S = 3600.0
#: Longest window and smallest bucket of the delivery-lag chart (at most 1,440 buckets).
MAX_LAG_WINDOW_S = 86_400
MIN_LAG_BUCKET_S = 10


def _worker_out(row: WorkerRow, live: bool) -> WorkerOut:
    return WorkerOut(
        id=str(row.id), role=row.role, host=row.host, pid=row.pid, process=row.process,
        version=row.version, started_at=row.started_at, last_seen_at=row.last_seen_at,
        last_tick_at=row.last_tick_at, consecutive_failures=row.consecutive_failures,
        stopped_at=row.stopped_at, live=live,
    )  # fmt: skip


@router.get("/overview", response_model=OverviewOut)
@in_worker_thread
def overview(ctx: Ctx, cell: CellQuery = None) -> OverviewOut:
    """Every check of `reminders status` (next_run_lag, oldest pending age, due backlog,
    outbox, delivery lag p99 and failures of the last hour, queue and DLQ depth, breakers,
    live workers per role) with its threshold and verdict, and the workers (one per loop
    of each process) seen in the last hour, live or not."""
    now = ctx.clock()
    engine, queue, settings = ctx.cell_scope(cell)
    report = collect_status(engine, queue, settings, now=now)
    if ctx.cells is not None:
        report = StatusReport(report.checked_at, [in_cell(c, settings.cell) for c in report.checks])
    with engine.connect() as conn:
        rows = worker_heartbeats.list_since(conn, since=now - timedelta(seconds=WORKERS_WINDOW_S))
    live = {
        r.id for r in live_workers(rows, now=now, stale_after_s=ctx.settings.worker_stale_after_s)
    }
    data = report.to_json()
    return OverviewOut(
        checked_at=report.checked_at,
        status=data["status"],
        exit_code=data["exit_code"],
        checks=[CheckOut(**c) for c in data["checks"]],
        workers=[_worker_out(r, r.id in live) for r in rows],
    )


@router.get("/delivery-lag", response_model=DeliveryLagOut)
@in_worker_thread
def delivery_lag(
    ctx: Ctx,
    window_s: Annotated[int, Query(ge=60, le=MAX_LAG_WINDOW_S)] = 3600,
    bucket_s: Annotated[int, Query(ge=MIN_LAG_BUCKET_S, le=MAX_LAG_WINDOW_S)] = 60,
    cell: CellQuery = None,
) -> DeliveryLagOut:
    """Delivery lag (sent_at - run_time_utc) p50/p90/p99/max and the count sent, per
    `bucket_s`-second bucket over the last `window_s` seconds, from the delivery log (so
    the chart survives restarts: no in-memory samples).

    Errors: 422 when `bucket_s` exceeds `window_s` or makes more than 1,440 buckets."""
    if bucket_s > window_s or window_s / bucket_s > 1440:
        raise InvalidInput("bucket_s", "must split window_s into 1 to 1,440 buckets")
    until = ctx.clock()
    since = until - timedelta(seconds=window_s)
    with ctx.cell_scope(cell)[0].connect() as conn:
        buckets = delivery_log.lag_by_bucket(conn, since=since, until=until, bucket_s=bucket_s)
    return DeliveryLagOut(
        since=since,
        until=until,
        bucket_s=bucket_s,
        buckets=[
            LagBucketOut(
                start=b.bucket_start,
                sent=b.sent,
                p50_s=b.p50_s,
                p90_s=b.p90_s,
                p99_s=b.p99_s,
                max_s=b.max_s,
            )
            for b in buckets
        ],
    )


def _dead_letter_out(letter: DeadLetter) -> DeadLetterOut:
    reminder_id: str | None = None
    run_time: datetime | None = None
    try:
        occurrence = OccurrenceMessage.decode(letter.body)
        reminder_id, run_time = str(occurrence.reminder_id), occurrence.run_time_utc
    except MalformedMessage:
        pass
    return DeadLetterOut(
        message_id=letter.message_id, body=letter.body, receive_count=letter.receive_count,
        dead_lettered_at=letter.dead_lettered_at, recorded_at=letter.recorded_at,
        reminder_id=reminder_id, run_time_utc=run_time,
    )  # fmt: skip


@router.get("/dead-letters", response_model=list[DeadLetterOut])
@in_worker_thread
def dead_letters(
    ctx: Ctx, limit: Annotated[int, Query(ge=1, le=1000)] = 100, cell: CellQuery = None
) -> list[DeadLetterOut]:
    """The dead letters, oldest first (as `reminders dlq list --json`)."""
    queue = ctx.cell_scope(cell)[1]
    return [_dead_letter_out(d) for d in list_dead_letters(queue, limit=limit)]


@router.post("/dead-letters:replay", response_model=ReplayOut)
@in_worker_thread
def replay_dead_letters(body: ReplayIn, ctx: Ctx, cell: CellQuery = None) -> ReplayOut:
    """Send dead letters back to the queue, as `reminders dlq replay`: an occurrence
    delivered meanwhile is dropped, never sent again; ids not in the dead-letter queue
    are listed in `missing_ids` (nothing else changes for them); letters another reader
    holds are counted in `held` (not waited for: ask again)."""
    engine, queue, _ = ctx.cell_scope(cell)
    report = replay(
        engine, queue, body.ids, now=ctx.clock(),
        lease_s=ctx.settings.delivery_lease_s, wait_s=0.0,
    )  # fmt: skip
    return ReplayOut(
        redriven=report.redriven,
        already_done=report.already_done,
        malformed=report.malformed,
        missing_ids=list(report.unreached.missing_ids),
        held=report.unreached.held,
    )


@router.get("/suppressions", response_model=list[SuppressionOut])
@in_worker_thread
def suppressions(
    ctx: Ctx, limit: Annotated[int, Query(ge=1, le=1000)] = 100, cell: CellQuery = None
) -> list[SuppressionOut]:
    """The suppression list, newest first, with the reminders each address holds paused
    (as `reminders suppressions list`)."""
    with ctx.cell_scope(cell)[0].connect() as conn:
        entries = list_suppressions(conn, limit=limit)
    return [
        SuppressionOut(
            email=e.email,
            reason=e.reason.value,
            provider=e.provider,
            source_event_id=e.source_event_id,
            detail=e.detail,
            created_at=e.created_at,
            paused=e.paused,
        )
        for e in entries
    ]


@router.delete("/suppressions/{email}", response_model=SuppressionRemovedOut)
@in_worker_thread
def remove_from_suppressions(
    email: Annotated[str, Path(min_length=1, max_length=320)], ctx: Ctx, cell: CellQuery = None
) -> SuppressionRemovedOut:
    """Take `email` (any case) off the suppression list and resume the reminders it
    paused, as `reminders suppressions remove` (a recurring one at its first occurrence
    from now). An address not listed answers `removed: false` (nothing changes)."""
    if not email.strip():
        raise InvalidInput("email", "must not be empty")
    result = remove_suppression(
        ctx.cell_scope(cell)[0], email, ctx.profiles, now=ctx.clock(),
        config=ScheduleConfig.from_settings(ctx.settings),
    )  # fmt: skip
    return SuppressionRemovedOut(
        email=normalize_address(email), removed=result.removed, resumed=result.resumed,
        left_paused=result.left_paused,
    )  # fmt: skip
