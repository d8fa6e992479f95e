"""The store's named SQL statements, loaded once from `store/sql/<table>.sql` (River's
`dbsqlc/river_job.sql`, procrastinate's queries.sql), and `run`, which executes one on a
SQLAlchemy `Connection`: private to `reminder_core.store`.

A file holds blocks that start with a line `-- name: <query_name>`; each block is one
statement run with bound parameters (`:now`, `:limit`, ...). Values are never formatted
into SQL text. A block that starts with `-- part: <part_name>` is not a statement but a
piece of one, named after its table's entity like a statement: a line `-- include:
<part_name>` in any file's statement is replaced by it when the statements load, so a
statement that does another's work in one round trip (a create's rate-limit take, its
insert) says it once.

Why `run` and not `Connection.execute` (docs/design.md, "The statement path"): SQLAlchemy
stays the store's connection, pool and transaction layer and its error types, but a
statement is sent on the connection's own psycopg cursor, with the SQL text SQLAlchemy
compiled for it once, instead of through SQLAlchemy's execution context and result
(60-110 µs of CPU per statement however small, about half of what the API's create
spends on its database path; bench/statement_cost.py).
"""

from __future__ import annotations

import dataclasses
import json
import re
import uuid
from collections import namedtuple
from collections.abc import Callable, Iterable, Iterator, Mapping
from datetime import datetime
from functools import cache
from importlib import resources
from typing import Any, NoReturn, TypeVar, cast

import orjson
from psycopg.pq import ExecStatus
from sqlalchemy import Connection, TextClause, text
from sqlalchemy.exc import (
    InvalidRequestError,
    MultipleResultsFound,
    NoResultFound,
    PendingRollbackError,
)

T = TypeVar("T")

#: A store statement, as loaded.
Statement = TextClause

#: libpq's status of a result that has rows (a SELECT, a RETURNING), however many.
TUPLES_OK = ExecStatus.TUPLES_OK

_BLOCK = re.compile(r"^--\s*(name|part):\s*(\w+)\s*$", re.MULTILINE)
_INCLUDE = re.compile(r"^[ \t]*--\s*include:\s*(\w+)\s*$", re.MULTILINE)


@cache
def _load() -> dict[str, Statement]:
    bodies: dict[str, str] = {}
    pieces: dict[str, str] = {}
    for entry in sorted(resources.files("reminder_core.store.sql").iterdir(), key=lambda e: e.name):
        if not entry.name.endswith(".sql"):
            continue
        blocks = _BLOCK.split(entry.read_text(encoding="utf-8"))
        for kind, name, body in zip(blocks[1::3], blocks[2::3], blocks[3::3], strict=True):
            if name in bodies or name in pieces:
                raise RuntimeError(f"duplicate query or part name {name!r} in {entry.name}")
            (bodies if kind == "name" else pieces)[name] = body.strip().rstrip(";")
    return {name: text(_included(name, body, pieces)) for name, body in bodies.items()}


def _included(name: str, body: str, pieces: Mapping[str, str]) -> str:
    """`body` with each `-- include: <part>` line replaced by that part's text (one level:
    a part includes nothing).

    Raises:
        RuntimeError: statement `name` includes a part that does not exist.
    """

    def piece(match: re.Match[str]) -> str:
        part = match.group(1)
        if part not in pieces:
            raise RuntimeError(f"query {name!r} includes {part!r}, which is no part")
        return pieces[part]

    return _INCLUDE.sub(piece, body)


def query(name: str) -> Statement:
    """Return the named statement.

    Raises:
        KeyError: no statement of that name exists in `store/sql/`.
    """
    return _load()[name]


def json_rows(rows: Iterable[Mapping[str, object]]) -> str:
    """Rows for a set-based statement, as one JSON array of objects that the statement
    unpacks with `json_to_recordset(CAST(:rows AS json))` (UUIDs as text, datetimes as
    ISO 8601). `json`, not `jsonb`: the text is read once as it is, where `jsonb` first
    builds its binary form, ~1.2 us more a row of the completer's flush of 500 (30.9 vs
    32.1 us a row, alternated, 2026-12-07); the rows are read once and never kept.

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
    (cheaper to bind than a list, see json_rows): `{"<uuid>",...}` or `{1,...}`, written
    by orjson (a double-quoted element is an element of an array literal, PostgreSQL
    "Array Value Input"); `str(UUID)` runs in Python, ~1.4 us an id.

    Raises:
        TypeError: a value is neither a UUID nor an int (a bool is refused too).
    """
    listed = list(ids)
    for value in listed:
        kind = type(value)
        if (
            kind is not uuid.UUID
            and kind is not int
            and (not isinstance(value, uuid.UUID | int) or isinstance(value, bool))
        ):
            raise TypeError(f"id_array takes UUIDs and integers, not {kind.__name__}")
    return "{" + orjson.dumps(listed).decode()[1:-1] + "}"


#: A UUID in its text form, any case, hyphens where `str(UUID)` puts them.
_UUID_TEXT = re.compile(r"[0-9a-fA-F]{8}(?:-[0-9a-fA-F]{4}){3}-[0-9a-fA-F]{12}")


def uuid_text_array(values: Iterable[str]) -> str:
    """`id_array` of UUIDs given as text (e.g. receipt handles a statement returned as
    `::text`): `{"<uuid>",...}` for `CAST(:x AS uuid[])`, each checked by a regular
    expression (0.2 us) instead of parsed into a `uuid.UUID` (1 us) and written back.

    Raises:
        ValueError: a value is not a UUID's text form.
    """
    listed = list(values)
    for value in listed:
        if type(value) is not str or _UUID_TEXT.fullmatch(value) is None:
            raise ValueError(f"not a UUID: {value!r}")
    return "{" + orjson.dumps(listed).decode()[1:-1] + "}"


def _json_default(value: object) -> str:
    if isinstance(value, uuid.UUID):
        return str(value)
    if isinstance(value, datetime):
        return value.isoformat()
    raise TypeError(f"cannot serialise {type(value).__name__} for SQL")


# --- Running a statement ---------------------------------------------------------------------

#: The SQL text of each statement compiled for the psycopg dialect (pyformat
#: placeholders, `%` escaped), by the statement's identity, beside the statement itself
#: (held, so that its id cannot be reused): compiled once per process.
_compiled: dict[int, tuple[Statement, str]] = {}
#: A row constructor (a named tuple's `_make`) per result shape (column names, in the
#: database's order).
_row_classes: dict[tuple[str, ...], Callable[[Iterable[Any]], tuple[Any, ...]]] = {}


class Rows:
    """The whole result of one statement run by `run`: its rows (fetched at once, as
    psycopg returned them), the column names the database described, and the row count.
    The subset of SQLAlchemy's `Result` the store uses, with its errors: a row reads by
    position or by column name (`row.status`)."""

    __slots__ = ("_tuples", "columns", "rowcount")

    def __init__(self, columns: tuple[str, ...], tuples: list[tuple[Any, ...]], rowcount: int):
        self.columns = columns
        self.rowcount = rowcount
        self._tuples = tuples

    def _named(self, row: tuple[Any, ...]) -> Any:
        make = _row_classes.get(self.columns)
        if make is None:
            make = namedtuple("Row", self.columns, rename=True)._make  # type: ignore[attr-defined]
            _row_classes[self.columns] = make
        return make(row)

    def __iter__(self) -> Iterator[Any]:
        return (self._named(row) for row in self._tuples)

    def all(self) -> list[Any]:
        return [self._named(row) for row in self._tuples]

    def first(self) -> Any | None:
        """The first row, None when there is none."""
        return self._named(self._tuples[0]) if self._tuples else None

    def one_or_none(self) -> Any | None:
        """The only row, None when there is none.

        Raises:
            MultipleResultsFound: more than one row.
        """
        if len(self._tuples) > 1:
            raise MultipleResultsFound("Multiple rows were found when one or none was required")
        return self.first()

    def one(self) -> Any:
        """The only row.

        Raises:
            NoResultFound: no row. MultipleResultsFound: more than one.
        """
        found = self.one_or_none()
        if found is None:
            raise NoResultFound("No row was found when one was required")
        return found

    def split_first(self) -> tuple[list[Any], Rows]:
        """The first column of every row, and the rows without it (a statement that
        returns a value before a table's columns: `reminder_insert_within_bound`)."""
        rest = Rows(self.columns[1:], [row[1:] for row in self._tuples], self.rowcount)
        return [row[0] for row in self._tuples], rest

    def scalars(self) -> list[Any]:
        """The first column of every row."""
        return [row[0] for row in self._tuples]

    def scalar(self) -> Any | None:
        """The first column of the first row, None when there is no row."""
        return self._tuples[0][0] if self._tuples else None

    def scalar_one_or_none(self) -> Any | None:
        """The first column of the only row, None when there is none.

        Raises:
            MultipleResultsFound: more than one row.
        """
        if len(self._tuples) > 1:
            raise MultipleResultsFound("Multiple rows were found when one or none was required")
        return self.scalar()

    def scalar_one(self) -> Any:
        """The first column of the only row.

        Raises:
            NoResultFound: no row. MultipleResultsFound: more than one.
        """
        if len(self._tuples) != 1:
            self.one()  # raises the right one
        return self._tuples[0][0]


def run(
    conn: Connection,
    statement: Statement,
    params: Mapping[str, Any] | None = None,
    *,
    autocommit: bool = False,
) -> Rows:
    """Run one store statement (from `query`) with `params` on `conn`, in `conn`'s
    transaction, and return its whole result; with `autocommit`, as a transaction of its
    own instead, committed by the database as it runs.

    As `conn.execute(statement, params)` would, for every statement of the store (text,
    untyped binds, no streaming): the transaction begins when none has (autobegin; a
    later `conn.commit()` commits it), an inactive one is refused, the engine's
    `before_cursor_execute` and `after_cursor_execute` listeners are called (with no
    execution context: `context` is None), and a driver error is raised as SQLAlchemy
    raises it (`IntegrityError`, `OperationalError`, ...: `DBAPIError` wrapping the
    psycopg error), through the connection's own handler, which also invalidates the
    connection, and the pool's older connections, on a disconnect. What differs: the
    statement runs on the pooled psycopg connection's cursor with the SQL text SQLAlchemy
    compiled for it once (`_sql`), its rows are fetched at once and read by `Rows`
    (values exactly as psycopg's adapters give them, as before: no SQLAlchemy result
    processors ran on untyped text columns), and `echo` does not log it.

    `autocommit` switches psycopg's `autocommit` on for this one statement and back off
    after it (a few µs; through SQLAlchemy's `isolation_level` execution option and back,
    ~30 µs each way), begins no SQLAlchemy transaction, and leaves `conn` as it found it:
    outside a transaction, in its isolation level, for the caller's next transaction.

    Args:
        conn: an open SQLAlchemy Connection (psycopg 3 dialect).
        statement: a statement `query` returned.
        params: the bound parameters by name (`:now` -> {"now": ...}).
        autocommit: run as its own transaction; `conn` must not be in one.

    Raises:
        sqlalchemy.exc.DBAPIError: (a subclass) the database refused or lost it.
        sqlalchemy.exc.PendingRollbackError: `conn`'s transaction failed earlier.
        sqlalchemy.exc.InvalidRequestError: `autocommit` on a connection in a transaction.
    """
    fairy = conn.connection  # raises as SQLAlchemy does for a closed or invalid connection
    driver = cast(Any, fairy.driver_connection)
    switched = False
    if autocommit:
        if conn.in_transaction():
            raise InvalidRequestError(
                "an autocommit statement needs a connection outside a transaction"
            )
        if not driver.autocommit:
            driver.autocommit = switched = True
    else:
        trans = conn.get_transaction()
        if trans is None:
            conn.begin()
        elif not trans.is_active:
            raise PendingRollbackError(
                "This connection is on an inactive transaction. Please rollback() fully"
                " before proceeding"
            )
    known = _compiled.get(id(statement))
    sql = known[1] if known is not None and known[0] is statement else _sql(conn, statement)
    values: Mapping[str, Any] = params if params is not None else {}
    try:
        return _execute(conn, driver, sql, values)
    finally:
        if switched and not driver.closed:
            driver.autocommit = False


def _execute(conn: Connection, driver: Any, sql: str, values: Mapping[str, Any]) -> Rows:
    """Send `sql` with `values` on `driver` (the psycopg connection under `conn`): the
    cursor listeners, the execute, the rows (`run`)."""
    cursor = driver.cursor()
    try:
        dispatch = conn.dispatch
        for hook in dispatch.before_cursor_execute:
            sql, values = hook(conn, cursor, sql, values, None, False)
        cursor.execute(sql, values)
        for after in dispatch.after_cursor_execute:
            after(conn, cursor, sql, values, None, False)
        pgresult = cursor.pgresult
        if pgresult is None or pgresult.status != TUPLES_OK:  # not `description`: it
            rows = Rows((), [], cursor.rowcount)  # builds a Column per column (~20 µs)
        else:
            columns = tuple(pgresult.fname(i).decode() for i in range(pgresult.nfields))
            rows = Rows(columns, cursor.fetchall(), cursor.rowcount)
    except BaseException as e:
        _raise(conn, e, sql, values, cursor)
    cursor.close()
    return rows


def _sql(conn: Connection, statement: Statement) -> str:
    """`statement`'s SQL text for `conn`'s dialect (psycopg's pyformat placeholders),
    compiled by SQLAlchemy once and cached."""
    dialect = conn.dialect
    if dialect.driver != "psycopg" or dialect.positional:
        raise RuntimeError(f"the store runs on psycopg 3, not {dialect.name}+{dialect.driver}")
    compiled = statement.compile(dialect=dialect).string
    _compiled[id(statement)] = (statement, compiled)
    return compiled


def _raise(
    conn: Connection, e: BaseException, sql: str, values: Mapping[str, Any], cursor: Any
) -> NoReturn:
    """Raise `e` as `Connection.execute` would: through the connection's handler of
    driver errors (SQLAlchemy's `Connection._handle_dbapi_exception`: wraps a DBAPI error
    in its `DBAPIError` subclass, calls `handle_error` listeners, and on a disconnect
    invalidates this connection and the pool's older ones). A private method of
    SQLAlchemy's, used so that the store's errors stay exactly SQLAlchemy's
    (tests/integration/test_store_statements.py pins what the store relies on)."""
    handler = cast(Callable[..., NoReturn], conn._handle_dbapi_exception)
    handler(e, sql, values, cursor, None)


def records(cls: type[T], result: Rows, /, **convert: Callable[[Any], Any]) -> list[T]:
    """One `cls` (a dataclass) per row of `result`, field by column name: the one row →
    record mapping of the store. `convert` names the fields whose column value is passed
    through a function first (e.g. `status=ReminderStatus`).

    Fields are matched with the columns by the names the database gave this result (its
    row description), so a migration that reorders a table's columns under a running
    process cannot swap two fields' values. Rows are built positionally (the cheapest
    construction of a slotted dataclass): in column order when the statement selects the
    fields in field order, else through an index computed once per result.

    Raises:
        RuntimeError: the statement's columns are not exactly the record's fields, or
            `convert` names a field the record does not have (a statement and its record
            drifted apart, e.g. a migration added a column: fix one of them).
    """
    names = [f.name for f in dataclasses.fields(cast(Any, cls))]
    columns = result.columns
    if sorted(columns) != sorted(names) or not set(convert) <= set(names):
        raise RuntimeError(
            f"{cls.__name__} has the fields {names} (converting {sorted(convert)}), "
            f"the statement returns the columns {list(columns)}"
        )
    rows = result._tuples
    build = cast(Callable[..., T], cls)
    order = [columns.index(name) for name in names]
    if not convert and order == list(range(len(names))):
        return [build(*row) for row in rows]
    make = _row_builder(cls, tuple(order), tuple(convert.get(name) for name in names))
    return [make(row) for row in rows]


#: At most this many row builders are kept (the cache is emptied when full).
ROW_BUILDERS_KEPT = 256
#: Row builders made by `_row_builder`, by (record class, column index of each field,
#: converter of each field or None): one per statement shape, made once per process.
_ROW_BUILDERS: dict[tuple[type, tuple[int, ...], tuple[Any, ...]], Callable[[Any], Any]] = {}


def _row_builder(
    cls: type, order: tuple[int, ...], converters: tuple[Callable[[Any], Any] | None, ...]
) -> Callable[[Any], Any]:
    """A function of one row (a tuple) to one `cls`: field k is `row[order[k]]`, passed
    through `converters[k]` when it is not None. Written as one expression and compiled
    once (as `dataclasses` writes `__init__`), so that a row costs one call and no loop
    over its fields in Python: 23 fields of `ReminderForSend` took 2.5 us a row through
    a list per row, 0.9 us so. Only integers and names made here enter the source."""
    key = (cls, order, converters)
    found = _ROW_BUILDERS.get(key)
    if found is None:
        scope: dict[str, Any] = {"build": cls}
        args = []
        for k, (i, fn) in enumerate(zip(order, converters, strict=True)):
            if fn is None:
                args.append(f"row[{i}]")
            else:
                scope[f"convert_{k}"] = fn
                args.append(f"convert_{k}(row[{i}])")
        found = eval(f"lambda row: build({', '.join(args)})", scope)
        if len(_ROW_BUILDERS) >= ROW_BUILDERS_KEPT:  # converters made per call: no growth
            _ROW_BUILDERS.clear()
        _ROW_BUILDERS[key] = found
    return found
