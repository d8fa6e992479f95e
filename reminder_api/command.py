"""The `api` command (`reminders api`, `python -m reminder_api`); cheap to import: the
application is imported when it runs."""

from __future__ import annotations

from typing import Annotated

import typer

Host = Annotated[str, typer.Option(help="Interface to listen on.")]
Port = Annotated[int, typer.Option(min=1, max=65535, help="TCP port to listen on.")]
Workers = Annotated[
    int | None,
    typer.Option(
        min=1,
        max=64,
        help="Processes serving the API on one socket. Default: API_WORKERS, else one per"
        " CPU (at most 4).",
    ),
]


def api(host: Host = "127.0.0.1", port: Port = 8000, workers: Workers = None) -> None:
    """Serve the REST API."""
    from reminder_api.main import main

    raise typer.Exit(main(host=host, port=port, workers=workers))
