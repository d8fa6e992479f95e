"""`reminders maintenance` / `python -m coordinator.maintenance`: the maintenance services
built from the settings and run by the shared loop."""

from __future__ import annotations

from sqlalchemy import Engine

from coordinator.maintenance.claim_rescuer import ClaimRescuer
from coordinator.maintenance.dead_letters import DeadLetterRecorder
from coordinator.maintenance.delivery_rescuer import DeliveryRescuer
from coordinator.maintenance.gauges import BacklogGauges
from coordinator.maintenance.maintainer import Maintainer, MaintenanceService
from coordinator.maintenance.retention import Retention
from coordinator.maintenance.suppression_resumer import SuppressionResumer
from coordinator.maintenance.webhook_rematcher import WebhookRematcher
from reminder_core.metrics import register_backlog_gauges
from reminder_core.profiles import ProfileSource
from reminder_core.queue import PostgresQueue, Queue
from reminder_core.runtime import Runtime, workload_main
from reminder_core.scheduling import ScheduleConfig

#: Most rows (letters, claims, deliveries, events, reminders) each service handles per run.
BATCH_SIZE = 500


def services(
    engine: Engine,
    queue: Queue,
    profiles: ProfileSource,
    *,
    schedule_config: ScheduleConfig,
    claim_timeout_s: float,
    abandon_after_s: float,
    lease_s: float,
    suppression_recheck_s: float,
    rematch_window_s: float,
    interval_s: float,
    retention: Retention | None = None,
    batch_size: int = BATCH_SIZE,
) -> list[MaintenanceService]:
    """The maintenance services in the order they run (see `Maintainer`): every one but
    retention (which has its own interval) every `interval_s` seconds; no retention when
    `retention` is None (tests of the others)."""
    found: list[MaintenanceService] = [
        DeadLetterRecorder(
            engine, queue, profiles, schedule_config=schedule_config, lease_s=lease_s,
            batch_size=batch_size, interval_s=interval_s,
        ),
        ClaimRescuer(
            engine, claim_timeout_s=claim_timeout_s, batch_size=batch_size,
            interval_s=interval_s, live_queue=_live_queue(queue, engine),
        ),
        DeliveryRescuer(
            engine, abandon_after_s=abandon_after_s, batch_size=batch_size,
            interval_s=interval_s,
        ),
        WebhookRematcher(
            engine, window_s=rematch_window_s, batch_size=batch_size, interval_s=interval_s
        ),
        SuppressionResumer(
            engine, profiles, recheck_s=suppression_recheck_s,
            schedule_config=schedule_config, batch_size=batch_size, interval_s=interval_s,
        ),
        BacklogGauges(engine, queue, interval_s=interval_s),
    ]  # fmt: skip
    return [*found, retention] if retention is not None else found


def _live_queue(queue: Queue, engine: Engine) -> str | None:
    """The name of `queue` when it is the PostgreSQL queue in `engine`'s database (the
    claim rescuer then leaves claims whose message is live there), else None."""
    return queue.name if isinstance(queue, PostgresQueue) and queue.in_database_of(engine) else None


def build(rt: Runtime) -> Maintainer:
    """The maintainer of this process; side effect: registers the backlog gauges it
    computes, so this process's /metrics exports them."""
    register_backlog_gauges()
    s = rt.settings
    retention = Retention(
        rt.engine,
        delivery_log_retention_days=s.delivery_log_retention_days,
        partitions_ahead=s.delivery_log_partitions_ahead,
        outbox_retention_days=s.outbox_retention_days,
        webhook_events_retention_days=s.webhook_events_retention_days,
        keep_webhook_events_s=s.webhook_rematch_window_s,
        worker_heartbeats_retention_days=s.worker_heartbeats_retention_days,
        batch_size=s.retention_batch_size,
        interval_s=s.retention_interval_s,
    )
    return Maintainer(
        services(
            rt.engine,
            rt.queue,
            rt.profiles,
            schedule_config=ScheduleConfig.from_settings(s),
            claim_timeout_s=s.claim_timeout_s,
            abandon_after_s=s.abandon_after_s,
            lease_s=s.delivery_lease_s,
            suppression_recheck_s=s.suppression_recheck_interval_s,
            rematch_window_s=s.webhook_rematch_window_s,
            interval_s=s.maintenance_poll_interval_s,
            retention=retention,
        )
    )


#: Run this workload until SIGTERM/SIGINT; returns the exit status.
main = workload_main("reminders-maintenance", build, lambda s: s.maintenance_poll_interval_s)
