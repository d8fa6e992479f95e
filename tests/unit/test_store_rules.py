"""The store's rules (docs/design.md, "Store and services"), checked on the
source: every statement lives in `reminder_core/store/sql/<table>.sql` under a name that
starts with its table's entity, is run by exactly one function of `store/<table>.py`
named after its verb, and no module outside the store runs SQL."""

from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
STORE = ROOT / "reminder_core" / "store"
SQL = STORE / "sql"
NAME = re.compile(r"^--\s*name:\s*(\w+)\s*$", re.MULTILINE)

#: The entity each table's statements are named after (River's `river_job_*`).
ENTITY = {
    "reminders": "reminder",
    "outbox": "outbox",
    "queue_messages": "queue_message",
    "delivery_log": "delivery",
    "suppressions": "suppression",
    "webhook_events": "webhook_event",
    "worker_heartbeats": "worker_heartbeat",
    "calendar_feeds": "calendar_feed",
    "rate_limits": "rate_limit",
    "live_reminder_bounds": "live_reminder_bound",
    "webhook_endpoints": "webhook_endpoint",
    "cell_assignments": "cell_assignment",
    "cell_loads": "cell_load",
    "cell_moves": "cell_move",
    "transaction": "transaction",
}

#: Product packages: none of them may run SQL except through the store. Alembic's
#: migrations (`migrations/`) and the schema (`reminder_core/db/`) are the schema, not
#: statements; tests and benchmarks may run their own SQL (a benchmark's reference is raw
#: SQL by design).
PACKAGES = (
    "reminder_core",
    "reminder_api",
    "coordinator",
    "outbox_sweeper",
    "sender",
    "webhooks",
    "reminders",
)
OUTSIDE_THE_STORE_ALLOWED = ("reminder_core/store/", "reminder_core/db/")


def statements() -> dict[str, str]:
    """Statement name → table (the .sql file it is in)."""
    found: dict[str, str] = {}
    for path in sorted(SQL.glob("*.sql")):
        for name in NAME.findall(path.read_text(encoding="utf-8")):
            assert name not in found, f"{name} is in {found[name]}.sql and {path.name}"
            found[name] = path.stem
    return found


def store_calls(table: str) -> dict[str, list[str]]:
    """Statement name → the functions of store/<table>.py that call query(name)."""
    tree = ast.parse((STORE / f"{table}.py").read_text(encoding="utf-8"))
    calls: dict[str, list[str]] = {}
    for func in ast.walk(tree):
        if not isinstance(func, ast.FunctionDef):
            continue
        for node in ast.walk(func):
            if (
                isinstance(node, ast.Call)
                and isinstance(node.func, ast.Name)
                and node.func.id == "query"
            ):
                for arg in node.args:
                    for const in ast.walk(arg):
                        if isinstance(const, ast.Constant) and isinstance(const.value, str):
                            calls.setdefault(const.value, []).append(func.name)
    return calls


def test_every_table_file_is_named_for_a_table_and_has_its_module() -> None:
    tables = {p.stem for p in SQL.glob("*.sql")}
    assert tables <= set(ENTITY), tables - set(ENTITY)
    for table in tables:
        assert (STORE / f"{table}.py").is_file(), f"sql/{table}.sql has no store/{table}.py"


@pytest.mark.parametrize("name", sorted(statements()))
def test_each_statement_is_named_entity_verb_and_run_by_its_one_function(name: str) -> None:
    table = statements()[name]
    entity = ENTITY[table]
    assert name.startswith(entity + "_"), f"{name} in {table}.sql must start with {entity}_"
    verb = name.removeprefix(entity + "_")
    callers = store_calls(table).get(name, [])
    assert callers == [verb], (
        f"{name} must be run by exactly one function, store/{table}.py:{verb}(); "
        f"run by {callers or 'nothing (a dead statement: delete it)'}"
    )


PART = re.compile(r"^--\s*part:\s*(\w+)\s*$", re.MULTILINE)
INCLUDE = re.compile(r"^[ \t]*--\s*include:\s*(\w+)\s*$", re.MULTILINE)


def test_each_part_is_named_for_its_table_and_included_by_a_statement() -> None:
    """A part (`-- part: <name>`) is named like its table's statements, and each is
    included somewhere (else it is dead SQL)."""
    sources = {p.stem: p.read_text(encoding="utf-8") for p in sorted(SQL.glob("*.sql"))}
    included = {n for source in sources.values() for n in INCLUDE.findall(source)}
    parts = {n: table for table, source in sources.items() for n in PART.findall(source)}
    assert parts, "no part to check: the within_bound statements include two"
    for name, table in parts.items():
        assert name.startswith(ENTITY[table] + "_"), f"part {name} in {table}.sql"
        assert name not in statements(), f"{name} is a part and a statement"
    assert included == set(parts), (included - set(parts), set(parts) - included)


def test_an_included_part_is_in_the_loaded_statement_and_an_unknown_one_is_refused() -> None:
    from reminder_core.store._statements import _included, query

    statement = query("reminder_take_and_insert_within_bound").text
    assert "-- include:" not in statement
    # rate_limit_take_steps (rate_limits.sql) and reminder_insert_from_bound (reminders.sql)
    assert "INSERT INTO rate_limits" in statement
    assert "INSERT INTO reminders" in statement
    assert "INSERT INTO rate_limits" in query("rate_limit_take").text
    with pytest.raises(RuntimeError, match="includes 'reminder_nothing'"):
        _included("reminder_x", "SELECT 1\n  -- include: reminder_nothing\n", {})


def test_store_modules_run_only_their_own_tables_statements() -> None:
    known = statements()
    for table in ENTITY:
        if not (STORE / f"{table}.py").is_file():
            continue
        for name in store_calls(table):
            assert known.get(name) == table, f"store/{table}.py runs {name} (not in {table}.sql)"


def _runs_sql(tree: ast.AST) -> list[str]:
    """What in a module runs SQL: imports of the statement loader or of sqlalchemy's
    text(), and calls of exec_driver_sql."""
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and node.module:
            names = {a.name for a in node.names}
            if node.module == "reminder_core.store._statements" or (
                node.module == "reminder_core.store" and "_statements" in names
            ):
                found.append(f"line {node.lineno}: imports the statement loader")
            if node.module.startswith("sqlalchemy") and "text" in names:
                found.append(f"line {node.lineno}: imports sqlalchemy.text")
        if (
            isinstance(node, ast.Attribute)
            and node.attr in ("exec_driver_sql", "text")
            and isinstance(node.value, ast.Name)
            and node.value.id in ("sa", "sqlalchemy", "conn", "connection")
        ):
            found.append(f"line {node.lineno}: {node.value.id}.{node.attr}")
    return found


def test_no_module_outside_the_store_runs_sql() -> None:
    offenders = []
    for package in PACKAGES:
        for path in sorted((ROOT / package).rglob("*.py")):
            relative = path.relative_to(ROOT).as_posix()
            if relative.startswith(OUTSIDE_THE_STORE_ALLOWED):
                continue
            for what in _runs_sql(ast.parse(path.read_text(encoding="utf-8"))):
                offenders.append(f"{relative} {what}")
    assert offenders == []


#: The store functions that change a reminder's row: only the reminder services call them,
#: so every transition of the drawn state machine (docs/design.md, "Reminder states") is
#: made by one function of `reminder_core/services/reminders.py`.
REMINDER_WRITES = frozenset(
    {
        "insert",
        "update",
        "cancel",
        "claim_due",
        "rescue_claimed",
        "advance_many",
        "complete_replayed",
        "pause_user_for_suppression",
        "suppress_at_send_many",
        "resume_many_from_suppression",
        "repoint_many_suppression",
        "mark_many_suppression_checked",
    }
)


def _reminder_store_writes(tree: ast.AST) -> list[str]:
    """Uses of a REMINDER_WRITES function of reminder_core.store.reminders in a module."""
    aliases = set()
    direct = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and node.module == "reminder_core.store":
            aliases |= {a.asname or a.name for a in node.names if a.name == "reminders"}
        if isinstance(node, ast.ImportFrom) and node.module == "reminder_core.store.reminders":
            direct |= {a.name for a in node.names if a.name in REMINDER_WRITES}
    found = [f"imports {name}" for name in sorted(direct)]
    for node in ast.walk(tree):
        if (
            isinstance(node, ast.Attribute)
            and node.attr in REMINDER_WRITES
            and isinstance(node.value, ast.Name)
            and node.value.id in aliases
        ):
            found.append(f"line {node.lineno}: {node.value.id}.{node.attr}")
    return found


def test_store_write_functions_exist() -> None:
    tree = ast.parse((STORE / "reminders.py").read_text(encoding="utf-8"))
    defined = {n.name for n in ast.walk(tree) if isinstance(n, ast.FunctionDef)}
    assert defined >= REMINDER_WRITES, REMINDER_WRITES - defined


def test_only_the_reminder_services_change_a_reminder() -> None:
    offenders = []
    for package in PACKAGES:
        for path in sorted((ROOT / package).rglob("*.py")):
            relative = path.relative_to(ROOT).as_posix()
            if relative.startswith(("reminder_core/store/", "reminder_core/services/")):
                continue
            for what in _reminder_store_writes(ast.parse(path.read_text(encoding="utf-8"))):
                offenders.append(f"{relative} {what}")
    assert offenders == []
