"""The cell directory (issue 18; docs/design.md, "Cells") against the real database:
stable assignments, least loaded by weight, concurrent first requests agreeing, a cell
added moving nobody, and CELLS / CELL read as documented (docs/configuration.md).

Expected values from the rule itself (reminder_core.cell_directory.pick_cell, as
documented): a new user goes to the accepting cell with the lowest (users + 1) / weight,
the first in CELLS order on a tie.
"""

from __future__ import annotations

import json
from collections import Counter
from concurrent.futures import ThreadPoolExecutor

import pytest
from sqlalchemy import Engine, text

from reminder_core.cell_directory import CellDirectory, pick_cell
from reminder_core.cells import Cell, cell_settings, cells_of, process_settings
from reminder_core.errors import ConfigurationError
from reminder_core.settings import Settings

A, B, C = (Cell(n, f"postgresql+psycopg://h/{n}", "postgres://reminders") for n in "abc")


def directory(db: Engine, *cells: Cell) -> CellDirectory:
    return CellDirectory(db, cells, cache_ttl_s=60)


def test_assignment_is_recorded_once_and_read_back(db: Engine) -> None:
    first = directory(db, A, B, C)
    assert [first.cell_of(u).name for u in ("u1", "u2", "u3", "u4")] == ["a", "b", "c", "a"]
    # Another process (its own cache) reads the same cells; nobody is assigned twice.
    other = directory(db, A, B, C)
    assert [other.cell_of(u).name for u in ("u4", "u3", "u2", "u1")] == ["a", "c", "b", "a"]
    with db.connect() as conn:
        loads = dict(conn.execute(text("SELECT cell, users FROM cell_loads")).all())
        assigned = conn.execute(text("SELECT count(*) FROM cell_assignments")).scalar_one()
    assert (loads, assigned) == ({"a": 2, "b": 1, "c": 1}, 4)
    assert other.cell_of("nobody", assign=False) is None


def test_weights_share_new_users() -> None:
    heavy = Cell("b", "postgresql+psycopg://h/b", "postgres://reminders", weight=3)
    loads: Counter[str] = Counter()
    for _ in range(400):
        loads[pick_cell((A, heavy), loads).name] += 1
    assert loads == {"a": 100, "b": 300}  # 1 : 3, as the weights


def test_a_closed_cell_gets_no_new_user() -> None:
    closed = Cell("a", "postgresql+psycopg://h/a", "postgres://reminders", accepts_new_users=False)
    assert pick_cell((closed, B), {"b": 1000}).name == "b"
    with pytest.raises(ConfigurationError, match="no cell accepts new users"):
        pick_cell((closed,), {})


def test_adding_a_cell_moves_nobody(db: Engine) -> None:
    three = directory(db, A, B, C)
    before = {f"u{i}": three.cell_of(f"u{i}").name for i in range(90)}
    assert Counter(before.values()) == {"a": 30, "b": 30, "c": 30}
    d = Cell("d", "postgresql+psycopg://h/d", "postgres://reminders")
    four = directory(db, A, B, C, d)
    assert {u: four.cell_of(u).name for u in before} == before
    # New users fill the new, empty cell first (the least loaded).
    assert [four.cell_of(f"new{i}").name for i in range(30)] == ["d"] * 30
    assert four.cell_of("new30").name == "a"


def test_concurrent_first_requests_of_one_user_agree(db: Engine) -> None:
    def lookup(_: int) -> str:
        return directory(db, A, B, C).cell_of("racer").name  # a cache per "process"

    with ThreadPoolExecutor(8) as pool:
        seen = set(pool.map(lookup, range(16)))
    assert len(seen) == 1
    with db.connect() as conn:
        assert conn.execute(text("SELECT sum(users) FROM cell_loads")).scalar_one() == 1


def test_cells_configuration(monkeypatch: pytest.MonkeyPatch) -> None:
    one = Settings(jwt_secret="x" * 40, database_url="postgresql+psycopg://h/one")
    assert [c.name for c in cells_of(one)] == ["default"]
    assert cell_settings(one) is one  # nothing changes for one cell
    with pytest.raises(ConfigurationError, match="CELLS is not set"):
        cell_settings(one.model_copy(update={"cell": "a"}))

    monkeypatch.setenv(
        "CELLS",
        json.dumps([
            {"name": "a", "database_url": "postgresql+psycopg://h/a"},
            {"name": "b", "database_url": "postgresql+psycopg://h/b", "queue_url": "sqs://q-b"},
        ]),
    )  # fmt: skip
    several = Settings(jwt_secret="x" * 40)
    with pytest.raises(ConfigurationError, match="--cell NAME"):
        process_settings(several, worker=True)
    b = process_settings(several.model_copy(update={"cell": "b"}), worker=True)
    assert (b.database_url, b.queue_url) == ("postgresql+psycopg://h/b", "sqs://q-b")
    api = process_settings(several, worker=False)  # the API: the first cell's
    assert (api.database_url, api.queue_url) == ("postgresql+psycopg://h/a", "postgres://reminders")
    with pytest.raises(ConfigurationError, match="no such cell"):
        cell_settings(several.model_copy(update={"cell": "z"}))


@pytest.mark.parametrize(
    ("cells", "error"),
    [
        ('[{"name": "A", "database_url": "postgresql://h/a"}]', "pattern"),
        ('[{"name": "a", "database_url": "postgresql://h/a", "colour": 1}]', "Extra inputs"),
        ('[{"name": "a", "database_url": "postgresql://h/a", "weight": 0}]', "greater than 0"),
        ("not json", "JSON"),
    ],
)
def test_bad_cells_are_refused_naming_the_field(
    monkeypatch: pytest.MonkeyPatch, cells: str, error: str
) -> None:
    monkeypatch.setenv("CELLS", cells)
    with pytest.raises(ValueError, match=error):
        Settings(jwt_secret="x" * 40)


def test_duplicate_cells_are_refused(monkeypatch: pytest.MonkeyPatch) -> None:
    twice = [{"name": "a", "database_url": "postgresql://h/a"}] * 2
    monkeypatch.setenv("CELLS", json.dumps(twice))
    with pytest.raises(ConfigurationError, match="same name"):
        cells_of(Settings(jwt_secret="x" * 40))
