"""Helpers for integration tests: bulk-insert reminders and delivery rows with plain SQL."""

from __future__ import annotations

import json
import subprocess
import sys
from datetime import datetime
from pathlib import Path
from typing import Any

from sqlalchemy import Engine, text

from tests.support.workloads import REPO_ROOT, child_env


def insert_due_reminders(
    engine: Engine,
    count: int,
    *,
    next_run_utc: datetime,
    user_id: str = "alice",
    status: str = "pending",
    title: str = "Due",
    timezone: str | None = "UTC",
) -> None:
    """Insert `count` one-time reminders due at `next_run_utc` (one statement).

    `timezone` None makes them follow the user's profile zone.
    """
    with engine.begin() as conn:
        conn.execute(
            text(
                "INSERT INTO reminders (user_id, title, start_local, timezone, next_run_utc,"
                " status) SELECT :user_id, :title || ' ' || g, :local, :tz, :next_run, :status"
                " FROM generate_series(1, :count) AS g"
            ),
            {
                "user_id": user_id,
                "title": title,
                "local": next_run_utc.replace(tzinfo=None),
                "next_run": next_run_utc,
                "status": status,
                "tz": timezone,
                "count": count,
            },
        )


def insert_sending_rows(
    engine: Engine,
    run_time_utc: datetime,
    locked_at: dict[str, datetime | None],
    *,
    attempt_count: int = 0,
) -> None:
    """Insert, for each reminder titled as a key of `locked_at`, the `sending` delivery
    row of its occurrence at `run_time_utc`, as a sender leaves it: leased at that
    instant (with a fresh lease token), or released (None: no lease, no token)."""
    leases = [
        {"title": title, "locked_at": at.isoformat() if at else None}
        for title, at in locked_at.items()
    ]
    with engine.begin() as conn:
        conn.execute(
            text(
                "INSERT INTO delivery_log (reminder_id, user_id, run_time_utc, status,"
                " attempt_count, locked_at, lease_token)"
                " SELECT r.id, r.user_id, :t, 'sending', :attempts, l.locked_at,"
                " CASE WHEN l.locked_at IS NULL THEN NULL ELSE gen_random_uuid() END"
                " FROM reminders AS r JOIN jsonb_to_recordset(CAST(:leases AS jsonb))"
                " AS l(title text, locked_at timestamptz) ON l.title = r.title"
            ),
            {"t": run_time_utc, "attempts": attempt_count, "leases": json.dumps(leases)},
        )


class ExternalQueue:
    """A PostgreSQL queue as the coordinator sees SQS: a queue outside its database
    (not a `PostgresQueue`), so claims take the outbox path (outbox rows, published after
    the commit, swept when that fails) instead of writing messages in the claim.
    Everything else is the wrapped queue's."""

    def __init__(self, inner: object) -> None:
        self._inner = inner

    def __getattr__(self, name: str) -> object:
        return getattr(self._inner, name)


class BrokenExternalQueue(ExternalQueue):
    """An ExternalQueue whose sends fail (a queue outage)."""

    def send_batch(self, *_args: object, **_kwargs: object) -> None:
        raise ConnectionError("queue down")


def run_status(database_url: str, state_dir: Path, **env: str) -> tuple[int, dict[str, Any]]:
    """`reminders status --json` as a process; (exit status, {check name: check})."""
    run = subprocess.run(
        [sys.executable, "-m", "reminders", "status", "--json"],
        env=child_env({"DATABASE_URL": database_url, "STATE_DIR": str(state_dir), **env}),
        cwd=REPO_ROOT,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert run.stdout, run.stderr
    report = json.loads(run.stdout)
    assert report["exit_code"] == run.returncode
    return run.returncode, {c["name"]: c for c in report["checks"]}
