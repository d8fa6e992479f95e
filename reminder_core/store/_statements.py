"""The store's named SQL statements, loaded once from `store/sql/<table>.sql` (River's
`dbsqlc/river_job.sql`, procrastinate's queries.sql): private to `reminder_core.store`.

A file holds blocks that start with a line `-- name: <query_name>`; each block is one
statement run with bound parameters (`:now`, `:limit`, ...). Values are never formatted
into SQL text.
"""

from __future__ import annotations

import dataclasses
import json
import re
import uuid
from collections.abc import Callable, Iterable, Mapping
from datetime import datetime
from functools import cache
from importlib import resources
from typing import Any, TypeVar, cast

import orjson
from sqlalchemy import CursorResult, TextClause, column, text
from sqlalchemy.sql.selectable import TextualSelect

T = TypeVar("T")

#: A store statement: its text as loaded, or once its result columns are learned the same
#: text with them declared (`_learn_columns`).
Statement = TextClause | TextualSelect

_NAME = re.compile(r"^--\s*name:\s*(\w+)\s*$", re.MULTILINE)


@cache
def _load() -> dict[str, Statement]:
    queries: dict[str, Statement] = {}
    for entry in sorted(resources.files("reminder_core.store.sql").iterdir(), key=lambda e: e.name):
        if not entry.name.endswith(".sql"):
            continue
        source = entry.read_text(encoding="utf-8")
        parts = _NAME.split(source)
        for name, body in zip(parts[1::2], parts[2::2], strict=True):
            if name in queries:
                raise RuntimeError(f"duplicate query name {name!r} in {entry.name}")
            queries[name] = text(body.strip().rstrip(";"))
    _names.update({id(statement): name for name, statement in queries.items()})
    return queries


#: id of each statement `query` now returns -> its name (`_learn_columns`).
_names: dict[int, str] = {}
#: The result columns declared on a statement, by name (`_learn_columns`).
_declared: dict[str, tuple[str, ...]] = {}


def query(name: str) -> Statement:
    """Return the named statement.

    Raises:
        KeyError: no statement of that name exists in `store/sql/`.
    """
    return _load()[name]


def json_rows(rows: Iterable[Mapping[str, object]]) -> str:
    """Rows for a set-based statement, as one JSON array of objects that the statement
    unpacks with `jsonb_to_recordset` (UUIDs as text, datetimes as ISO 8601).

    One JSON text per statement instead of one array parameter per column: psycopg
    adapts a Python list element by element in Python (a regex per element to decide on
    quoting), which cost a fifth of the sender's CPU time. orjson serialises UUIDs and
    aware datetimes (RFC 3339) natively, at a fraction of `json.dumps` with a `default`
    hook (which was a tenth of the sender's CPU time); text orjson refuses (a lone
    surrogate) goes through `json.dumps`, so both give the same statement errors.
    """
    listed = list(rows)
    try:
        return orjson.dumps(listed).decode()
    except orjson.JSONEncodeError:
        return json.dumps(listed, default=_json_default)


def id_array(ids: Iterable[object]) -> str:
    """A PostgreSQL array literal of UUIDs or integers, for `CAST(:ids AS uuid[])`
    (values whose text needs no quoting; cheaper to bind than a list, see json_rows)."""
    text_ids = []
    for value in ids:
        if not isinstance(value, uuid.UUID | int) or isinstance(value, bool):
            raise TypeError(f"id_array takes UUIDs and integers, not {type(value).__name__}")
        text_ids.append(str(value))
    return "{" + ",".join(text_ids) + "}"


def _json_default(value: object) -> str:
    if isinstance(value, uuid.UUID):
        return str(value)
    if isinstance(value, datetime):
        return value.isoformat()
    raise TypeError(f"cannot serialise {type(value).__name__} for SQL")


def records(cls: type[T], result: CursorResult[Any], /, **convert: Callable[[Any], Any]) -> list[T]:
    """One `cls` (a dataclass) per row of `result`, field by column name: the one row →
    record mapping of the store. `convert` names the fields whose column value is passed
    through a function first (e.g. `status=ReminderStatus`).

    Fields are matched with the columns by the names the database gave this result (its
    row description), never by SQLAlchemy's keys, which a learned statement caches
    (`_learn_columns`): a migration that reorders a table's columns under a running
    process cannot swap two fields' values. Rows are built positionally (the cheapest
    construction of a slotted dataclass): in column order when the statement selects the
    fields in field order, else through an index computed once per result.

    Side effect: the statement's result columns are learned, or learned again when the
    database's differ from those learned (`_learn_columns`).

    Raises:
        RuntimeError: the statement's columns are not exactly the record's fields, or
            `convert` names a field the record does not have (a statement and its record
            drifted apart, e.g. a migration added a column: fix one of them).
    """
    names = [f.name for f in dataclasses.fields(cast(Any, cls))]
    columns = _columns_of(result)
    _learn_columns(result, columns)
    if sorted(columns) != sorted(names) or not set(convert) <= set(names):
        raise RuntimeError(
            f"{cls.__name__} has the fields {names} (converting {sorted(convert)}), "
            f"the statement returns the columns {list(columns)}"
        )
    rows = result.all()
    build = cast(Callable[..., T], cls)
    order = [columns.index(name) for name in names]
    if not convert and order == list(range(len(names))):
        return [build(*row) for row in rows]
    steps = [(i, convert.get(name)) for i, name in zip(order, names, strict=True)]
    return [build(*[row[i] if fn is None else fn(row[i]) for i, fn in steps]) for row in rows]


def _columns_of(result: CursorResult[Any]) -> tuple[str, ...]:
    """The result's column names as the database described them (psycopg's
    `Cursor.pgresult`, libpq's PQfname: a few µs), before any row is fetched; SQLAlchemy's
    keys when the driver's result is gone."""
    pgresult = getattr(result.cursor, "pgresult", None)
    if pgresult is None:
        return tuple(result.keys())
    return tuple(pgresult.fname(i).decode() for i in range(pgresult.nfields))


def _learn_columns(result: CursorResult[Any], columns: tuple[str, ...]) -> None:
    """Declare a store statement's result columns (`TextClause.columns`, in the order
    the database returned them) once it has been read as records, and again whenever the
    database returns other columns than those declared (a migration ran).

    With its columns declared, SQLAlchemy caches the compiled statement's result metadata
    instead of rebuilding it from the cursor description on every execution (its
    `_merge_cols_by_none` path: 50-100 µs of a create's ~750 µs of CPU in the store,
    bench/statement_cost.py). That cached metadata maps columns by position, so `records`
    reads names from the database's row description instead (`_columns_of`).
    """
    statement = result.context.invoked_statement
    name = _names.get(id(statement))
    if name is None or _declared.get(name) == columns:
        return
    current = _load().get(name)
    if current is None or current is not statement:
        return  # an older statement of that name, still running somewhere
    text_clause = current if isinstance(current, TextClause) else current.element
    if not isinstance(text_clause, TextClause):
        return
    declared = text_clause.columns(*(column(c) for c in columns))
    _load()[name] = declared
    _declared[name] = columns
    _names[id(declared)] = name
    _names.pop(id(statement), None)
