"""`reminders sweeper` / `python -m outbox_sweeper`."""

from __future__ import annotations

from outbox_sweeper.service import OutboxSweeper
from reminder_core.errors import configuration_errors
from reminder_core.logging import configure_logging
from reminder_core.runtime import Runtime, open_runtime, run_services
from reminder_core.settings import Settings


def build(rt: Runtime) -> OutboxSweeper:
    return OutboxSweeper(rt.engine, rt.queue, grace_s=rt.settings.outbox_grace_s)


def main(settings: Settings | None = None) -> int:
    settings = settings or Settings()
    configure_logging(settings.log_level, settings.log_format)
    with configuration_errors():
        rt = open_runtime(settings, application_name="reminders-sweeper", check_queue=True)
        sweeper = build(rt)
    try:
        return run_services([(sweeper, settings.sweeper_poll_interval_s)], settings)
    finally:
        rt.close()
