"""The web console: static pages under /console that call the REST API with the user's
bearer token (docs/console.md)."""

from __future__ import annotations

from pathlib import Path

from fastapi import FastAPI
from fastapi.responses import FileResponse
from fastapi.staticfiles import StaticFiles

STATIC_DIR = Path(__file__).parent / "static"
PREFIX = "/console"

#: The page runs only its own files and talks only to this origin: an injected script or
#: style cannot run, and nothing (the token included) can be sent elsewhere.
PAGE_HEADERS = {
    "Content-Security-Policy": (
        "default-src 'none'; script-src 'self'; style-src 'self'; connect-src 'self'; "
        "img-src 'self' data:; base-uri 'none'; form-action 'none'; frame-ancestors 'none'"
    ),
    "X-Content-Type-Options": "nosniff",
    "Referrer-Policy": "no-referrer",
    "Cache-Control": "no-cache",
}


def mount_console(app: FastAPI) -> None:
    """Serve the console on `app`: the page at /console (and /console/), its scripts and
    styles under /console/static/.

    The page is public static content and holds no data: every data call it makes goes to
    /v1 with the user's bearer token, through the same authentication and problem+json
    errors as any other client. Side effect: adds two routes and a mount to `app`.
    """

    def index() -> FileResponse:
        """The console's single page (it routes views on the URL fragment)."""
        return FileResponse(STATIC_DIR / "index.html", headers=PAGE_HEADERS)

    for path in (PREFIX, PREFIX + "/"):
        app.add_api_route(path, index, methods=["GET"], include_in_schema=False)
    app.mount(PREFIX + "/static", StaticFiles(directory=STATIC_DIR), name="console-static")
