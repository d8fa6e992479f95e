"""`reminders sweeper` / `python -m outbox_sweeper`."""

from __future__ import annotations

from outbox_sweeper.service import OutboxSweeper
from reminder_core.runtime import Runtime, run_workload
from reminder_core.settings import Settings


def build(rt: Runtime) -> OutboxSweeper:
    return OutboxSweeper(rt.engine, rt.queue, grace_s=rt.settings.outbox_grace_s)


def main(settings: Settings | None = None) -> int:
    """Run this workload until SIGTERM/SIGINT; returns the exit status
    (reminder_core.runtime.run_workload)."""
    return run_workload(
        settings,
        application_name="reminders-sweeper",
        build=build,
        poll_interval_s=lambda s: s.sweeper_poll_interval_s,
    )
