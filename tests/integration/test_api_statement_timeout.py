"""API_STATEMENT_TIMEOUT_S against the real database (adversarial trial, 2026-12-06: with
`reminders` locked ACCESS EXCLUSIVE for 15 s, the requests in flight were held 15 s, and
a client that gave up after 1 s still got its reminder created).

Each test holds a real lock in another transaction. With the bound, PostgreSQL cancels
the waiting statement (`statement_timeout`, SQLSTATE 57014, lock waits included: the
PostgreSQL manual, "Client Connection Defaults") and the request is answered 503
problem+json with Retry-After (RFC 9110 §15.6.4, §10.2.3) with nothing written. The lock is
released by a timer after LOCK_HELD_S whatever happens, so that without the bound a test
fails (its request succeeds late) instead of hanging."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from contextlib import contextmanager

import pytest
from fastapi.testclient import TestClient
from sqlalchemy import Engine, event, text

from reminder_core.db.session import make_engine
from reminder_core.settings import Settings
from tests.integration.api_support import NOW, PROBLEM_JSON, URL, Clock, TokenFor, bearer, build_app

LOCK_HELD_S = 20.0
TIMEOUT_S = 0.3
CREATE = {"title": "Tea", "start_local": "2029-06-02T09:00"}


@pytest.fixture
def bounded(db: Engine) -> Iterator[Engine]:
    """An engine on the test database whose statements are bounded by TIMEOUT_S."""
    engine = make_engine(
        db.url.render_as_string(hide_password=False),
        pool_size=2,
        application_name="reminders-api",
        statement_timeout_s=TIMEOUT_S,
    )
    yield engine
    engine.dispose()


@contextmanager
def locked(db: Engine, table: str) -> Iterator[None]:
    """Hold `LOCK TABLE table IN ACCESS EXCLUSIVE MODE` (a migration's lock) until the
    block ends, or LOCK_HELD_S at most."""
    conn = db.connect()
    trans = conn.begin()
    conn.execute(text(f"LOCK TABLE {table} IN ACCESS EXCLUSIVE MODE"))
    released = threading.Lock()

    def release() -> None:
        with released:
            if trans.is_active:
                trans.rollback()

    timer = threading.Timer(LOCK_HELD_S, release)
    timer.start()
    try:
        yield
    finally:
        timer.cancel()
        release()
        conn.close()


def count(db: Engine, table: str) -> int:
    with db.connect() as conn:
        return int(conn.execute(text(f"SELECT count(*) FROM {table}")).scalar_one())


def test_each_connection_carries_the_bound(bounded: Engine, db: Engine) -> None:
    with bounded.connect() as conn:
        assert conn.execute(text("SHOW statement_timeout")).scalar_one() == "300ms"
    with db.connect() as conn:  # make_engine's default: no bound
        assert conn.execute(text("SHOW statement_timeout")).scalar_one() == "0"


def test_a_create_on_a_locked_table_answers_503_and_writes_nothing(
    db: Engine, bounded: Engine, settings: Settings, token_for: TokenFor
) -> None:
    alice = bearer(token_for("alice"))
    app = build_app(settings.model_copy(update={"rate_limit_per_minute": 0}), bounded, Clock(NOW))
    with TestClient(app, raise_server_exceptions=False) as c:
        with locked(db, "reminders"):
            created = c.post(URL, headers=alice, json=CREATE)
            listed = c.get(URL, headers=alice)
        assert count(db, "reminders") == 0
        for response in (created, listed):
            assert response.status_code == 503, response.text
            assert response.headers["content-type"] == PROBLEM_JSON
            assert response.headers["retry-after"] == "5"
            assert "database" in response.json()["detail"]
        # The lock gone, the same pool serves again: the cancelled statements left no
        # connection in a failed transaction.
        again = c.post(URL, headers=alice, json=CREATE)
    assert again.status_code == 201, again.text
    assert count(db, "reminders") == 1


def test_a_take_on_a_locked_budget_lets_the_request_through_unlimited(
    db: Engine, bounded: Engine, settings: Settings, token_for: TokenFor
) -> None:
    # docs/operations.md, "Fair limits": a take the database cannot do lets the request
    # through unlimited, without RateLimit headers; bounded, it does so after the bound.
    alice = bearer(token_for("alice"))
    changed = settings.model_copy(update={"rate_limit_per_minute": 60, "rate_limit_burst": 3})
    with TestClient(build_app(changed, bounded, Clock(NOW)), raise_server_exceptions=False) as c:
        with locked(db, "rate_limits"):
            created = c.post(URL, headers=alice, json=CREATE)
        counted = c.get(URL, headers=alice)
    assert created.status_code == 201, created.text
    assert "RateLimit" not in created.headers
    assert count(db, "reminders") == 1
    # The next request is counted again: one request of the budget of three taken.
    assert counted.status_code == 200
    assert counted.headers["RateLimit"] == '"per-user";r=2;t=1'


def test_a_create_that_takes_in_its_statement_waits_once_on_a_locked_table(
    db: Engine, bounded: Engine, settings: Settings, token_for: TokenFor
) -> None:
    # Issue 15: a create runs the rate limit's take in its own statement. Cancelled on a
    # locked `reminders`, it takes on its own (done at once: the budget was not what
    # waited) and is answered 503 without a second wait; counted once, nothing written.
    alice = bearer(token_for("alice"))
    changed = settings.model_copy(update={"rate_limit_per_minute": 60, "rate_limit_burst": 3})
    statements: list[str] = []

    def before(_conn: object, _cursor: object, statement: str, *_: object) -> None:
        statements.append(
            "take and insert"
            if "INSERT INTO rate_limits" in statement and "INSERT INTO reminders" in statement
            else "take"
            if "INSERT INTO rate_limits" in statement
            else "other"
        )

    with TestClient(build_app(changed, bounded, Clock(NOW)), raise_server_exceptions=False) as c:
        event.listen(bounded, "before_cursor_execute", before)
        try:
            with locked(db, "reminders"):
                created = c.post(URL, headers=alice, json=CREATE)
        finally:
            event.remove(bounded, "before_cursor_execute", before)
    assert created.status_code == 503, created.text
    assert created.headers["retry-after"] == "5"
    assert created.headers["RateLimit"] == '"per-user";r=2;t=1'  # one request of three
    assert statements == ["take and insert", "take"]
    assert count(db, "reminders") == 0
