"""SIGTERM / SIGINT: the first asks for a soft stop, the second for a hard one."""

from __future__ import annotations

import atexit
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

#: The stop signal `hold_early_stop_signals` held before the process's own handlers were
#: installed: (signal, time.monotonic()), or empty.
_early: list[tuple[int, float]] = []


def hold_early_stop_signals() -> None:
    """Hold SIGTERM and SIGINT from a workload's first line until `install_stop_handlers`
    takes them over (call it from the main thread, before the slow imports).

    A workload's command spends its first 0.2-1 s importing typer, SQLAlchemy and its own
    modules; a signal then ended it with status 143, or a KeyboardInterrupt traceback
    (trial helper-56). A signal held here becomes the first stop request of the handlers
    that `install_stop_handlers` installs next: the command stops as it would during
    startup (status 0). A second request while held (another signal, or the same one
    over REPEAT_WINDOW_S later) exits at once with status 130: nothing has started yet.
    A signal in the interpreter's own start, before this runs (some 20-40 ms), keeps
    its default action.
    """

    def held(signum: int, _frame: FrameType | None) -> None:
        if _early:
            was, at = _early[0]
            if was == signum and time.monotonic() - at < REPEAT_WINDOW_S:
                return
            os._exit(130)
        _early.append((signum, time.monotonic()))

    _early.clear()
    _guard_finalization()
    signal.signal(signal.SIGINT, held)  # first: a process seen to catch SIGTERM holds both
    signal.signal(signal.SIGTERM, held)


_finalizing_guard: list[bool] = []


def _ignore_stop_signals() -> None:
    """The last exit hook: SIGTERM and SIGINT ignored while the interpreter finalizes."""
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
    signal.signal(signal.SIGINT, signal.SIG_IGN)


def _guard_finalization() -> None:
    """Register `_ignore_stop_signals` once, before any later exit hook (atexit runs
    them last registered first, so it runs after pgserver's server stop and logging's
    flush). The interpreter's finalization, which follows the exit hooks and can take
    half a second on a loaded machine, first puts every signal with a Python handler
    back to its default action (CPython `_PySignal_Fini`), but leaves an ignored one
    ignored: a second signal then ended a process that had stopped cleanly with status
    143 (trial helper-57). Ignored, the process ends with its own status."""
    if not _finalizing_guard:
        _finalizing_guard.append(True)
        atexit.register(_ignore_stop_signals)


def install_stop_handlers(
    stop: threading.Event, *, on_hard_stop: Callable[[], None] | None = None
) -> None:
    """Route SIGTERM and SIGINT to `stop` (must be called from the main thread).

    First signal: set `stop`; loops finish their current tick and return. Second signal
    (another one, or the same one over REPEAT_WINDOW_S later): call `on_hard_stop` (if
    given: `reminders api --workers N` kills its workers there), then exit at once with
    status 130 (work in flight is re-driven by claim/lease timeouts; `reminders dev`'s
    embedded PostgreSQL is then left running, to be reused by the next start).
    A signal held by `hold_early_stop_signals` is the first request: `stop` is set at
    once.
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

    _guard_finalization()
    signal.signal(signal.SIGTERM, handler)
    signal.signal(signal.SIGINT, handler)
    if _early:  # held since the process's first line (hold_early_stop_signals)
        signum, at = _early.pop(0)
        _early.clear()
        if not stop.is_set():
            first.append((signum, at))
            log.info("%s received during startup: stopping", signal.Signals(signum).name)
            stop.set()
