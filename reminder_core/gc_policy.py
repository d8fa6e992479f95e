"""How often this process's cyclic garbage collector runs (docs/performance.md,
"Garbage collection").

CPython runs a generation-0 collection after every 700 net allocations of container
objects (gc.get_threshold()), and each collection traverses every tracked object of the
generations it collects. A sender allocates several thousand objects per batch (rows,
records, rendered emails) that reference counting frees as the batch ends, yet they pass
the 700 many times over: collections took 24-52 us of a sender's 145-195 us of CPU per
occurrence (gc.callbacks, measured 2026-12-06). Two standard remedies, both applied once
the process is set up:

- `gc.freeze()` moves every object alive then (modules, compiled templates and
  statements, the engine) to a permanent generation that no collection traverses;
- the generation-0 threshold is raised to GC_GEN0_THRESHOLD (default 50,000), so that
  only garbage that outlives a batch's worth of allocations is ever collected; cycles are
  still collected, later.
"""

from __future__ import annotations

import gc
import logging

log = logging.getLogger(__name__)


def apply_gc_policy(gen0_threshold: int) -> None:
    """Freeze the objects alive now (`gc.freeze`) and collect generation 0 after
    `gen0_threshold` net allocations, generations 1 and 2 at Python's default ratios
    (10 each); `gen0_threshold` 0 leaves the collector as Python set it.

    Side effects: changes this process's collector (gc.set_threshold, gc.freeze); logs
    the thresholds at DEBUG.
    """
    if gen0_threshold <= 0:
        return
    gc.freeze()
    _, gen1, gen2 = gc.get_threshold()
    gc.set_threshold(gen0_threshold, gen1, gen2)
    log.debug(
        "garbage collector: %d objects frozen, thresholds %s", gc.get_freeze_count(),
        gc.get_threshold(),
    )  # fmt: skip
