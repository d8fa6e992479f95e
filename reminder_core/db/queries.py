"""Named hot-path SQL, loaded once from `db/sql/*.sql` (procrastinate's queries.sql style).

A file holds blocks that start with a line `-- name: <query_name>`; each block is one
statement run with bound parameters (`:now`, `:limit`, ...). Values are never formatted
into SQL text.
"""

from __future__ import annotations

import re
from functools import cache
from importlib import resources

from sqlalchemy import TextClause, text

_NAME = re.compile(r"^--\s*name:\s*(\w+)\s*$", re.MULTILINE)


@cache
def _load() -> dict[str, TextClause]:
    queries: dict[str, TextClause] = {}
    for entry in sorted(resources.files("reminder_core.db.sql").iterdir(), key=lambda e: e.name):
        if not entry.name.endswith(".sql"):
            continue
        source = entry.read_text(encoding="utf-8")
        parts = _NAME.split(source)
        for name, body in zip(parts[1::2], parts[2::2], strict=True):
            if name in queries:
                raise RuntimeError(f"duplicate query name {name!r} in {entry.name}")
            queries[name] = text(body.strip().rstrip(";"))
    return queries


def query(name: str) -> TextClause:
    """Return the named statement.

    Raises:
        KeyError: no statement of that name exists in `db/sql/`.
    """
    return _load()[name]
