"""Three cells end to end (issue 18, "How we will check it"): three databases on the
local PostgreSQL, each with its own PostgreSQL-table queue and its own coordinator and
sender processes (`--cell`), one API routing 300 users between them.

- 3,000 reminders across 300 users: every one delivered exactly once (one `sent` row,
  one email), from its own user's cell; each cell holds only its own users' reminders.
- One cell's workers killed (SIGKILL): only that cell's reminders wait; the others are
  delivered meanwhile; restarted, the waiting ones are delivered once.
- `reminders migrate` migrates every cell; a cell's worker labels its metrics `cell`;
  `reminders status` reports every cell's checks, each named for its cell.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from collections import Counter
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import ExitStack
from datetime import UTC, datetime, timedelta
from pathlib import Path

import httpx
import pytest
from alembic.script import ScriptDirectory
from sqlalchemy import Engine, text

from reminder_core.db.migrate import alembic_config
from reminder_core.settings import Settings
from reminder_core.tokens import mint_token
from tests.e2e.test_dev import free_port
from tests.e2e.test_workloads import Processes, _ready, wait_for
from tests.support.workloads import fresh_database

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(420)]

SECRET = "cells-" + "k" * 48
CELLS = ("a", "b", "c")
USERS = [f"user-{i:03d}" for i in range(300)]


@pytest.fixture
def cell_dbs(admin_url: str) -> Iterator[dict[str, tuple[str, Engine]]]:
    with ExitStack() as stack:
        yield {
            name: stack.enter_context(fresh_database(admin_url, f"reminders_cell_{name}"))
            for name in CELLS
        }


def count(engine: Engine, sql: str) -> int:
    with engine.connect() as conn:
        return int(conn.execute(text(sql)).scalar_one())


def sent_ids(engine: Engine) -> Counter[str]:
    with engine.connect() as conn:
        rows = conn.execute(text("SELECT reminder_id FROM delivery_log WHERE status = 'sent'"))
        return Counter(str(r.reminder_id) for r in rows)


def test_three_cells_deliver_each_users_reminders_once_from_their_own_cell(
    tmp_path: Path, cell_dbs: dict[str, tuple[str, Engine]]
) -> None:
    engines = {name: engine for name, (_, engine) in cell_dbs.items()}
    profiles = {u: {"email": f"{u}@example.com", "timezone": "UTC"} for u in USERS}
    (tmp_path / "profiles.json").write_text(json.dumps(profiles))
    settings_vars = {name.upper() for name in Settings.model_fields}
    env = {k: v for k, v in os.environ.items() if k.upper() not in settings_vars}
    env.update(
        CELLS=json.dumps([{"name": n, "database_url": cell_dbs[n][0]} for n in CELLS]),
        JWT_SECRET=SECRET,
        STATE_DIR=str(tmp_path / "state"),
        PROFILES_FILE=str(tmp_path / "profiles.json"),
        MAIL_DIR=str(tmp_path / "mail"),
        COORDINATOR_POLL_INTERVAL_S="0.5",
        SENDER_POLL_INTERVAL_S="0.5",
        RATE_LIMIT_PER_MINUTE="0",
    )
    migrated = subprocess.run(
        [sys.executable, "-m", "reminders", "migrate"], env=env, timeout=180,
        capture_output=True, text=True,
    )  # fmt: skip
    assert migrated.returncode == 0, migrated.stderr
    head = ScriptDirectory.from_config(alembic_config("postgresql://unused")).get_current_head()
    for engine in engines.values():  # every cell, not only the first, at the newest migration
        at_head = f"SELECT count(*) FROM alembic_version WHERE version_num = '{head}'"
        assert count(engine, at_head), head

    # A worker without its cell is a configuration error (exit 2), not a silent default.
    lost = subprocess.run(
        [sys.executable, "-m", "reminders", "sender"], env=env, timeout=60,
        capture_output=True, text=True,
    )  # fmt: skip
    assert lost.returncode == 2, lost.stderr
    assert "--cell NAME" in lost.stderr

    procs = Processes(env, tmp_path)
    try:
        port, metrics_port = free_port(), free_port()
        procs.start("api", "api", "--port", str(port), "--workers", "1")
        for cell in CELLS:
            procs.start(f"coordinator-{cell}", "coordinator", "--cell", cell)
        procs.env = {**env, "METRICS_PORT": str(metrics_port)}
        procs.start("sender-a", "sender", "--cell", "a")
        procs.env = env
        for cell in CELLS[1:]:
            procs.start(f"sender-{cell}", "sender", "--cell", cell)
        base = f"http://127.0.0.1:{port}"
        wait_for(lambda: _ready(base), 60, "the API")
        client = httpx.Client(base_url=base, timeout=30)
        tokens = {u: mint_token(Settings(jwt_secret=SECRET), u) for u in USERS}

        def create(user: str, lead_s: int, n: int) -> list[str]:
            # Each reminder is due lead_s after its own request, so a slow machine
            # (CI took over 20 s for the 3,000 creates) never sends one in the past.
            ids = []
            for i in range(n):
                due = (datetime.now(UTC) + timedelta(seconds=lead_s)).replace(microsecond=0)
                r = client.post(
                    "/v1/reminders",
                    headers={"Authorization": f"Bearer {tokens[user]}"},
                    json={
                        "title": f"{user} #{i}",
                        "start_local": due.replace(tzinfo=None).isoformat(),
                        "timezone": "UTC",
                    },
                )
                assert r.status_code == 201, r.text
                ids.append(r.json()["id"])
            return ids

        with ThreadPoolExecutor(8) as pool:
            made = dict(zip(USERS, pool.map(lambda u: create(u, 10, 10), USERS), strict=True))
        assert sum(len(v) for v in made.values()) == 3000

        # Where each user lives (the directory is in the first cell), and that each
        # cell holds its own users' reminders and no one else's.
        with engines["a"].connect() as conn:
            home = dict(conn.execute(text("SELECT user_id, cell FROM cell_assignments")).all())
        assert set(home) == set(USERS)
        assert min(Counter(home.values()).values()) >= 80  # least loaded: ~100 each
        for cell, engine in engines.items():
            with engine.connect() as conn:
                users = {r[0] for r in conn.execute(text("SELECT DISTINCT user_id FROM reminders"))}
            assert users == {u for u, c in home.items() if c == cell}

        def all_sent() -> bool:
            return sum(count(e, "SELECT count(*) FROM delivery_log WHERE status = 'sent'")
                       for e in engines.values()) >= 3000  # fmt: skip

        wait_for(all_sent, 180, "3,000 deliveries")
        for cell, engine in engines.items():
            ids = sent_ids(engine)
            mine = {rid for u, c in home.items() if c == cell for rid in made[u]}
            assert set(ids) == mine, cell
            assert set(ids.values()) == {1}, cell  # exactly once
        emails = list((tmp_path / "mail").glob("*.eml"))
        assert len(emails) == 3000
        assert {p.name[:36] for p in emails} == {i for v in made.values() for i in v}

        # The sender of cell a labels its series with its cell.
        scraped = httpx.get(f"http://127.0.0.1:{metrics_port}/metrics", timeout=10).text
        samples = [line for line in scraped.splitlines() if line and not line.startswith("#")]
        assert samples
        assert all('cell="a"' in line for line in samples), samples[:5]
        assert any(line.startswith("reminders_sends_total{") for line in samples)

        # Operations across cells: `reminders status` reads every cell, each check
        # named for its cell, with each cell's own live workers; `cells list` counts
        # the directory's users; `dlq --cell` reads one cell's queue.
        def cli(*args: str) -> subprocess.CompletedProcess[str]:
            return subprocess.run(
                [sys.executable, "-m", "reminders", *args], env=env, timeout=120,
                capture_output=True, text=True,
            )  # fmt: skip

        checks = json.loads(cli("status", "--json").stdout)["checks"]
        assert {c["cell"] for c in checks} == set(CELLS)
        senders = {c["cell"]: c["value"] for c in checks if c["name"] == "workers_sender"}
        assert senders == {"a": 1, "b": 1, "c": 1}
        assert all(c["label"].startswith(f"cell {c['cell']}: ") for c in checks)
        only_b = json.loads(cli("status", "--json", "--cell", "b").stdout)["checks"]
        assert {c["cell"] for c in only_b} == {"b"}
        listed = cli("cells", "list").stdout.splitlines()
        users_per_cell = Counter(home.values())
        assert listed == [f"{n}\tusers={users_per_cell[n]}\tweight=1\tnew_users=yes" for n in CELLS]
        assert cli("cells", "where", USERS[0]).stdout.strip() == home[USERS[0]]
        dead = cli("dlq", "--cell", "b", "list", "--json")
        assert (dead.returncode, json.loads(dead.stdout)) == (0, [])
        assert cli("dlq", "--cell", "zz", "list").returncode == 2

        # Cell c's workers die; everyone gets one more reminder, due in 5 s.
        for name in ("coordinator-c", "sender-c"):
            proc = procs.procs.pop(name)
            os.killpg(proc.pid, 9)
            proc.wait(10)
        with ThreadPoolExecutor(8) as pool:
            more = dict(zip(USERS, pool.map(lambda u: create(u, 5, 1), USERS), strict=True))
        c_users = [u for u, c in home.items() if c == "c"]

        def others_sent() -> bool:
            return all(
                sent_ids(engines[cell]).keys() >= {more[u][0] for u, c in home.items() if c == cell}
                for cell in ("a", "b")
            )

        wait_for(others_sent, 90, "cells a and b to deliver with cell c down")
        waiting = {more[u][0] for u in c_users}
        assert not waiting & sent_ids(engines["c"]).keys()
        due_in_c = (
            "SELECT count(*) FROM reminders WHERE status = 'pending' AND next_run_utc <= now()"
        )
        wait_for(lambda: count(engines["c"], due_in_c) >= len(c_users), 30, "cell c's to be due")
        assert count(engines["c"], due_in_c) == len(c_users)

        # Back up: cell c catches up, each once.
        procs.start("coordinator-c", "coordinator", "--cell", "c")
        procs.start("sender-c", "sender", "--cell", "c")
        wait_for(lambda: sent_ids(engines["c"]).keys() >= waiting, 120, "cell c to catch up")
        time.sleep(2)  # anything duplicated would have been recorded by now
        totals = Counter[str]()
        for engine in engines.values():
            totals.update(sent_ids(engine))
        assert len(totals) == 3300
        assert set(totals.values()) == {1}
        assert len(list((tmp_path / "mail").glob("*.eml"))) == 3300
    finally:
        procs.kill_all()
