"""Pooled connections are pinged only after sitting idle (issue 15: SQLAlchemy's
`pool_pre_ping` cost a round trip on every API request), and a connection the server
dropped while it was idle is replaced, not handed to a request."""

from __future__ import annotations

import pytest
from sqlalchemy import Engine, text
from sqlalchemy.exc import OperationalError

from reminder_core.db import session
from reminder_core.db.session import make_engine


def _backend_pid(engine: Engine) -> int:
    with engine.connect() as conn:
        return int(conn.execute(text("SELECT pg_backend_pid()")).scalar_one())


def _terminate(db: Engine, pid: int) -> None:
    with db.connect() as conn:
        assert conn.execute(text("SELECT pg_terminate_backend(:p, 5000)"), {"p": pid}).scalar_one()
        conn.commit()


def test_a_connection_dropped_while_idle_is_replaced_before_use(
    database_url: str, db: Engine, monkeypatch: pytest.MonkeyPatch
) -> None:
    engine = make_engine(database_url, pool_size=1)
    try:
        first = _backend_pid(engine)
        _terminate(db, first)  # e.g. a database restart or a proxy's idle timeout
        monkeypatch.setattr(session, "PING_AFTER_IDLE_S", 0.0)  # it has been idle long enough
        second = _backend_pid(engine)  # no error: the ping failed, the pool reconnected
        assert second != first
        # The ping left no transaction open on the connection handed out.
        with engine.connect() as conn:
            assert conn.exec_driver_sql("SELECT 1").scalar_one() == 1
    finally:
        engine.dispose()


def test_a_connection_in_steady_use_is_not_pinged(
    database_url: str, db: Engine, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The other side of the trade: a connection checked in moments ago is handed out
    without a ping, so a drop within PING_AFTER_IDLE_S reaches that one request (503,
    retryable), after which the pool has discarded the connection."""
    monkeypatch.setattr(session, "PING_AFTER_IDLE_S", 3600.0)
    engine = make_engine(database_url, pool_size=1)
    try:
        first = _backend_pid(engine)
        _terminate(db, first)
        with pytest.raises(OperationalError), engine.connect() as conn:
            conn.execute(text("SELECT 1"))
        assert _backend_pid(engine) != first
    finally:
        engine.dispose()
