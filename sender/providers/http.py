"""Blocking HTTP calls for the sender's threads, served by one aiohttp session.

The sender calls providers from `SENDER_CONCURRENCY` threads. With httpx's blocking
client each call cost ~1 ms of CPU on this project's 2-core reference machine when eight
threads shared it (httpx + httpcore + h11 in pure Python, plus the GIL handed between
threads per read and write), which capped delivery over HTTP at ~1,300/s whatever the
provider's speed. aiohttp parses HTTP in C and multiplexes every connection on one event
loop: the same request costs ~0.3 ms including the hand-off from the calling thread
(bench/end_to_end.py prints the CPU per occurrence).

`HttpClient` owns an event loop on a daemon thread and one `aiohttp.ClientSession` with a
bounded keep-alive pool; `post_json` submits the request to that loop and blocks the
calling thread until the answer is read. Requests are never retried here (aiohttp retries
only idempotent methods on a stale keep-alive connection; POST is not one), so every
provider call is one request and the caller decides what a failure means.
"""

from __future__ import annotations

import asyncio
import json
import threading
import weakref
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import aiohttp

#: Errors that prove the request never reached the server: no connection could be made
#: (refused, DNS, TLS handshake) or none was free within the connect timeout.
NOT_SENT_ERRORS: tuple[type[BaseException], ...] = (
    aiohttp.ClientConnectorError,
    aiohttp.ConnectionTimeoutError,
)
#: Errors after the request may have been written: read timeout, the server closing the
#: connection, a malformed answer. The server may have acted on the request.
NO_ANSWER_ERRORS: tuple[type[BaseException], ...] = (TimeoutError, aiohttp.ClientError)


@dataclass(frozen=True, slots=True)
class HttpAnswer:
    """An HTTP response read in full.

    Attributes:
        status: the status code.
        headers: response headers (case-insensitive lookup).
        body: the body's bytes.
    """

    status: int
    headers: Mapping[str, str]
    body: bytes

    @property
    def text(self) -> str:
        """The body decoded as UTF-8 (undecodable bytes replaced)."""
        return self.body.decode("utf-8", "replace")


class HttpClient:
    """A thread-safe blocking HTTP client over one aiohttp session.

    Args:
        connect_timeout_s: seconds to get a connection (from the pool or a new TCP/TLS
            connection); exceeding it raises `aiohttp.ConnectionTimeoutError` (the
            request was not sent).
        read_timeout_s: seconds to wait for each read of the answer; exceeding it raises
            `aiohttp.SocketTimeoutError` (a TimeoutError: the request may have been acted
            on).
        max_connections: connections kept to all hosts together; calls beyond it wait
            for a free one (within the connect timeout).
        name: the event-loop thread's name.

    Side effects: starts a daemon thread running an asyncio event loop; `close()` stops
    it and closes the connections (as does garbage collection of an unclosed client,
    without waiting).
    """

    def __init__(
        self,
        *,
        connect_timeout_s: float,
        read_timeout_s: float,
        max_connections: int = 20,
        name: str = "http",
    ) -> None:
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=_serve, args=(self._loop,), name=name, daemon=True)
        self._thread.start()
        self._closed = False
        timeout = aiohttp.ClientTimeout(
            total=None,
            connect=connect_timeout_s + read_timeout_s,  # pool wait included
            sock_connect=connect_timeout_s,
            sock_read=read_timeout_s,
        )
        self._session: aiohttp.ClientSession = self._run(self._open(timeout, max_connections))
        self._finalizer = weakref.finalize(self, _shut_down, self._loop, self._session)

    @staticmethod
    async def _open(timeout: aiohttp.ClientTimeout, limit: int) -> aiohttp.ClientSession:
        return aiohttp.ClientSession(
            timeout=timeout,
            connector=aiohttp.TCPConnector(limit=limit),
            json_serialize=json.dumps,
            raise_for_status=False,
            auto_decompress=True,
        )

    def _run(self, coro: Any) -> Any:
        return asyncio.run_coroutine_threadsafe(coro, self._loop).result()

    def post_json(
        self, url: str, payload: Any, *, headers: Mapping[str, str] | None = None
    ) -> HttpAnswer:
        """POST `payload` as JSON to `url` and read the whole answer; blocks the caller.

        Returns:
            the answer, whatever its status (an error status is not an exception).

        Raises:
            one of NOT_SENT_ERRORS: the request did not reach the server.
            one of NO_ANSWER_ERRORS: no complete answer after the request may have been
                sent (read timeout, connection closed, malformed response).
            RuntimeError: the client is closed.
        """
        if self._closed:
            raise RuntimeError("HttpClient is closed")
        answer: HttpAnswer = self._run(self._post(url, payload, dict(headers or {})))
        return answer

    async def _post(self, url: str, payload: Any, headers: dict[str, str]) -> HttpAnswer:
        async with self._session.post(url, json=payload, headers=headers) as response:
            body = await response.read()
            return HttpAnswer(response.status, response.headers, body)

    def close(self) -> None:
        """Close the connections and stop the event loop's thread. Idempotent."""
        if self._closed:
            return
        self._closed = True
        self._finalizer.detach()
        try:
            self._run(self._session.close())
        finally:
            self._loop.call_soon_threadsafe(self._loop.stop)
            self._thread.join(5)


def _serve(loop: asyncio.AbstractEventLoop) -> None:
    """The client thread: run `loop` until stopped, then close it."""
    asyncio.set_event_loop(loop)
    try:
        loop.run_forever()
    finally:
        loop.close()


def _shut_down(loop: asyncio.AbstractEventLoop, session: aiohttp.ClientSession) -> None:
    """Close `session` and stop `loop`, without waiting: the finalizer of a client that
    was never closed (it may run on any thread, the loop's own included)."""

    async def shut() -> None:
        try:
            await session.close()
        finally:
            loop.stop()

    if not loop.is_closed():
        try:
            asyncio.run_coroutine_threadsafe(shut(), loop)
        except RuntimeError:  # closed meanwhile
            pass
