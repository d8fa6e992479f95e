"""The API's route-body threads (reminder_api/threads.py): what the route bodies rely on
from anyio's `to_thread.run_sync`, which they replaced (issue 15): the call's return or
exception in the caller, the caller's context variables, a bounded set of reused
threads, and a cancelled caller that waits for its body to end."""

from __future__ import annotations

import asyncio
import contextvars
import threading
import time
from collections.abc import Iterator

import pytest

from reminder_api.threads import WorkerThreads

REQUEST_ID: contextvars.ContextVar[str | None] = contextvars.ContextVar("request_id", default=None)


@pytest.fixture
def threads() -> Iterator[WorkerThreads]:
    pool = WorkerThreads(max_threads=2, name="test-route")
    yield pool
    pool.close()


def test_a_call_runs_in_a_worker_thread_and_returns(threads: WorkerThreads) -> None:
    async def main() -> tuple[str, str]:
        return threading.current_thread().name, await threads.run(
            lambda: threading.current_thread().name
        )

    loop_thread, worker = asyncio.run(main())
    assert worker.startswith("test-route-")
    assert worker != loop_thread


def test_an_exception_is_raised_in_the_caller(threads: WorkerThreads) -> None:
    error = LookupError("no such reminder")

    def fail() -> None:
        raise error

    async def main() -> None:
        await threads.run(fail)

    with pytest.raises(LookupError) as raised:
        asyncio.run(main())
    assert raised.value is error


def test_the_callers_context_is_seen_and_nothing_leaks_back(threads: WorkerThreads) -> None:
    def read_then_set() -> str | None:
        seen = REQUEST_ID.get()
        REQUEST_ID.set("set in the thread")
        return seen

    async def main() -> tuple[str | None, str | None]:
        REQUEST_ID.set("request 1")
        seen = await threads.run(read_then_set)
        return seen, REQUEST_ID.get()

    assert asyncio.run(main()) == ("request 1", "request 1")


def test_at_most_max_threads_run_at_once_and_threads_are_reused(threads: WorkerThreads) -> None:
    running, most, names = 0, 0, set()
    lock = threading.Lock()

    def work() -> None:
        nonlocal running, most
        with lock:
            running += 1
            most = max(most, running)
            names.add(threading.current_thread().name)
        time.sleep(0.02)
        with lock:
            running -= 1

    async def main() -> None:
        await asyncio.gather(*(threads.run(work) for _ in range(8)))
        for _ in range(20):  # one at a time: the idle threads are reused
            await threads.run(work)

    asyncio.run(main())
    assert most == 2
    assert len(names) == 2


def test_one_call_at_a_time_needs_one_thread() -> None:
    pool = WorkerThreads(max_threads=40, name="test-serial")
    try:

        async def main() -> set[str]:
            return {await pool.run(lambda: threading.current_thread().name) for _ in range(50)}

        assert len(asyncio.run(main())) == 1
    finally:
        pool.close()


def test_a_cancelled_caller_waits_for_its_body_to_end(threads: WorkerThreads) -> None:
    started, release = threading.Event(), threading.Event()
    ended: list[float] = []

    def body() -> str:
        started.set()
        release.wait(5)
        ended.append(time.monotonic())
        return "done"

    async def main() -> float:
        task = asyncio.create_task(threads.run(body))
        while not started.is_set():
            await asyncio.sleep(0.005)
        task.cancel()
        await asyncio.sleep(0.1)
        assert not task.done()  # still waiting for the body, as anyio's run_sync does
        threading.Timer(0.05, release.set).start()
        with pytest.raises(asyncio.CancelledError):
            await task
        return time.monotonic()

    cancelled_at = asyncio.run(main())
    assert ended
    assert ended[0] <= cancelled_at  # the cancellation went on only after the body ended
