"""`reminders sweeper` / `python -m outbox_sweeper`."""

from __future__ import annotations

from outbox_sweeper.service import OutboxSweeper
from reminder_core.runtime import Runtime, workload_main


def build(rt: Runtime) -> OutboxSweeper:
    return OutboxSweeper(rt.engine, rt.queue, grace_s=rt.settings.outbox_grace_s)


#: Run this workload until SIGTERM/SIGINT; returns the exit status.
main = workload_main("reminders-sweeper", build, lambda s: s.sweeper_poll_interval_s)
