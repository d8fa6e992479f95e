"""ASGI middleware: shed load past the process's capacity instead of queueing it.

Without it, requests past what the process can work on wait for a worker thread and then
for a pooled connection, each wait unbounded, until clients time out (issue 15: an
open-loop 300 req/s left 3,647 of 6,000 requests waiting 30 s). With it, at most
`max_in_flight` requests are worked on at once and at most `max_queued` more wait for a
slot, each up to `queue_timeout_s`; a request finding the queue full, or still waiting
when its time is up, is answered at once with 503 problem+json and `Retry-After` (RFC
9110 §15.6.4, §10.2.3), which clients and load balancers retry elsewhere or later. The
queue keeps a burst of concurrent clients from being shed; its bound keeps overload from
turning into latency: past it, shedding costs no wait at all.
docs/design.md, "API capacity and overload".
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterable

from starlette.types import ASGIApp, Receive, Scope, Send

from reminder_api.errors import problem
from reminder_core.metrics import API_SHED


class LoadShedding:
    """Admit at most `max_in_flight` HTTP requests at once; shed the rest with 503.

    Args:
        max_in_flight: requests worked on at once (API_MAX_IN_FLIGHT).
        max_queued: requests that may wait for a slot (API_MAX_QUEUED; 0: none).
        queue_timeout_s: how long a queued request may wait for a slot, seconds
            (API_QUEUE_TIMEOUT_S).
        retry_after_s: the `Retry-After` of a shed request, seconds.
        exempt: paths never held back nor shed (liveness, readiness, metrics: an
            orchestrator must see an overloaded process as alive and a scraper must see
            its metrics, or overload turns into restarts).

    Side effects: counts shed requests in `reminders_api_shed_total{method}`.
    """

    def __init__(
        self,
        app: ASGIApp,
        *,
        max_in_flight: int,
        max_queued: int,
        queue_timeout_s: float,
        retry_after_s: int,
        exempt: Iterable[str] = (),
    ) -> None:
        self.app = app
        self.max_queued = max_queued
        self.queue_timeout_s = queue_timeout_s
        self._queued = 0
        self.retry_after_s = retry_after_s
        self.exempt = frozenset(exempt)
        self._slots = asyncio.Semaphore(max_in_flight)

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or scope["path"] in self.exempt:
            await self.app(scope, receive, send)
            return
        if not await self._admit():
            API_SHED.labels(method=str(scope.get("method", ""))).inc()
            response = problem(
                503,
                "Overloaded",
                "the server is at capacity; retry after the time Retry-After gives",
                kind="overloaded",
                headers={"Retry-After": str(self.retry_after_s)},
                instance=scope["path"],
            )
            await response(scope, receive, send)
            return
        try:
            await self.app(scope, receive, send)
        finally:
            self._slots.release()

    async def _admit(self) -> bool:
        """Take a slot: at once when one is free, else after queueing for at most
        `queue_timeout_s` when fewer than `max_queued` wait; False (shed) otherwise."""
        if not self._slots.locked():
            await self._slots.acquire()  # free: returns without suspending
            return True
        if self._queued >= self.max_queued or self.queue_timeout_s <= 0:
            return False
        self._queued += 1
        try:
            await asyncio.wait_for(self._slots.acquire(), self.queue_timeout_s)
        except TimeoutError:
            return False
        finally:
            self._queued -= 1
        return True
