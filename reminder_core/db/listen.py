"""PostgreSQL LISTEN on a dedicated connection: wake a waiting worker on NOTIFY."""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from typing import Any

import psycopg
from psycopg import sql
from sqlalchemy import Engine

log = logging.getLogger(__name__)

#: Longest single wait on the socket, seconds: how soon a stop is noticed.
SLICE_S = 0.1


class Listener:
    """One connection, outside the pool and in autocommit, that LISTENs on `channel`.

    The connection is opened on first use and re-opened after it fails (a failure is
    logged and that wait falls back to sleeping: a lost wake-up costs latency, never
    work, since the waiting worker still ticks at its poll interval).

    Args:
        engine: where to connect (a pooled connection is detached: it is never returned
            to the pool, so LISTEN never leaks into other work).
        channel: the NOTIFY channel.
    """

    def __init__(self, engine: Engine, channel: str) -> None:
        self._engine = engine
        self.channel = channel
        self._conn: psycopg.Connection[Any] | None = None
        self._lock = threading.Lock()

    def drain(self) -> None:
        """Forget notifications received so far (the caller is about to read the state
        they announced). Connects and LISTENs first if need be: a NOTIFY committed after
        this call is seen by the next `wait`."""
        with self._lock:
            conn = self._connected()
            if conn is not None:
                self._pending(conn, 0.0)

    def wait(self, timeout_s: float, stop: threading.Event, payload: str | None = None) -> bool:
        """Wait up to `timeout_s` seconds for a notification (with `payload`, if given).

        The wait is counted in slices of at most SLICE_S, not read off a clock, so it ends
        even where the clock is frozen (a test's freezegun) and notices `stop` within a
        slice.

        Returns:
            True when one arrived, False on timeout or when `stop` was set.
        """
        budget = timeout_s
        while budget > 0 and not stop.is_set():
            slice_s = min(budget, SLICE_S)
            budget -= slice_s
            with self._lock:
                conn = self._connected()
                got = self._pending(conn, slice_s) if conn is not None else None
            if got is None:  # no connection: sleep this slice instead
                if stop.wait(slice_s):
                    return False
            elif any(payload is None or p == payload for p in got):
                return True
        return False

    def wait_until(
        self,
        stop: threading.Event,
        *,
        timeout_s: float,
        wait_s: Callable[[float], float],
        payload: str | None = None,
    ) -> None:
        """Wait as long as `wait_s(0.0)` says (seconds), at most `timeout_s`; on each
        notification (with `payload`, if given) ask `wait_s(spent)` again (`spent`: the
        seconds waited so far) and keep the sooner of the two ends. Returns early when
        `stop` is set.

        `wait_s` reads the state the notifications announce (when the next message becomes
        visible, when the next reminder is due); the pending notifications are dropped
        before its first call, so a change committed after that call ends the wait.

        Raises:
            whatever `wait_s` raises (a database error: the caller decides).
        """
        self.drain()
        spent = 0.0  # counted, not read off a clock (see `wait`)
        budget = min(timeout_s, wait_s(0.0))
        while budget > 0 and not stop.is_set():
            slice_s = min(budget, SLICE_S)
            woke = self.wait(slice_s, stop, payload=payload)
            budget -= slice_s
            spent += slice_s
            if woke:
                budget = min(budget, timeout_s - spent, wait_s(spent))

    def close(self) -> None:
        with self._lock:
            if self._conn is not None:
                self._conn.close()
                self._conn = None

    def _connected(self) -> psycopg.Connection[Any] | None:
        if self._conn is not None and not self._conn.closed:
            return self._conn
        try:
            raw = self._engine.raw_connection()
            raw.detach()
            conn: psycopg.Connection[Any] = raw.dbapi_connection  # type: ignore[assignment]
            conn.rollback()
            conn.autocommit = True
            conn.execute(sql.SQL("LISTEN {}").format(sql.Identifier(self.channel)))
        except Exception as exc:
            log.warning("LISTEN %s failed (waiting by polling instead): %s", self.channel, exc)
            self._conn = None
            return None
        self._conn = conn
        return conn

    def _pending(self, conn: psycopg.Connection[Any], timeout_s: float) -> list[str] | None:
        """Payloads of the notifications that arrive within `timeout_s` (those already
        received first); None when the connection failed (it is closed)."""
        try:
            payloads = [n.payload for n in conn.notifies(timeout=timeout_s, stop_after=1)]
            # More may have arrived together with the first: take them without waiting.
            if payloads:
                payloads += [n.payload for n in conn.notifies(timeout=0.0)]
            return payloads
        except psycopg.Error as exc:
            log.warning("LISTEN %s connection failed: %s", self.channel, exc)
            conn.close()
            self._conn = None
            return None
