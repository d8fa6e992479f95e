"""`reminders` CLI (typer): api, coordinator, sweeper, sender, dev, migrate, token."""

from __future__ import annotations

from typing import Annotated

import typer

app = typer.Typer(
    help="Reminder scheduler: run a workload, or everything at once with `reminders dev`.",
    no_args_is_help=True,
    add_completion=False,
)

Host = Annotated[str, typer.Option(help="Interface to listen on.")]
Port = Annotated[int, typer.Option(help="TCP port to listen on.")]


@app.command()
def dev(host: Host = "127.0.0.1", port: Port = 8000) -> None:
    """Run the API and every workload in one process (embedded PostgreSQL when
    DATABASE_URL is unset; state in ./.reminders)."""
    from reminders.dev import run_dev

    raise typer.Exit(run_dev(host, port))


@app.command()
def api(host: Host = "127.0.0.1", port: Port = 8000) -> None:
    """Serve the REST API."""
    from reminder_api.main import main

    raise typer.Exit(main(host=host, port=port))


@app.command()
def coordinator() -> None:
    """Claim due reminders into the outbox and publish them."""
    from coordinator.main import main

    raise typer.Exit(main())


@app.command()
def sweeper() -> None:
    """Republish outbox rows left unpublished (safety net)."""
    from outbox_sweeper.main import main

    raise typer.Exit(main())


@app.command()
def sender() -> None:
    """Deliver queued occurrences by email."""
    from sender.main import main

    raise typer.Exit(main())


@app.command()
def migrate() -> None:
    """Apply database migrations (Alembic) and exit."""
    from reminder_core.db.embedded import resolve_database_url
    from reminder_core.db.migrate import upgrade
    from reminder_core.logging import configure_logging
    from reminder_core.settings import Settings

    settings = Settings()
    configure_logging(settings.log_level)
    upgrade(resolve_database_url(settings.database_url, settings.state_dir))
    typer.echo("database is at the newest migration")


@app.command()
def token(
    user: Annotated[str, typer.Option("--user", help="User id (the token's `sub`).")],
    ttl: Annotated[int, typer.Option(help="Lifetime in seconds.", min=60)] = 30 * 86400,
) -> None:
    """Print a bearer token for USER (development; uses JWT_SECRET or ./.reminders/jwt_secret)."""
    from reminder_core.settings import Settings
    from reminder_core.tokens import MAX_SUBJECT_LENGTH, mint_token

    if not user or len(user) > MAX_SUBJECT_LENGTH or "\x00" in user:
        typer.echo(f"error: --user must be 1 to {MAX_SUBJECT_LENGTH} characters", err=True)
        raise typer.Exit(2)
    try:
        typer.echo(mint_token(Settings(), user, ttl_s=ttl))
    except RuntimeError as exc:
        typer.echo(f"error: {exc}", err=True)
        raise typer.Exit(2) from None


def main() -> None:
    app()
