"""Typed statements on the settings of the caller's current transaction
(`sql/transaction.sql`; no table). Each setting lasts until that transaction ends; no
function commits."""

from __future__ import annotations

from sqlalchemy import Connection

from reminder_core.store._statements import query, run


def set_lock_timeout(conn: Connection, *, timeout_ms: int) -> None:
    """For the rest of the transaction, give up on a lock after `timeout_ms` milliseconds
    (PostgreSQL `lock_timeout`; the waiting statement then fails with SQLSTATE 55P03)
    (`transaction_set_lock_timeout`)."""
    run(conn, query("transaction_set_lock_timeout"), {"timeout": f"{timeout_ms}ms"})


def set_timeouts(conn: Connection, *, timeout_ms: int) -> None:
    """For the rest of the transaction, end any statement that runs, and give up on any
    lock wait, after `timeout_ms` milliseconds (PostgreSQL `statement_timeout` and
    `lock_timeout`: SQLSTATE 57014 and 55P03) (`transaction_set_timeouts`)."""
    run(conn, query("transaction_set_timeouts"), {"ms": str(timeout_ms)})


def ping(conn: Connection) -> None:
    """Run a statement that reads nothing: returns when the database answers
    (`transaction_ping`; `/readyz`).

    Raises:
        sqlalchemy.exc.DBAPIError: the database did not answer.
    """
    run(conn, query("transaction_ping"))
