"""SIGTERM / SIGINT: the first asks for a soft stop, the second for a hard one."""

from __future__ import annotations

import logging
import os
import signal
import threading
import time
from collections.abc import Callable
from types import FrameType

log = logging.getLogger(__name__)

#: Seconds within which the same signal again is the same request, not a second one:
#: timeout(1) signals its child and then its own process group, which holds the child,
#: so the child receives each SIGTERM twice within microseconds (coreutils
#: src/timeout.c, `cleanup`); a terminal's Ctrl-C reaches each process of its group once.
REPEAT_WINDOW_S = 0.5


def install_stop_handlers(
    stop: threading.Event, *, on_hard_stop: Callable[[], None] | None = None
) -> None:
    """Route SIGTERM and SIGINT to `stop` (must be called from the main thread).

    First signal: set `stop`; loops finish their current tick and return. Second signal
    (another one, or the same one over REPEAT_WINDOW_S later): call `on_hard_stop` (if
    given: `reminders api --workers N` kills its workers there), then exit at once with
    status 130 (work in flight is re-driven by claim/lease timeouts; `reminders dev`'s
    embedded PostgreSQL is then left running, to be reused by the next start).
    """
    first: list[tuple[int, float]] = []  # (signal, time.monotonic()) of the first

    def hard_stop() -> None:
        if on_hard_stop is not None:
            on_hard_stop()
        os._exit(130)

    def handler(signum: int, _frame: FrameType | None) -> None:
        name = signal.Signals(signum).name
        if stop.is_set() and first:
            was, at = first[0]
            if was == signum and time.monotonic() - at < REPEAT_WINDOW_S:
                log.debug("%s again within %.1f s: the same request", name, REPEAT_WINDOW_S)
                return
            log.warning("second %s: stopping now", name)
            hard_stop()
        if stop.is_set():  # set by the program itself: a signal now is a hard stop
            log.warning("%s while stopping: stopping now", name)
            hard_stop()
        first.append((signum, time.monotonic()))
        log.info("%s received: finishing current work, then stopping", name)
        stop.set()

    signal.signal(signal.SIGTERM, handler)
    signal.signal(signal.SIGINT, handler)
