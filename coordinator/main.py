"""`reminders coordinator` / `python -m coordinator`."""

from __future__ import annotations

from coordinator.service import Coordinator
from reminder_core.errors import configuration_errors
from reminder_core.logging import configure_logging
from reminder_core.runtime import Runtime, open_runtime, run_services
from reminder_core.settings import Settings


def build(rt: Runtime) -> Coordinator:
    s = rt.settings
    return Coordinator(
        rt.engine, rt.queue, lookahead_s=s.lookahead_s, batch_size=s.claim_batch_size
    )


def main(settings: Settings | None = None) -> int:
    settings = settings or Settings()
    configure_logging(settings.log_level, settings.log_format)
    with configuration_errors():
        rt = open_runtime(settings, application_name="reminders-coordinator", check_queue=True)
        coordinator = build(rt)
    try:
        return run_services([(coordinator, settings.coordinator_poll_interval_s)], settings)
    finally:
        rt.close()
