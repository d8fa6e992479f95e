"""The rate limit's take (`reminder_core.store.rate_limits.take`, SQL `rate_limit_take`)
against the real database: the GCRA's arithmetic, and what a take that waited for a
concurrent one reports.

Expected values come from the GCRA as the API documents it (docs/operations.md, "Fair
limits"; ATM Forum TM 4.0's virtual scheduling form): a request at `now` is taken when
max(TAT, now) + T <= now + tau, and then TAT becomes max(TAT, now) + T; with T = 1 s and
tau = 3 s a user idle since before `now` gets exactly three requests at `now`."""

from __future__ import annotations

import threading
import time
from datetime import UTC, datetime, timedelta

from sqlalchemy import Engine, text

from reminder_core.store import rate_limits
from reminder_core.store.rate_limits import Taken

NOW = datetime(2031, 5, 4, 12, 0, tzinfo=UTC)
T = timedelta(seconds=1)


def take(db: Engine, user_id: str, now: datetime = NOW) -> Taken:
    with db.connect() as conn:
        return rate_limits.take(
            conn, user_id=user_id, now=now, emission_s=1.0, tolerance_s=3.0, autocommit=True
        )


def test_three_requests_fit_at_once_and_one_more_each_second(db: Engine) -> None:
    assert [take(db, "u1") for _ in range(4)] == [
        Taken(tat=NOW + T, taken=True),
        Taken(tat=NOW + 2 * T, taken=True),
        Taken(tat=NOW + 3 * T, taken=True),
        Taken(tat=NOW + 3 * T, taken=False),  # refused: nothing changes
    ]
    assert take(db, "u1", NOW + T) == Taken(tat=NOW + 4 * T, taken=True)
    assert take(db, "u1", NOW + T) == Taken(tat=NOW + 4 * T, taken=False)
    # Idle past the TAT: the budget is full again, from `now`.
    assert take(db, "u1", NOW + 60 * T) == Taken(tat=NOW + 61 * T, taken=True)
    assert take(db, "u2") == Taken(tat=NOW + T, taken=True)  # each user their own


def test_a_take_refused_after_waiting_for_a_concurrent_one_reports_its_tat(
    db: Engine,
) -> None:
    """Adversarial trial, 2026-12-06: after an idle spell, concurrent requests of one user
    got 429s whose RateLimit header said budget was left (`r=6` with q=5): the refused
    take read the TAT from its snapshot, older than the concurrent take it had waited for.
    Here the order is forced: the second take is seen waiting on the row's lock before the
    first commits; it must be refused with the TAT the first one wrote."""
    assert take(db, "u1", NOW - 60 * T).taken  # an old row: TAT long before NOW
    assert take(db, "u1", NOW - 60 * T).taken
    with db.connect() as first:
        with first.begin():
            # Two taken at NOW: TAT NOW + 2 s; one more fits, and is taken in here.
            assert take(db, "u1").taken
            assert take(db, "u1").taken
            held = rate_limits.take(first, user_id="u1", now=NOW, emission_s=1.0, tolerance_s=3.0)
            assert held == Taken(tat=NOW + 3 * T, taken=True)
            outcome: list[Taken] = []
            pid: list[int] = []

            def second() -> None:
                with db.connect() as conn:
                    pid.append(conn.connection.dbapi_connection.info.backend_pid)  # type: ignore[union-attr]
                    taken = rate_limits.take(
                        conn, user_id="u1", now=NOW, emission_s=1.0, tolerance_s=3.0,
                        autocommit=True,
                    )  # fmt: skip
                    outcome.append(taken)

            thread = threading.Thread(target=second)
            thread.start()
            _wait_for_lock_wait(db, pid)
        # `first` committed here.
        thread.join(10)
    assert outcome == [Taken(tat=NOW + 3 * T, taken=False)]


def _wait_for_lock_wait(db: Engine, pid: list[int]) -> None:
    """Return once the backend in `pid` waits on a lock (pg_stat_activity)."""
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        if pid:
            with db.connect() as conn:
                waiting = conn.execute(
                    text("SELECT wait_event_type FROM pg_stat_activity WHERE pid = :pid"),
                    {"pid": pid[0]},
                ).scalar_one_or_none()
            if waiting == "Lock":
                return
        time.sleep(0.01)
    raise AssertionError("the second take never waited on the first one's lock")
