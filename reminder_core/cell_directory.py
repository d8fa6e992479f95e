"""The cell directory (docs/design.md, "Cells"; issue 18): which cell a user lives in,
recorded once (not `hash mod N`: adding a cell moves nobody), read through a per-process
cache.

A user seen for the first time goes to the cell that accepts new users with the fewest
users per unit of weight (ties: the first in CELLS order); two processes assigning the
same new user at once agree, because the first insert wins and the other reads it.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from datetime import datetime
from typing import TYPE_CHECKING

from cachetools import TTLCache
from sqlalchemy import Engine

from reminder_core.cells import Cell, cells_of, directory_url
from reminder_core.clock import utcnow
from reminder_core.db.session import make_engine
from reminder_core.errors import ConfigurationError
from reminder_core.store import cell_assignments, cell_loads

if TYPE_CHECKING:
    from reminder_core.settings import Settings


def pick_cell(cells: Sequence[Cell], loads: dict[str, int]) -> Cell:
    """The cell a new user goes to: among those accepting new users, the lowest
    (users + 1) / weight, the first in `cells` order on a tie.

    Raises:
        ConfigurationError: no cell accepts new users.
    """
    open_cells = [c for c in cells if c.accepts_new_users]
    if not open_cells:
        raise ConfigurationError("CELLS: no cell accepts new users")
    return min(open_cells, key=lambda c: (loads.get(c.name, 0) + 1) / c.weight)


class CellDirectory:
    """Looks up (and on first sight, assigns) a user's cell.

    Args:
        engine: the directory's database (`cells.directory_url`).
        cells: the deployment's cells (`cells.cells_of`).
        cache_ttl_s: how long a looked-up cell is trusted, seconds; a user moved between
            cells is seen by every process within this time (the move tool waits it out).
        cache_size: most users cached.
        clock: now, aware UTC.
    """

    def __init__(
        self,
        engine: Engine,
        cells: Sequence[Cell],
        *,
        cache_ttl_s: float = 60.0,
        cache_size: int = 100_000,
        clock: Callable[[], datetime] = utcnow,
    ) -> None:
        self.engine = engine
        self.cells = {c.name: c for c in cells}
        self._order = tuple(cells)
        self._clock = clock
        self._cache: TTLCache[str, str] = TTLCache(maxsize=cache_size, ttl=cache_ttl_s)

    def cell_of(self, user_id: str, *, assign: bool = True) -> Cell | None:
        """The cell `user_id` lives in; a user without one is assigned (`pick_cell`) when
        `assign`, else None.

        Side effects: on assignment, one committed transaction on the directory.

        Raises:
            ConfigurationError: the directory names a cell CELLS does not have (a cell
                removed from the configuration while users still live in it).
            sqlalchemy.exc.OperationalError: the directory's database is unreachable.
        """
        name = self._cache.get(user_id)
        if name is None:
            name = self._lookup(user_id, assign=assign)
            if name is None:
                return None
            self._cache[user_id] = name
        cell = self.cells.get(name)
        if cell is None:
            raise ConfigurationError(f"user {user_id!r} lives in cell {name!r}, not in CELLS")
        return cell

    def forget(self, user_id: str) -> None:
        """Drop `user_id` from this process's cache (after a move)."""
        self._cache.pop(user_id, None)

    def _lookup(self, user_id: str, *, assign: bool) -> str | None:
        with self.engine.connect() as conn:
            found = cell_assignments.get(conn, user_id=user_id)
        if found is not None or not assign:
            return found
        with self.engine.begin() as conn:
            chosen = pick_cell(self._order, cell_loads.list(conn))
            if cell_assignments.insert(conn, user_id=user_id, cell=chosen.name, now=self._clock()):
                cell_loads.add(conn, cell=chosen.name, users=1)
                return chosen.name
            return cell_assignments.get(conn, user_id=user_id)


class CellRouting:
    """The API's way to its users' cells: the directory and one engine per cell (made
    lazily, on the first request for a user of that cell).

    Args:
        directory: the cell directory.
        make_engine: builds the engine of one cell (its `database_url`); engines are
            kept for the life of the process.
    """

    def __init__(self, directory: CellDirectory, make_engine: Callable[[Cell], Engine]) -> None:
        self.directory = directory
        self._make_engine = make_engine
        self._engines: dict[str, Engine] = {}

    def engine_for(self, user_id: str) -> Engine:
        """The engine of `user_id`'s cell (assigning one to a new user).

        Raises:
            as CellDirectory.cell_of.
        """
        cell = self.directory.cell_of(user_id)
        assert cell is not None  # assign=True
        return self.engine_of(cell)

    def engine_of(self, cell: Cell) -> Engine:
        """The engine of `cell`."""
        engine = self._engines.get(cell.name)
        if engine is None:
            engine = self._engines.setdefault(cell.name, self._make_engine(cell))
        return engine

    def all_engines(self) -> list[tuple[Cell, Engine]]:
        """Every cell with its engine, in CELLS order."""
        return [(cell, self.engine_of(cell)) for cell in self.directory.cells.values()]

    def close(self) -> None:
        """Dispose of every engine made (not the directory's, which its owner closes)."""
        for engine in self._engines.values():
            if engine is not self.directory.engine:
                engine.dispose()
        self._engines.clear()


def open_cell_routing(
    settings: Settings,
    home: Engine,
    *,
    application_name: str,
    statement_timeout_s: float = 0.0,
) -> CellRouting | None:
    """The API's CellRouting for CELLS, None without CELLS (one cell: `home` alone).

    Args:
        home: the engine of the first cell (the process's `Runtime.engine`); used for the
            directory too unless DIRECTORY_DATABASE_URL names another database.
        statement_timeout_s: every engine made here bounds its statements so (seconds, 0
            none; `make_engine`), as `home` does.

    Raises:
        ConfigurationError: CELLS is inconsistent (`cells_of`).
    """
    if not settings.cells:
        return None
    cells = cells_of(settings)
    first = cells[0]
    url = directory_url(settings)
    directory_engine = (
        home
        if url == first.database_url or url is None
        else make_engine(
            url,
            pool_size=2,
            application_name=application_name,
            statement_timeout_s=statement_timeout_s,
        )
    )

    def engine_of(cell: Cell) -> Engine:
        if cell.name == first.name:
            return home
        assert cell.database_url is not None  # CELLS entries always have one
        return make_engine(
            cell.database_url,
            pool_size=settings.db_pool_size,
            application_name=application_name,
            pool_timeout_s=settings.db_pool_timeout_s,
            statement_timeout_s=statement_timeout_s,
        )

    directory = CellDirectory(directory_engine, cells, cache_ttl_s=settings.cell_cache_ttl_s)
    return CellRouting(directory, engine_of)
