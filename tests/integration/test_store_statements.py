"""The store's statements (reminder_core/store/_statements.py) against the real database:
`run`, which sends a store statement on the pooled psycopg connection instead of through
SQLAlchemy's execution (issue 15), gives the values, transactions, listeners and errors
that `Connection.execute` gives for the same statement (SQLAlchemy's own path is the
expected value in each test); and what a migration under a running process does to a
statement's records: a column added is refused loudly and the statement works again once
it is gone; columns reordered (a column recreated, as a type change does) map to the
right fields, never swapped (found by an adversarial trial of an earlier version that
mapped by position)."""

from __future__ import annotations

import uuid
from datetime import UTC, datetime

import pytest
from sqlalchemy import Connection, Engine, event, text
from sqlalchemy.exc import (
    IntegrityError,
    InternalError,
    InvalidRequestError,
    MultipleResultsFound,
    NoResultFound,
    OperationalError,
    PendingRollbackError,
)

from reminder_core.db.session import make_engine
from reminder_core.store import reminders
from reminder_core.store._statements import Rows, id_array, query, run, uuid_text_array


def table_columns(db: Engine, table: str) -> list[str]:
    """The table's columns in the database's order (information_schema, not our code)."""
    with db.connect() as conn:
        return table_columns_in(conn, table)


def table_columns_in(conn: Connection, table: str) -> list[str]:
    return list(
        conn.execute(
            text("SELECT column_name FROM information_schema.columns"
                 " WHERE table_name = :t ORDER BY ordinal_position"),
            {"t": table},
        ).scalars()
    )  # fmt: skip


def insert_one(db: Engine) -> uuid.UUID:
    with db.begin() as conn:
        return uuid.UUID(
            str(
                conn.execute(
                    text("INSERT INTO reminders (user_id, title, start_local, timezone,"
                         " next_run_utc) VALUES ('u1', 't', '2031-03-30 09:00',"
                         " 'Europe/Paris', :due) RETURNING id"),
                    {"due": datetime(2031, 3, 30, 7, tzinfo=UTC)},
                ).scalar_one()
            )
        )  # fmt: skip


def test_a_column_added_by_a_migration_fails_loudly_until_it_is_gone(db: Engine) -> None:
    reminder_id = insert_one(db)
    with db.connect() as conn:
        assert reminders.get(conn, user_id="u1", reminder_id=reminder_id) is not None
        conn.execute(text("ALTER TABLE reminders ADD COLUMN added_by_a_migration int"))
        with pytest.raises(RuntimeError, match="added_by_a_migration"):
            reminders.get(conn, user_id="u1", reminder_id=reminder_id)
        conn.execute(text("ALTER TABLE reminders DROP COLUMN added_by_a_migration"))
        again = reminders.get(conn, user_id="u1", reminder_id=reminder_id)  # no restart
        assert again is not None
        assert again.id == reminder_id
        conn.rollback()


def test_columns_reordered_by_a_migration_still_map_to_their_fields(db: Engine) -> None:
    reminder_id = insert_one(db)
    with db.begin() as conn:
        conn.execute(text("UPDATE reminders SET body = 'the body', snoozed_from = id"))
    with db.connect() as conn:
        for _ in range(6):  # psycopg prepares a statement from its fifth run on
            before = reminders.get(conn, user_id="u1", reminder_id=reminder_id)
        assert before is not None
        # Recreate `title` and `snoozed_from` at the end of the table: every column after
        # them moves, and the count stays the same.
        conn.execute(text(
            "ALTER TABLE reminders ADD COLUMN title_new text, ADD COLUMN sf_new uuid;"
            " UPDATE reminders SET title_new = title, sf_new = snoozed_from;"
            " ALTER TABLE reminders DROP COLUMN title, DROP COLUMN snoozed_from;"
            " ALTER TABLE reminders RENAME COLUMN title_new TO title;"
            " ALTER TABLE reminders RENAME COLUMN sf_new TO snoozed_from"
        ))  # fmt: skip
        assert table_columns_in(conn, "reminders")[-2:] == ["title", "snoozed_from"]
        for _ in range(3):
            after = reminders.get(conn, user_id="u1", reminder_id=reminder_id)
            assert after == before  # title 't', body 'the body', snoozed_from its own id
        assert after is not None
        assert (after.title, after.body, after.snoozed_from) == ("t", "the body", reminder_id)
        assert after.webhook_endpoint_id is None
        conn.rollback()


# --- `run` against SQLAlchemy's own path (the expected values) -------------------------------


def both(conn: Connection, name: str, params: dict[str, object]) -> tuple[list[tuple], Rows]:  # type: ignore[type-arg]
    """The named statement's rows through SQLAlchemy's `Connection.execute`, then the
    same through `run`, on one connection."""
    through_sqlalchemy = [tuple(r) for r in conn.execute(query(name), params).all()]
    return through_sqlalchemy, run(conn, query(name), params)


def test_run_reads_every_column_of_a_reminder_as_sqlalchemy_does(db: Engine) -> None:
    # Every type the store reads from `reminders`: uuid, text, timestamptz, timestamp,
    # timestamp[] (exdates), jsonb (count_progress), booleans, integers, NULLs.
    reminder_id = insert_one(db)
    with db.begin() as conn:
        conn.execute(
            text("UPDATE reminders SET exdates = ARRAY[TIMESTAMP '2031-04-06 09:00'],"
                 " body = '100% café', snoozed_from = id, count_progress ="
                 " CAST('{\"local\": \"2031-04-06T09:00\", \"counted\": 2}' AS jsonb)"),
        )  # fmt: skip
    with db.connect() as conn:
        expected, got = both(conn, "reminder_get", {"user_id": "u1", "id": reminder_id})
        assert got.columns == tuple(table_columns(db, "reminders"))
        assert [tuple(r) for r in got] == expected
        assert [type(v) for v in got.one()] == [type(v) for v in expected[0]]
        row = got.one()
        assert (row.id, row.body, row.exdates) == (
            reminder_id,
            "100% café",
            [datetime(2031, 4, 6, 9)],
        )
        assert row.next_run_utc == datetime(2031, 3, 30, 7, tzinfo=UTC)  # aware, as stored
        assert got.rowcount == 1


def test_run_escapes_percent_and_binds_as_sqlalchemy_does(db: Engine) -> None:
    statement = text("SELECT '100%' AS literal, CAST(:x AS int) + 1 AS x, :t AS t")
    with db.connect() as conn:
        expected = conn.execute(statement, {"x": 41, "t": "a%(x)s"}).one()
        got = run(conn, statement, {"x": 41, "t": "a%(x)s"})
    assert tuple(got.one()) == tuple(expected) == ("100%", 42, "a%(x)s")


def test_the_result_methods_raise_as_sqlalchemy_does(db: Engine) -> None:
    many = text("SELECT g AS n FROM generate_series(1, :n) AS g")
    with db.connect() as conn:
        for n, method in [(0, "one"), (2, "one"), (2, "one_or_none"), (0, "scalar_one"),
                          (2, "scalar_one"), (2, "scalar_one_or_none")]:  # fmt: skip
            with pytest.raises((NoResultFound, MultipleResultsFound)) as expected:
                getattr(conn.execute(many, {"n": n}), method)()
            with pytest.raises(type(expected.value)):
                getattr(run(conn, many, {"n": n}), method)()
        for n, method in [(0, "first"), (0, "one_or_none"), (0, "scalar"), (3, "scalar"),
                          (0, "scalar_one_or_none"), (1, "scalar_one"),
                          (3, "scalars")]:  # fmt: skip
            want = getattr(conn.execute(many, {"n": n}), method)()
            got = getattr(run(conn, many, {"n": n}), method)()
            assert (list(got) if method == "scalars" else got) == (
                list(want) if method == "scalars" else want
            )


def test_run_begins_the_transaction_the_connection_commits_or_rolls_back(db: Engine) -> None:
    reminder_id = insert_one(db)
    cancel = {"user_id": "u1", "id": reminder_id, "now": datetime(2031, 1, 1, tzinfo=UTC)}
    with db.connect() as conn:
        assert not conn.in_transaction()
        run(conn, text("UPDATE reminders SET title = 'rolled back' WHERE id = :id"), cancel)
        assert conn.in_transaction()  # autobegun, as conn.execute does
        conn.rollback()
        run(conn, text("UPDATE reminders SET title = 'committed' WHERE id = :id"), cancel)
        conn.commit()
        run(conn, text("UPDATE reminders SET title = 'closed without commit' WHERE id = :id"),
            cancel)  # fmt: skip
    with db.connect() as conn:
        titles = conn.execute(text("SELECT title FROM reminders WHERE id = :id"), cancel)
        assert titles.scalar_one() == "committed"
    with db.connect() as conn:
        auto = conn.execution_options(isolation_level="AUTOCOMMIT")
        run(auto, text("UPDATE reminders SET title = 'autocommit' WHERE id = :id"), cancel)
        auto.rollback()  # nothing to undo: it committed as it ran
    with db.connect() as conn:
        titles = conn.execute(text("SELECT title FROM reminders WHERE id = :id"), cancel)
        assert titles.scalar_one() == "autocommit"


def test_a_refused_statement_raises_sqlalchemys_error_and_fails_the_transaction(
    db: Engine,
) -> None:
    duplicate = text("INSERT INTO rate_limits (user_id, tat) VALUES ('dup', now())")
    errors: list[type[BaseException]] = []
    for execute in (lambda c, s: c.execute(s), run):
        with db.connect() as conn:
            execute(conn, duplicate)
            with pytest.raises(IntegrityError) as refused:
                execute(conn, duplicate)
            errors.append(type(refused.value.orig))
            assert "rate_limits" in str(refused.value.statement)
            with pytest.raises(InternalError, match="current transaction is aborted"):
                execute(conn, text("SELECT 1"))
            conn.rollback()
            assert list(execute(conn, text("SELECT 1 AS one")).scalars()) == [1]
    assert errors[0] is errors[1]  # psycopg's UniqueViolation under both


def test_a_connection_lost_under_run_is_invalidated_and_replaced(db: Engine) -> None:
    engine = make_engine(db.url.render_as_string(hide_password=False), pool_size=1)
    try:
        with engine.connect() as conn:
            pid = run(conn, text("SELECT pg_backend_pid() AS pid")).scalar_one()
            with db.connect() as other:
                other.execute(text("SELECT pg_terminate_backend(:p, 5000)"), {"p": pid})
            with pytest.raises(OperationalError) as lost:
                run(conn, text("SELECT 1 AS one"))
            assert lost.value.connection_invalidated
            assert conn.invalidated
            with pytest.raises(PendingRollbackError):  # as SQLAlchemy refuses it
                run(conn, text("SELECT 1 AS one"))
            conn.rollback()
            again = run(conn, text("SELECT pg_backend_pid() AS pid")).scalar_one()
            assert again != pid  # a new connection, on the same Connection
    finally:
        engine.dispose()


def test_run_calls_the_engines_cursor_listeners(db: Engine) -> None:
    seen: list[tuple[str, str]] = []

    def before(*args: object) -> None:  # conn, cursor, statement, parameters, context, many
        assert args[4] is None  # no execution context under `run`
        seen.append(("before", str(args[2])))

    def after(*args: object) -> None:
        seen.append(("after", str(args[2])))

    event.listen(db, "before_cursor_execute", before)
    event.listen(db, "after_cursor_execute", after)
    try:
        with db.connect() as conn:
            run(conn, text("SELECT CAST(:x AS int) AS x"), {"x": 1})
    finally:
        event.remove(db, "before_cursor_execute", before)
        event.remove(db, "after_cursor_execute", after)
    assert seen == [("before", "SELECT CAST(%(x)s AS int) AS x"),
                    ("after", "SELECT CAST(%(x)s AS int) AS x")]  # fmt: skip


def title_of(db: Engine, reminder_id: uuid.UUID) -> str:
    with db.connect() as other:
        found = other.execute(
            text("SELECT title FROM reminders WHERE id = :id"), {"id": reminder_id}
        )
        return str(found.scalar_one())


def test_an_autocommit_statement_commits_as_it_runs_and_leaves_the_connection_as_it_was(
    db: Engine,
) -> None:
    reminder_id = insert_one(db)
    rename = text("UPDATE reminders SET title = :title WHERE id = :id")
    with db.connect() as conn:
        run(conn, rename, {"title": "autocommitted", "id": reminder_id}, autocommit=True)
        assert title_of(db, reminder_id) == "autocommitted"  # seen while conn is open
        assert not conn.in_transaction()
        assert conn.connection.driver_connection.autocommit is False  # type: ignore[union-attr]
        run(conn, rename, {"title": "in a transaction", "id": reminder_id})
        assert conn.in_transaction()
        conn.rollback()  # the next statement was in a transaction again: undone
    assert title_of(db, reminder_id) == "autocommitted"


def test_an_autocommit_statement_is_refused_inside_a_transaction(db: Engine) -> None:
    reminder_id = insert_one(db)
    rename = text("UPDATE reminders SET title = :title WHERE id = :id")
    with db.connect() as conn:
        run(conn, rename, {"title": "in a transaction", "id": reminder_id})
        with pytest.raises(InvalidRequestError, match="outside a transaction"):
            run(conn, rename, {"title": "autocommit", "id": reminder_id}, autocommit=True)
        conn.rollback()
    assert title_of(db, reminder_id) == "t"


def test_a_refused_autocommit_statement_leaves_the_connection_usable(db: Engine) -> None:
    duplicate = text("INSERT INTO rate_limits (user_id, tat) VALUES ('dup', now())")
    with db.connect() as conn:
        run(conn, duplicate, autocommit=True)
        with pytest.raises(IntegrityError):
            run(conn, duplicate, autocommit=True)
        assert not conn.in_transaction()
        assert conn.connection.driver_connection.autocommit is False  # type: ignore[union-attr]
        assert run(conn, text("SELECT count(*) AS n FROM rate_limits")).scalar_one() == 1


@pytest.mark.parametrize("kind", ["uuid", "bigint"])
def test_id_array_is_an_array_literal_postgresql_reads_back(db: Engine, kind: str) -> None:
    # PostgreSQL "Array Value Input": elements may be double-quoted; the cast parses each.
    values: list[object] = (
        [uuid.uuid4() for _ in range(3)] + [uuid.UUID(int=0)]
        if kind == "uuid"
        else [0, 1, -5, 2**62]
    )
    with db.connect() as conn:
        back = conn.execute(
            text(f"SELECT CAST(:ids AS {kind}[])"), {"ids": id_array(values)}
        ).scalar_one()
        empty = conn.execute(text(f"SELECT CAST(:ids AS {kind}[])"), {"ids": id_array([])})
        assert empty.scalar_one() == []
    assert back == values


@pytest.mark.parametrize("bad", [True, "1", 1.0, None])
def test_id_array_refuses_what_is_no_uuid_or_int(bad: object) -> None:
    with pytest.raises(TypeError, match="id_array takes UUIDs and integers"):
        id_array([uuid.uuid4(), bad])


def test_uuid_text_array_is_read_back_as_the_uuids_it_names(db: Engine) -> None:
    # RFC 9562 §4: the text form is hexadecimal digits in 8-4-4-4-12 groups, either case.
    values = [uuid.uuid4() for _ in range(3)] + [uuid.UUID(int=0)]
    texts = [str(values[0]), str(values[1]).upper(), str(values[2]), str(values[3])]
    with db.connect() as conn:
        back = conn.execute(
            text("SELECT CAST(:ids AS uuid[])"), {"ids": uuid_text_array(texts)}
        ).scalar_one()
    assert back == values


@pytest.mark.parametrize(
    "bad",
    [
        "",
        "0192a4b5-6c7d-7e8f-9a0b-1c2d3e4f5a6",  # a digit short
        "0192a4b5-6c7d-7e8f-9a0b-1c2d3e4f5a6bb",  # a digit more
        "0192a4b56c7d7e8f9a0b1c2d3e4f5a6b",  # no hyphens: PostgreSQL reads it, we do not
        '0192a4b5-6c7d-7e8f-9a0b-1c2d3e4f5a6"',  # a quote: would end the element
        "{0192a4b5-6c7d-7e8f-9a0b-1c2d3e4f5a6b}",
        uuid.UUID(int=1),  # an object, not its text
    ],
)
def test_uuid_text_array_refuses_what_is_no_uuid_text(bad: object) -> None:
    with pytest.raises(ValueError, match="not a UUID"):
        uuid_text_array([str(uuid.uuid4()), bad])  # type: ignore[list-item]
