"""Transactions that hold locks for a while, for tests of what waits behind them."""

from __future__ import annotations

import threading
import time

from sqlalchemy import Engine, text


def reading(engine: Engine, table: str, hold_s: float) -> threading.Thread:
    """A started thread whose transaction has read `table` (so holds its ACCESS SHARE
    lock, which every ALTER of the table waits for) and stays open for `hold_s` seconds;
    returned once the read is done.

    Raises:
        AssertionError: the read did not happen within 5 s.
    """
    read = threading.Event()

    def reader() -> None:
        with engine.begin() as conn:
            conn.execute(text(f"SELECT count(*) FROM {table}"))
            read.set()
            time.sleep(hold_s)

    thread = threading.Thread(target=reader)
    thread.start()
    assert read.wait(5), f"no read of {table} within 5 s"
    return thread
