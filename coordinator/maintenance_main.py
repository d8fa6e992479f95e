"""`reminders maintenance` / `python -m coordinator.maintenance_main`."""

from __future__ import annotations

from coordinator.maintenance import Maintenance
from coordinator.retention import Retention
from reminder_core.errors import configuration_errors
from reminder_core.logging import configure_logging
from reminder_core.metrics import register_backlog_gauges
from reminder_core.runtime import Runtime, open_runtime, run_services
from reminder_core.scheduling import ScheduleConfig
from reminder_core.settings import Settings


def build(rt: Runtime) -> Maintenance:
    """The maintenance service of this process; side effect: registers the backlog gauges
    it computes, so this process's /metrics exports them."""
    register_backlog_gauges()
    s = rt.settings
    return Maintenance(
        rt.engine,
        rt.queue,
        rt.profiles,
        schedule_config=ScheduleConfig.from_settings(s),
        claim_timeout_s=s.claim_timeout_s,
        abandon_after_s=s.abandon_after_s,
        lease_s=s.delivery_lease_s,
        suppression_recheck_s=s.suppression_recheck_interval_s,
        rematch_window_s=s.webhook_rematch_window_s,
        retention=Retention(
            rt.engine,
            delivery_log_retention_days=s.delivery_log_retention_days,
            partitions_ahead=s.delivery_log_partitions_ahead,
            outbox_retention_days=s.outbox_retention_days,
            webhook_events_retention_days=s.webhook_events_retention_days,
            keep_webhook_events_s=s.webhook_rematch_window_s,
            batch_size=s.retention_batch_size,
        ),
        retention_interval_s=s.retention_interval_s,
    )


def main(settings: Settings | None = None) -> int:
    settings = settings or Settings()
    configure_logging(settings.log_level, settings.log_format)
    with configuration_errors():
        rt = open_runtime(settings, application_name="reminders-maintenance", check_queue=True)
        maintenance = build(rt)
    try:
        return run_services([(maintenance, settings.maintenance_poll_interval_s)], settings)
    finally:
        rt.close()


if __name__ == "__main__":
    from reminders.cli import main as cli_main  # the CLI's --help and error handling

    cli_main(command="maintenance", prog_name="python -m coordinator.maintenance_main")
