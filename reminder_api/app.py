"""create_app(): the FastAPI application, with every dependency passed in."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from datetime import datetime

from fastapi import FastAPI, Request, Response
from prometheus_client import CONTENT_TYPE_LATEST, generate_latest
from sqlalchemy import Engine, text

from reminder_api.deps import AppContext
from reminder_api.errors import install_error_handlers, problem
from reminder_api.routes import reminders
from reminder_core.clock import utcnow
from reminder_core.db.session import make_sessionmaker
from reminder_core.profiles import ProfileSource
from reminder_core.settings import Settings

MAX_BODY_BYTES = 64 * 1024


def create_app(
    settings: Settings,
    engine: Engine,
    profiles: ProfileSource,
    *,
    clock: Callable[[], datetime] = utcnow,
) -> FastAPI:
    """Build the API application.

    Args:
        settings: configuration (JWT key, limits).
        engine: database engine (already migrated).
        profiles: where a user's default timezone comes from.
        clock: current time, aware UTC (tests pass a fixed one).

    Raises:
        RuntimeError: no JWT key is configured or stored.
    """
    app = FastAPI(
        title="Reminders",
        version="0.1.0",
        description="Create one-time reminders; they are emailed at their local due time.",
    )
    app.state.ctx = AppContext(
        settings=settings,
        engine=engine,
        sessions=make_sessionmaker(engine),
        profiles=profiles,
        clock=clock,
        jwt_key=settings.jwt_key(),
    )
    install_error_handlers(app)

    @app.middleware("http")
    async def limit_body(
        request: Request, call_next: Callable[[Request], Awaitable[Response]]
    ) -> Response:
        length = request.headers.get("content-length")
        if length is not None and (not length.isdigit() or int(length) > MAX_BODY_BYTES):
            return problem(
                413,
                "Request too large",
                f"request bodies are limited to {MAX_BODY_BYTES} bytes",
                kind="too-large",
                instance=request.url.path,
            )
        return await call_next(request)

    app.include_router(reminders.router)

    @app.get("/healthz", tags=["operations"])
    def healthz() -> dict[str, str]:
        """Liveness: the process answers."""
        return {"status": "ok"}

    @app.get("/readyz", tags=["operations"])
    def readyz() -> Response:
        """Readiness: the database answers."""
        try:
            with engine.connect() as conn:
                conn.execute(text("SELECT 1"))
        except Exception as exc:
            return problem(503, "Not ready", f"database unavailable: {type(exc).__name__}")
        return Response('{"status":"ready"}', media_type="application/json")

    @app.get("/metrics", tags=["operations"], include_in_schema=False)
    def metrics() -> Response:
        return Response(generate_latest(), media_type=CONTENT_TYPE_LATEST)

    return app
