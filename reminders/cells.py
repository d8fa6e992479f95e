"""`reminders cells`: the cells of a CELLS deployment (docs/design.md, "Cells"): where
users live, and moving one between cells (reminder_core.services.cell_move)."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import TYPE_CHECKING, Annotated

import typer

if TYPE_CHECKING:
    from reminder_core.cell_directory import CellRouting
    from reminder_core.settings import Settings

cells = typer.Typer(
    help="The cells of a CELLS deployment: list them, find or move a user.", no_args_is_help=True
)


@cells.command("list")
def cells_list() -> None:
    """Each cell of CELLS with its users (as the directory counts them), its weight and
    whether it takes new users."""
    from reminder_core.store import cell_loads

    with _routing() as (_, routing):
        with routing.directory.engine.connect() as conn:
            loads = cell_loads.list(conn)
        for cell in routing.directory.cells.values():
            typer.echo(
                f"{cell.name}\tusers={loads.get(cell.name, 0)}\tweight={cell.weight:g}"
                f"\tnew_users={'yes' if cell.accepts_new_users else 'no'}"
            )


@cells.command("where")
def cells_where(user: Annotated[str, typer.Argument(help="The user id.")]) -> None:
    """The cell USER lives in (exit status 1 when the directory has no cell for them)."""
    with _routing() as (_, routing):
        cell = routing.directory.cell_of(user, assign=False)
    if cell is None:
        typer.echo(f"{user}: no cell (never seen by the API)", err=True)
        raise typer.Exit(1)
    typer.echo(cell.name)


@cells.command("move")
def cells_move(
    user: Annotated[str, typer.Argument(help="The user id to move.")],
    to: Annotated[str | None, typer.Option("--to", help="The cell to move them to.")] = None,
    abort: Annotated[
        bool, typer.Option("--abort", help="Undo a move that has not switched yet.")
    ] = False,
    drain_timeout: Annotated[
        float,
        typer.Option(min=1, help="Seconds to wait for the user's occurrences in flight to finish."),
    ] = 300.0,
) -> None:
    """Move USER's reminders, delivery history, calendar feed and webhook endpoints to
    another cell: freeze and drain them in their cell (their API writes answer 503 with
    Retry-After meanwhile), copy, check the copy, switch the directory, resume them in
    the new cell, then (after CELL_CACHE_TTL_S) delete them from the old one. Nothing is
    lost or sent twice; an occurrence due meanwhile is sent late by the move's seconds.
    Interrupted anywhere, run it again to finish; before the switch, --abort undoes it.

    Exit status: 0 moved (or nothing to do), 1 not moved (drain timeout: undone; copy
    mismatch; a move elsewhere in progress), 2 bad arguments or configuration."""
    from reminder_core.errors import NotFound, ReminderError
    from reminder_core.services.cell_move import CellMove

    if (to is None) == (not abort):
        typer.echo("error: give --to CELL, or --abort", err=True)
        raise typer.Exit(2)
    with _routing() as (settings, routing):
        mover = CellMove(
            routing.directory,
            routing.engine_of,
            cache_ttl_s=settings.cell_cache_ttl_s + settings.db_pool_timeout_s,
            delivery_lease_s=settings.delivery_lease_s,
            drain_timeout_s=drain_timeout,
            progress=typer.echo,
        )
        try:
            if abort:
                if not mover.abort(user):
                    typer.echo(f"no move of {user} in progress")
                return
            assert to is not None
            mover.move(user, to)
        except NotFound as exc:
            typer.echo(f"error: {exc}", err=True)
            raise typer.Exit(2) from None
        except ReminderError as exc:  # Conflict, DrainTimeout, MoveFailed
            typer.echo(f"not moved: {exc}", err=True)
            raise typer.Exit(1) from None


@contextmanager
def _routing() -> Iterator[tuple[Settings, CellRouting]]:
    """The settings and the CellRouting (directory and cell engines) of CELLS, closed on
    exit; exit status 2 when CELLS is not set or is inconsistent."""
    from reminder_core.cell_directory import open_cell_routing
    from reminder_core.cells import cells_of
    from reminder_core.db.session import make_engine
    from reminder_core.errors import configuration_errors
    from reminder_core.logging import configure_logging
    from reminder_core.settings import Settings

    settings = Settings()
    configure_logging("WARNING", settings.log_format)
    if not settings.cells:
        typer.echo("error: CELLS is not set: one cell, nothing to move between", err=True)
        raise typer.Exit(2)
    with configuration_errors():
        first = cells_of(settings)[0]
        assert first.database_url is not None  # every CELLS entry has one
        home = make_engine(first.database_url, pool_size=2, application_name="reminders-cells")
        routing = open_cell_routing(settings, home, application_name="reminders-cells")
    assert routing is not None
    try:
        yield settings, routing
    finally:
        routing.close()
        if routing.directory.engine is not home:
            routing.directory.engine.dispose()
        home.dispose()
