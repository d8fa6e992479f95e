"""create_app(): the FastAPI application, with every dependency passed in."""

from __future__ import annotations

import os
from collections.abc import Callable
from datetime import datetime

import httpx
from fastapi import FastAPI, Response
from fastapi_offline import FastAPIOffline
from prometheus_client import (
    CONTENT_TYPE_LATEST,
    REGISTRY,
    CollectorRegistry,
    generate_latest,
    multiprocess,
)
from sqlalchemy import Engine
from starlette.datastructures import Headers
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from reminder_api.console import mount_console
from reminder_api.deps import AppContext
from reminder_api.errors import RequestTooLarge, install_error_handlers, problem
from reminder_api.metrics import RequestMetrics
from reminder_api.openapi import (
    DESCRIPTION,
    DOCS_ASSETS_URL,
    TITLE,
    docs_parameters,
    install_openapi,
    problem_responses,
)
from reminder_api.overload import LoadShedding
from reminder_api.ratelimit import RateLimit, policy_of
from reminder_api.routes import (
    admin,
    calendar_feed,
    links,
    occurrences,
    reminders,
    webhook_endpoints,
)
from reminder_core.cell_directory import CellRouting
from reminder_core.clock import utcnow
from reminder_core.profiles import ProfileSource
from reminder_core.scheduling import ScheduleConfig
from reminder_core.settings import Settings
from reminder_core.store import transaction
from webhooks.router import PREFIX as WEBHOOKS_PREFIX
from webhooks.router import WebhookConfig, build_router

MAX_BODY_BYTES = 64 * 1024
#: Liveness, readiness and metrics: answered even when the API sheds load.
OPERATIONS_PATHS = ("/healthz", "/readyz", "/metrics")


def create_app(
    settings: Settings,
    engine: Engine,
    profiles: ProfileSource,
    *,
    clock: Callable[[], datetime] = utcnow,
    webhook_http: httpx.Client | None = None,
    cells: CellRouting | None = None,
) -> FastAPI:
    """Build the API application.

    Args:
        settings: configuration (JWT key, limits).
        engine: database engine (already migrated).
        profiles: where a user's default timezone comes from.
        clock: current time, aware UTC (tests pass a fixed one).
        webhook_http: client for the SNS webhook's certificate and confirmation requests
            (tests route the SNS host to a local server); default: its own.
        cells: with CELLS, the routing of each user's requests to their cell; `engine`
            is then the first cell's (docs/design.md, "Cells").

    Raises:
        ConfigurationError: no JWT key is configured or stored.
        ValueError: WEBHOOK_RESEND_SECRET is not a whsec_<base64> secret.
    """
    # /docs and /redoc load Swagger UI and ReDoc from the files fastapi-offline ships,
    # served under DOCS_ASSETS_URL: they work without internet access (issue 16).
    app = FastAPIOffline(
        title=TITLE,
        version="0.1.0",
        description=DESCRIPTION,
        static_url=DOCS_ASSETS_URL,
        swagger_ui_parameters=docs_parameters(),
    )
    app.state.ctx = AppContext(
        settings=settings,
        engine=engine,
        profiles=profiles,
        clock=clock,
        jwt_key=settings.jwt_key(),
        schedule_config=ScheduleConfig.from_settings(settings),
        cells=cells,
    )
    install_error_handlers(app)
    app.add_middleware(
        BodyLimit,
        max_bytes=MAX_BODY_BYTES,
        prefix_limits={WEBHOOKS_PREFIX + "/": settings.webhook_max_body_bytes},
    )
    app.add_middleware(  # inside the load shedding: a counted request holds a slot
        RateLimit,
        ctx=app.state.ctx,
        policy=policy_of(settings.rate_limit_per_minute, settings.rate_limit_burst),
    )
    app.add_middleware(
        LoadShedding,
        max_in_flight=settings.api_max_in_flight,
        max_queued=settings.api_max_queued,
        queue_timeout_s=settings.api_queue_timeout_s,
        retry_after_s=settings.api_retry_after_s,
        exempt=OPERATIONS_PATHS,
    )
    app.add_middleware(RequestMetrics)  # added last: outermost, counts 413s and shed 503s

    app.include_router(reminders.router)
    app.include_router(occurrences.router)
    app.include_router(calendar_feed.router)  # the .ics feed and import (issue 17)
    app.include_router(links.router)  # the snooze and stop links of emails (issue 17)
    app.include_router(webhook_endpoints.router)  # the webhook channel (issue 17)
    app.include_router(admin.router)
    app.include_router(
        build_router(
            WebhookConfig.from_settings(settings),
            engine=engine,
            clock=clock,
            http=webhook_http,
            cells=cells,
        )
    )
    mount_console(app)  # the web console under /console (docs/console.md)

    @app.get("/healthz", tags=["operations"], summary="Liveness")
    async def healthz() -> dict[str, str]:
        """The process answers (on the event loop: no worker thread needed); never shed."""
        return {"status": "ok"}

    @app.get(
        "/readyz",
        tags=["operations"],
        summary="Readiness",
        responses={
            200: {
                "description": "The database answers.",
                "content": {"application/json": {"example": {"status": "ready"}}},
            },
            503: {  # no Retry-After: answered to a probe, not to a client
                "content": problem_responses(503)[503]["content"],
                "description": "The database does not answer.",
            },
        },
    )
    def readyz() -> Response:
        """The database answers (200), or not (503); never shed."""
        try:
            with engine.connect() as conn:
                transaction.ping(conn)
        except Exception as exc:
            return problem(503, "Not ready", f"database unavailable: {type(exc).__name__}")
        return Response('{"status":"ready"}', media_type="application/json")

    @app.get("/metrics", tags=["operations"], include_in_schema=False)
    def metrics() -> Response:
        """Prometheus exposition; under `reminders api --workers N` (PROMETHEUS_MULTIPROC_DIR
        set) the sum over every worker process, whichever one answers."""
        return Response(generate_latest(metrics_registry()), media_type=CONTENT_TYPE_LATEST)

    install_openapi(app, settings)
    return app


def metrics_registry() -> CollectorRegistry:
    """The default registry, or with PROMETHEUS_MULTIPROC_DIR set (several API processes)
    a registry that reads every process's samples from that directory
    (prometheus_client's multiprocess mode)."""
    if not os.environ.get("PROMETHEUS_MULTIPROC_DIR"):
        return REGISTRY
    registry = CollectorRegistry()
    multiprocess.MultiProcessCollector(registry)  # type: ignore[no-untyped-call]
    return registry


class BodyLimit:
    """ASGI middleware: refuse request bodies over `max_bytes` with 413 problem+json.

    A declared Content-Length over the limit is answered before the body is read; a body
    without one (chunked transfer coding) is counted as it is received, and the read that
    crosses the limit raises `RequestTooLarge` (an HTTPException, so FastAPI's body parser
    lets it through to the problem+json handler instead of turning it into a 400).
    `prefix_limits` gives paths under a prefix their own limit (webhooks: SNS messages
    alone may reach 256 KiB).
    """

    def __init__(
        self, app: ASGIApp, max_bytes: int, prefix_limits: dict[str, int] | None = None
    ) -> None:
        self.app = app
        self.max_bytes = max_bytes
        self.prefix_limits = prefix_limits or {}

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        path: str = scope["path"]
        max_bytes = next(
            (n for prefix, n in self.prefix_limits.items() if path.startswith(prefix)),
            self.max_bytes,
        )
        detail = f"request bodies are limited to {max_bytes} bytes"
        length = Headers(scope=scope).get("content-length")
        if length is not None and (not length.isdigit() or int(length) > max_bytes):
            response = problem(
                413, "Request too large", detail, kind="too-large", instance=scope["path"]
            )
            await response(scope, receive, send)
            return
        received = 0

        async def limited_receive() -> Message:
            nonlocal received
            message = await receive()
            if message["type"] == "http.request":
                received += len(message.get("body", b""))
                if received > max_bytes:
                    raise RequestTooLarge(detail)
            return message

        await self.app(scope, limited_receive, send)
