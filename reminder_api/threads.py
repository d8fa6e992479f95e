"""The worker threads that run the API's blocking route bodies (docs/design.md, "API
capacity and overload").

Every request that touches the database makes one hop from the event loop to a worker
thread and back (`reminder_api.deps.in_worker_thread`). Through anyio's
`to_thread.run_sync` (Starlette's `run_in_threadpool`) that hop cost 150-210 µs of CPU,
through `loop.run_in_executor` 130-185 µs, here 70-80 µs (one process, both threads,
the same machine and run: `python -m bench.app_cpu` measures it in the API). What it
leaves out is what the API does not use: anyio's cancel scopes, capacity limiter and
backend selection, `concurrent.futures`' per-call Future, its condition variable and
its idle-thread semaphore.

What it keeps: the body runs in a copy of the caller's context (context variables set
on the event loop are seen in the thread, none set there leak back); an exception is
raised in the caller; the event loop is woken with `call_soon_threadsafe`; and, as
`to_thread.run_sync` does by default, a caller cancelled while its body runs waits for
the body to end before the cancellation goes on (a body cannot be interrupted; the
request's load-shedding slot stays taken until its thread is free).
"""

from __future__ import annotations

import asyncio
import contextvars
import logging
import queue
import threading
from collections.abc import Callable
from typing import Any, TypeVar

R = TypeVar("R")

log = logging.getLogger(__name__)

#: The most threads one process runs route bodies on (anyio's default limiter: 40).
#: Load shedding admits API_MAX_IN_FLIGHT requests at once, far fewer by default.
MAX_THREADS = 40

#: One call: the caller's loop, the future it awaits, its context copy, the call.
_Job = tuple[
    asyncio.AbstractEventLoop, "asyncio.Future[Any]", contextvars.Context, Callable[[], Any]
]


class WorkerThreads:
    """A pool of daemon threads started as needed, up to `max_threads`, that run one
    blocking call each at a time for coroutines on event loops.

    Args:
        max_threads: the most threads started; calls past that many at once wait for a
            free thread (in submission order).
        name: the threads' name prefix (seen in py-spy and thread dumps).
    """

    def __init__(self, max_threads: int = MAX_THREADS, *, name: str = "api-route") -> None:
        if max_threads < 1:
            raise ValueError("max_threads must be at least 1")
        self.max_threads = max_threads
        self.name = name
        self._jobs: queue.SimpleQueue[_Job | None] = queue.SimpleQueue()
        self._lock = threading.Lock()
        self._threads: list[threading.Thread] = []
        self._idle = 0  # threads waiting for a job (under _lock)

    async def run(self, fn: Callable[[], R]) -> R:
        """`fn()` in one of the threads, in a copy of the current context; its return.

        Raises:
            whatever `fn` raises. asyncio.CancelledError: the caller was cancelled (after
                `fn` returned or raised, whose outcome is dropped).
        """
        loop = asyncio.get_running_loop()
        done: asyncio.Future[R] = loop.create_future()
        self._submit((loop, done, contextvars.copy_context(), fn))
        try:
            return await asyncio.shield(done)
        except asyncio.CancelledError:
            if not done.done():  # the body is still running: wait for it, uncancellably
                await asyncio.wait([done])
            raise

    def _submit(self, job: _Job) -> None:
        """Queue `job`, reserving an idle thread for it or starting one. An idle thread
        is reserved here, not when it takes a job, so that two calls in quick
        succession never count on the same one; a job queued at `max_threads` (none
        idle) adds one to the count when it ends, which can only make a later call skip
        starting a thread that the limit would refuse anyway."""
        thread: threading.Thread | None = None
        with self._lock:
            if self._idle > 0:
                self._idle -= 1
            elif len(self._threads) < self.max_threads:
                thread = threading.Thread(
                    target=self._work, name=f"{self.name}-{len(self._threads)}", daemon=True
                )
                self._threads.append(thread)
        self._jobs.put(job)
        if thread is not None:
            thread.start()

    def _work(self) -> None:
        jobs = self._jobs
        while True:
            job = jobs.get()
            if job is None:
                return
            loop, done, context, fn = job
            result: Any = None
            error: BaseException | None = None
            try:
                result = context.run(fn)
            except BaseException as exc:  # handed to the caller, as anyio does
                error = exc
            with self._lock:  # idle before the caller wakes: its next call reuses this one
                self._idle += 1
            _deliver(loop, done, result, error)
            del job, loop, done, context, fn, result, error

    def close(self) -> None:
        """Ask every thread to stop once the calls already submitted have run (for
        tests; the API's threads are daemons and end with the process)."""
        with self._lock:
            threads, self._threads = self._threads, []
            self._idle = 0
        for _ in threads:
            self._jobs.put(None)
        for thread in threads:
            thread.join()


def _deliver(
    loop: asyncio.AbstractEventLoop,
    done: asyncio.Future[Any],
    result: Any,
    exc: BaseException | None,
) -> None:
    try:
        loop.call_soon_threadsafe(_settle, done, result, exc)
    except RuntimeError:  # the loop was closed meanwhile: nobody waits for this call
        log.debug("route body finished after its event loop closed")


def _settle(done: asyncio.Future[Any], result: Any, exc: BaseException | None) -> None:
    if done.cancelled():
        return
    if exc is not None:
        done.set_exception(exc)
    else:
        done.set_result(result)


#: The process's route-body threads (reminder_api.deps.in_worker_thread).
ROUTE_THREADS = WorkerThreads()
