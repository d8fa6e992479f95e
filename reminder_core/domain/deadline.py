"""A wall-clock limit on pure-Python computation running in the current thread.

Rule expansion runs inside python-dateutil, which can search for a long time without
handing anything back (a rule that matches once in decades); counting the occurrences it
yields cannot stop that. `time_limit(seconds)` arms a timer that, when it fires, raises
`TimeLimitExceeded` asynchronously in the thread that armed it (CPython's
PyThreadState_SetAsyncExc, the mechanism of the unmaintained `stopit` package), so the
search stops at its next bytecode.

Use it only around pure computation (no I/O, no locks held by other threads): the
exception can surface at any line inside the block. Nested limits in one thread reuse the
outermost one.
"""

from __future__ import annotations

import ctypes
import threading
from collections.abc import Iterator
from contextlib import contextmanager


class TimeLimitExceeded(Exception):
    """The computation ran past its limit."""


class _Expired(BaseException):
    """Raised asynchronously; a BaseException so that no `except Exception` swallows it."""


_active = threading.local()


def _raise_in(thread_id: int, exc: type[BaseException] | None) -> None:
    target = ctypes.py_object(exc) if exc is not None else None
    ctypes.pythonapi.PyThreadState_SetAsyncExc(ctypes.c_ulong(thread_id), target)


@contextmanager
def time_limit(seconds: float) -> Iterator[None]:
    """Run the block for at most `seconds` of wall time.

    Raises:
        TimeLimitExceeded: the block was interrupted at the limit.
    """
    if getattr(_active, "armed", False):
        yield  # an outer limit already guards this thread
        return
    thread_id = threading.get_ident()
    lock = threading.Lock()
    state = {"done": False, "fired": False}

    def fire() -> None:
        with lock:
            if not state["done"]:
                state["fired"] = True
                _raise_in(thread_id, _Expired)

    timer = threading.Timer(seconds, fire)
    timer.daemon = True
    _active.armed = True
    try:
        try:
            timer.start()
            yield
        finally:
            timer.cancel()
            with lock:
                state["done"] = True
                if state["fired"]:
                    _raise_in(thread_id, None)  # withdraw it if it has not surfaced yet
            _active.armed = False
    except _Expired:
        _active.armed = False
        raise TimeLimitExceeded(f"over {seconds:g} s") from None
