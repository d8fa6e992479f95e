"""SIGTERM / SIGINT: the first asks for a soft stop, the second for a hard one."""

from __future__ import annotations

import logging
import os
import signal
import threading
from types import FrameType

log = logging.getLogger(__name__)


def install_stop_handlers(stop: threading.Event) -> None:
    """Route SIGTERM and SIGINT to `stop` (must be called from the main thread).

    First signal: set `stop`; loops finish their current tick and return. Second signal:
    exit at once with status 130 (work in flight is re-driven by claim/lease timeouts).
    """

    def handler(signum: int, _frame: FrameType | None) -> None:
        if stop.is_set():
            log.warning("second %s: stopping now", signal.Signals(signum).name)
            os._exit(130)
        log.info("%s received: finishing current work, then stopping", signal.Signals(signum).name)
        stop.set()

    signal.signal(signal.SIGTERM, handler)
    signal.signal(signal.SIGINT, handler)
