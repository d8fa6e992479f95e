"""`reminders coordinator` / `python -m coordinator`."""

from __future__ import annotations

from coordinator.service import Coordinator
from reminder_core.runtime import Runtime, workload_main


def build(rt: Runtime) -> Coordinator:
    s = rt.settings
    return Coordinator(
        rt.engine, rt.queue, lookahead_s=s.lookahead_s, batch_size=s.claim_batch_size
    )


#: Run this workload until SIGTERM/SIGINT; returns the exit status.
main = workload_main("reminders-coordinator", build, lambda s: s.coordinator_poll_interval_s)
