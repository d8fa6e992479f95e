"""ASGI middleware: request rate, errors and latency of the API, per route template."""

from __future__ import annotations

import time

from starlette.types import ASGIApp, Message, Receive, Scope, Send

from reminder_core.metrics import API_LATENCY, API_REQUESTS

#: `route` label of a request that matched no route (404, or refused before routing).
UNMATCHED = "unmatched"


class RequestMetrics:
    """Count and time every HTTP request: `reminders_api_requests_total{method, route,
    status}` and `reminders_api_request_duration_seconds{method, route}`.

    `route` is the matched route's template (`/v1/reminders/{reminder_id}`), never the raw
    path, so ids cannot blow up the label set; "unmatched" otherwise. A request whose
    handler raised is counted with status 500 (what the server error middleware answers),
    and the exception goes on. Install it outermost so that answers of the other
    middlewares (413 of BodyLimit) are counted too.
    """

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        started = time.perf_counter()
        status = 500

        async def send_status(message: Message) -> None:
            nonlocal status
            if message["type"] == "http.response.start":
                status = int(message["status"])
            await send(message)

        try:
            await self.app(scope, receive, send_status)
        finally:
            route = scope.get("route")
            template = getattr(route, "path", None) or UNMATCHED
            method = str(scope.get("method", ""))
            API_REQUESTS.labels(method=method, route=template, status=str(status)).inc()
            API_LATENCY.labels(method=method, route=template).observe(time.perf_counter() - started)
