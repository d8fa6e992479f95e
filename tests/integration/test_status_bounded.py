"""`reminders status` while a table is locked (operations trial: it waited as long as the
lock, then said `ok`): each read gives up after STATEMENT_TIMEOUT_MS and its checks read
UNKNOWN, naming the error."""

from __future__ import annotations

import threading
import time

from sqlalchemy import Engine, text

from reminder_core.clock import utcnow
from reminder_core.queue import PostgresQueue
from reminder_core.settings import Settings
from reminder_core.status import STATEMENT_TIMEOUT_MS, State, collect_status


def test_a_locked_table_makes_its_checks_unknown_within_the_timeout(
    db: Engine, settings: Settings
) -> None:
    locked = threading.Event()
    release = threading.Event()

    def hold_locks() -> None:
        with db.begin() as conn:
            conn.execute(text("LOCK TABLE reminders, delivery_log IN ACCESS EXCLUSIVE MODE"))
            locked.set()
            release.wait(30)

    holder = threading.Thread(target=hold_locks)
    holder.start()
    try:
        assert locked.wait(10)
        started = time.monotonic()
        report = collect_status(
            db, PostgresQueue(db, name="reminders", max_receive_count=5), settings, now=utcnow()
        )
        took = time.monotonic() - started
    finally:
        release.set()
        holder.join()
    by_name = {check.name: check for check in report.checks}
    for name in ("next_run_lag", "due_backlog", "delivery_lag_p99", "failures_last_hour"):
        assert by_name[name].state is State.UNKNOWN, by_name[name]
        assert "timeout" in (by_name[name].detail or "").lower()
    # Two reads, each bounded by the statement/lock timeout (plus slack for the rest).
    assert took < 2 * STATEMENT_TIMEOUT_MS / 1000 + 10
