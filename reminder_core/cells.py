"""Cells (issue 18; docs/design.md, "Cells"): each cell is its own PostgreSQL database,
its own queue and its own workers; every user lives in exactly one cell, so almost every
transaction is local to one database.

`CELLS` names the cells; unset, there is one, `default`, made of DATABASE_URL and
QUEUE_URL, and nothing changes for a one-cell deployment. A worker runs for one cell
(`--cell NAME`, i.e. CELL): `cell_settings` gives it that cell's DATABASE_URL and
QUEUE_URL, so the workloads themselves know nothing of cells.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

from pydantic import BaseModel, ConfigDict, Field

from reminder_core.errors import ConfigurationError

if TYPE_CHECKING:
    from reminder_core.settings import Settings

#: A cell's name: a metric label value, a Kubernetes name suffix and a CLI argument.
CELL_NAME = r"^[a-z0-9]([a-z0-9-]{0,30}[a-z0-9])?$"
#: The one cell of a deployment without CELLS.
DEFAULT_CELL = "default"


class CellConfig(BaseModel):
    """One entry of CELLS.

    Attributes:
        name: CELL_NAME; unique among the cells.
        database_url: the cell's PostgreSQL (SQLAlchemy URL).
        queue_url: the cell's queue (as QUEUE_URL: postgres://<name>, sqs://<name> or an
            SQS queue URL).
        weight: its share of new users (> 0), relative to the others' weights.
        accepts_new_users: False: no new user is assigned to it (a full cell, or one
            being retired); its users stay.
    """

    model_config = ConfigDict(extra="forbid", frozen=True)

    name: str = Field(pattern=CELL_NAME)
    database_url: str = Field(min_length=1)
    queue_url: str = Field(default="postgres://reminders", min_length=1)
    weight: float = Field(default=1.0, gt=0, le=1_000_000)
    accepts_new_users: bool = True


@dataclass(frozen=True, slots=True)
class Cell:
    """A cell as the processes use it: CellConfig, with the defaults of a one-cell
    deployment filled in (`database_url` None: the embedded database)."""

    name: str
    database_url: str | None
    queue_url: str
    weight: float = 1.0
    accepts_new_users: bool = True


def cells_of(settings: Settings) -> tuple[Cell, ...]:
    """The deployment's cells, in CELLS order (the first holds the directory unless
    DIRECTORY_DATABASE_URL says otherwise).

    Raises:
        ConfigurationError: two cells share a name or a database URL, or none accepts
            new users.
    """
    if not settings.cells:
        return (Cell(DEFAULT_CELL, settings.database_url, settings.queue_url),)
    cells = tuple(
        Cell(c.name, c.database_url, c.queue_url, c.weight, c.accepts_new_users)
        for c in settings.cells
    )
    _check_unique("name", [c.name for c in cells])
    _check_unique("database_url", [c.database_url or "" for c in cells])
    if not any(c.accepts_new_users for c in cells):
        raise ConfigurationError("CELLS: at least one cell must accept new users")
    return cells


def _check_unique(what: str, values: Sequence[str]) -> None:
    seen: set[str] = set()
    for value in values:
        if value in seen:
            shown = value if what == "name" else "a database URL"
            raise ConfigurationError(f"CELLS: two cells have the same {what} ({shown})")
        seen.add(value)


def cell_named(settings: Settings, name: str) -> Cell:
    """The cell called `name`.

    Raises:
        ConfigurationError: no such cell (the message lists the cells).
    """
    cells = cells_of(settings)
    for cell in cells:
        if cell.name == name:
            return cell
    known = ", ".join(c.name for c in cells)
    raise ConfigurationError(f"CELL {name!r}: no such cell (CELLS has: {known})")


def cell_settings(settings: Settings) -> Settings:
    """The settings of one cell's worker: DATABASE_URL and QUEUE_URL of the cell CELL
    names, CELL set to it. Without CELLS: `settings` itself (CELL may be `default`).

    Raises:
        ConfigurationError: CELLS is set and CELL is not, or names no cell.
    """
    if not settings.cells:
        if settings.cell not in (None, DEFAULT_CELL):
            raise ConfigurationError(
                f"CELL {settings.cell!r}: CELLS is not set (the only cell is {DEFAULT_CELL!r})"
            )
        return settings
    if settings.cell is None:
        names = ", ".join(c.name for c in cells_of(settings))
        raise ConfigurationError(
            f"CELLS names several cells ({names}): give the worker one, --cell NAME (CELL)"
        )
    cell = cell_named(settings, settings.cell)
    return settings.model_copy(
        update={"database_url": cell.database_url, "queue_url": cell.queue_url}
    )


def process_settings(settings: Settings, *, worker: bool) -> Settings:
    """The settings a process opens its database and queue with: a worker's are its
    cell's (`cell_settings`: CELL required with CELLS); any other process (the API, a
    one-off command) without CELL gets the first cell's, where the directory lives by
    default, and routes users to their cells itself (`CellRouting`).

    Raises:
        ConfigurationError: as `cell_settings`.
    """
    if worker or settings.cell is not None or not settings.cells:
        return cell_settings(settings)
    first = cells_of(settings)[0]
    return settings.model_copy(
        update={"database_url": first.database_url, "queue_url": first.queue_url}
    )


def directory_url(settings: Settings) -> str | None:
    """The database of the cell directory: DIRECTORY_DATABASE_URL, else the first
    cell's (None: the embedded database)."""
    return settings.directory_database_url or cells_of(settings)[0].database_url
