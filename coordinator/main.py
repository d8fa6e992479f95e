"""`reminders coordinator` / `python -m coordinator`."""

from __future__ import annotations

from coordinator.service import Coordinator
from reminder_core.runtime import Runtime, run_workload
from reminder_core.settings import Settings


def build(rt: Runtime) -> Coordinator:
    s = rt.settings
    return Coordinator(
        rt.engine, rt.queue, lookahead_s=s.lookahead_s, batch_size=s.claim_batch_size
    )


def main(settings: Settings | None = None) -> int:
    """Run this workload until SIGTERM/SIGINT; returns the exit status
    (reminder_core.runtime.run_workload)."""
    return run_workload(
        settings,
        application_name="reminders-coordinator",
        build=build,
        poll_interval_s=lambda s: s.coordinator_poll_interval_s,
    )
