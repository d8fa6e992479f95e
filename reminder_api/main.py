"""`reminders api` / `python -m reminder_api`: serve the API with uvicorn."""

from __future__ import annotations

import uvicorn

from reminder_api.app import create_app
from reminder_core.logging import configure_logging
from reminder_core.runtime import open_runtime
from reminder_core.settings import Settings


def main(settings: Settings | None = None, *, host: str = "127.0.0.1", port: int = 8000) -> int:
    settings = settings or Settings()
    configure_logging(settings.log_level)
    rt = open_runtime(settings, application_name="reminders-api")
    try:
        app = create_app(settings, rt.engine, rt.profiles)
        uvicorn.run(
            app,
            host=host,
            port=port,
            log_level=settings.log_level.lower(),
            timeout_graceful_shutdown=int(settings.shutdown_grace_s),
        )
    finally:
        rt.close()
    return 0
