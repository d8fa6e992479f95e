"""A wall-clock limit on pure-Python computation running in the current thread.

Rule expansion runs inside python-dateutil, which can search for a long time without
handing anything back (a rule that matches once in decades); counting the occurrences it
yields cannot stop that. `time_limit(seconds)` registers a deadline with one watchdog
thread per process; past the deadline the watchdog raises `TimeLimitExceeded`
asynchronously in the registering thread (CPython's PyThreadState_SetAsyncExc, the
mechanism of the unmaintained `stopit` package), so the search stops at its next
bytecode. Registering costs a lock and a dict entry, not a thread, so the limit can guard
every next-occurrence computation; it fires within `_TICK_S` of the deadline.

Use it only around pure computation (no I/O, no locks other threads wait on): the
exception can surface at any line inside the block. Nested limits in one thread reuse the
outermost one.
"""

from __future__ import annotations

import ctypes
import threading
import time
from dataclasses import dataclass
from types import TracebackType

_TICK_S = 0.02


class TimeLimitExceeded(Exception):
    """The computation ran past its limit."""


class _Expired(BaseException):
    """Raised asynchronously; a BaseException so that no `except Exception` swallows it."""


@dataclass(eq=False)
class _Deadline:
    thread_id: int
    at: float
    fired: bool = False


_lock = threading.Lock()
_deadlines: set[_Deadline] = set()
_pending = threading.Event()
_watchdog: threading.Thread | None = None
_active = threading.local()


def _raise_in(thread_id: int, exc: type[BaseException] | None) -> None:
    target = ctypes.py_object(exc) if exc is not None else None
    ctypes.pythonapi.PyThreadState_SetAsyncExc(ctypes.c_ulong(thread_id), target)


def _watch() -> None:
    global _watchdog
    try:
        _watch_forever()
    finally:
        _watchdog = None  # the next time_limit starts a new one


def _watch_forever() -> None:
    while True:
        _pending.wait()
        time.sleep(_TICK_S)
        now = time.monotonic()
        with _lock:
            for deadline in _deadlines:
                if not deadline.fired and now >= deadline.at:
                    deadline.fired = True
                    _raise_in(deadline.thread_id, _Expired)
            if not _deadlines:
                _pending.clear()


class time_limit:
    """Run the block for at most about `seconds` of wall time.

    Raises:
        TimeLimitExceeded: the block was interrupted at the limit.
    """

    __slots__ = ("_deadline", "_seconds")

    def __init__(self, seconds: float) -> None:
        self._seconds = seconds
        self._deadline: _Deadline | None = None

    def __enter__(self) -> None:
        global _watchdog
        if getattr(_active, "armed", False):
            return  # an outer limit already guards this thread
        deadline = _Deadline(threading.get_ident(), time.monotonic() + self._seconds)
        with _lock:
            if _watchdog is None or not _watchdog.is_alive():
                _watchdog = threading.Thread(target=_watch, name="time-limit-watchdog", daemon=True)
                _watchdog.start()
            _deadlines.add(deadline)
            _pending.set()
        _active.armed = True
        self._deadline = deadline

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        deadline = self._deadline
        if deadline is None:
            return
        self._deadline = None
        try:
            with _lock:
                _deadlines.discard(deadline)
                if deadline.fired:
                    _raise_in(deadline.thread_id, None)  # withdraw it if not yet surfaced
        finally:
            _active.armed = False
        if exc_type is _Expired:
            raise TimeLimitExceeded(f"over {self._seconds:g} s") from None
