"""`reminders api` / `python -m reminder_api`: serve the API with uvicorn."""

from __future__ import annotations

import threading

import uvicorn

from reminder_api.app import create_app
from reminder_core.errors import configuration_errors
from reminder_core.logging import configure_logging
from reminder_core.runtime import open_runtime
from reminder_core.settings import Settings
from reminder_core.worker.signals import install_stop_handlers


def main(settings: Settings | None = None, *, host: str = "127.0.0.1", port: int = 8000) -> int:
    """Serve until SIGTERM/SIGINT; returns 0 after a clean stop, 1 if the server failed to
    start (e.g. the port is taken)."""
    settings = settings or Settings()
    configure_logging(settings.log_level, settings.log_format)
    # uvicorn captures SIGTERM/SIGINT while it serves and re-raises them once it has shut
    # down; with our handler in place that re-raise is a clean stop, not a kill.
    stop = threading.Event()
    install_stop_handlers(stop)
    with configuration_errors():
        rt = open_runtime(settings, application_name="reminders-api")
        app = create_app(settings, rt.engine, rt.profiles)
    try:
        if stop.is_set():
            return 0
        server = uvicorn.Server(
            uvicorn.Config(
                app,
                host=host,
                port=port,
                log_level=settings.log_level.lower(),
                log_config=None,  # uvicorn's records go to our handler (reminder_core.logging)
                timeout_graceful_shutdown=int(settings.shutdown_grace_s),
            )
        )
        server.run()
        return 0 if server.started else 1
    finally:
        rt.close()
