"""Moving a user between cells mid-stream (issue 18, "How we will check it": "moving a
user between cells mid-stream loses and duplicates nothing"), through the real
processes: two cells on the local PostgreSQL, each with its own PostgreSQL-table queue,
coordinator and sender (`--cell`), one API, and `reminders cells move` run as an
operator would while the user's reminders fall due four a second and a client
keeps creating more.

Expected (docs/design.md, "Moving a user between cells"): every reminder the API
accepted (201) is emailed exactly once (one .eml, one `sent` row) whichever cell it was
due in; afterwards all of the mover's rows are in cell b and none in cell a; every write
refused meanwhile was a 503 problem+json with Retry-After; the user who stayed is
untouched.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
import time
from collections import Counter
from collections.abc import Iterator
from contextlib import ExitStack
from datetime import UTC, datetime, timedelta
from pathlib import Path

import httpx
import pytest
from sqlalchemy import Engine, text

from reminder_core.settings import Settings
from reminder_core.tokens import mint_token
from tests.e2e.test_dev import free_port
from tests.e2e.test_workloads import Processes, _ready, wait_for
from tests.support.workloads import fresh_database

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(300)]

SECRET = "cell-move-" + "k" * 48
MOVER, STAYER = "mover", "stayer"
STREAM = 40  # the mover's reminders, due four a second (start_local has seconds)


@pytest.fixture
def cell_dbs(admin_url: str) -> Iterator[dict[str, tuple[str, Engine]]]:
    with ExitStack() as stack:
        yield {
            name: stack.enter_context(fresh_database(admin_url, f"reminders_move_{name}"))
            for name in ("a", "b")
        }


def sent(engine: Engine, user: str) -> Counter[str]:
    with engine.connect() as conn:
        rows = conn.execute(
            text("SELECT reminder_id FROM delivery_log WHERE status = 'sent' AND user_id = :u"),
            {"u": user},
        )
        return Counter(str(r.reminder_id) for r in rows)


def user_rows(engine: Engine, user: str) -> int:
    with engine.connect() as conn:
        return int(
            conn.execute(
                text(
                    "SELECT (SELECT count(*) FROM reminders WHERE user_id = :u)"
                    " + (SELECT count(*) FROM delivery_log WHERE user_id = :u)"
                ),
                {"u": user},
            ).scalar_one()
        )


def test_a_user_moved_mid_stream_gets_each_reminder_once(
    tmp_path: Path, cell_dbs: dict[str, tuple[str, Engine]]
) -> None:
    a, b = cell_dbs["a"][1], cell_dbs["b"][1]
    profiles = {u: {"email": f"{u}@example.com", "timezone": "UTC"} for u in (MOVER, STAYER)}
    (tmp_path / "profiles.json").write_text(json.dumps(profiles))
    settings_vars = {name.upper() for name in Settings.model_fields}
    env = {k: v for k, v in os.environ.items() if k.upper() not in settings_vars}
    env.update(
        CELLS=json.dumps([
            {"name": "a", "database_url": cell_dbs["a"][0]},
            {"name": "b", "database_url": cell_dbs["b"][0], "accepts_new_users": False},
        ]),
        CELL_CACHE_TTL_S="2",
        JWT_SECRET=SECRET,
        STATE_DIR=str(tmp_path / "state"),
        PROFILES_FILE=str(tmp_path / "profiles.json"),
        MAIL_DIR=str(tmp_path / "mail"),
        RATE_LIMIT_PER_MINUTE="0",
    )  # fmt: skip
    migrated = subprocess.run(
        [sys.executable, "-m", "reminders", "migrate"], env=env, timeout=180,
        capture_output=True, text=True,
    )  # fmt: skip
    assert migrated.returncode == 0, migrated.stderr

    procs = Processes(env, tmp_path)
    try:
        port = free_port()
        procs.start("api", "api", "--port", str(port), "--workers", "1")
        for cell in ("a", "b"):
            procs.start(f"coordinator-{cell}", "coordinator", "--cell", cell)
            procs.start(f"sender-{cell}", "sender", "--cell", cell)
        base = f"http://127.0.0.1:{port}"
        wait_for(lambda: _ready(base), 60, "the API")
        client = httpx.Client(base_url=base, timeout=30)
        auth = {u: {"Authorization": f"Bearer {mint_token(Settings(jwt_secret=SECRET), u)}"}
                for u in (MOVER, STAYER)}  # fmt: skip

        def post(user: str, title: str, due: datetime) -> httpx.Response:
            return client.post(
                "/v1/reminders",
                headers=auth[user],
                json={
                    "title": title,
                    "start_local": due.replace(tzinfo=None).isoformat(timespec="seconds"),
                    "timezone": "UTC",
                },
            )

        start = (datetime.now(UTC) + timedelta(seconds=8)).replace(microsecond=0)
        accepted: dict[str, list[str]] = {MOVER: [], STAYER: []}
        for i in range(STREAM):
            for user in (MOVER, STAYER) if i % 2 == 0 else (MOVER,):
                r = post(user, f"{user} #{i}", start + timedelta(seconds=i // 4))
                assert r.status_code == 201, r.text
                accepted[user].append(r.json()["id"])
        assert user_rows(a, MOVER) + user_rows(a, STAYER) == 60  # everyone starts in a

        # A client that keeps creating the mover's reminders through the move.
        refused: list[httpx.Response] = []
        stop = threading.Event()

        def keep_writing() -> None:
            n = 0
            while not stop.is_set():
                r = post(MOVER, f"written meanwhile #{n}", datetime.now(UTC) + timedelta(seconds=3))
                if r.status_code == 201:
                    accepted[MOVER].append(r.json()["id"])
                else:
                    refused.append(r)
                n += 1
                time.sleep(0.05)

        # Mid-stream: move once a quarter of the mover's stream has been sent from a.
        wait_for(lambda: len(sent(a, MOVER)) >= STREAM // 4, 60, "the stream to start")
        writer = threading.Thread(target=keep_writing)
        writer.start()
        before_move = len(sent(a, MOVER))
        moved = subprocess.run(
            [sys.executable, "-m", "reminders", "cells", "move", MOVER, "--to", "b"],
            env=env, timeout=120, capture_output=True, text=True,
        )  # fmt: skip
        time.sleep(1)
        stop.set()
        writer.join(30)
        assert moved.returncode == 0, moved.stdout + moved.stderr
        assert "switched" in moved.stdout
        assert "moved mover from a to b" in moved.stdout
        assert before_move < STREAM  # mid-stream: some were still to come
        print(moved.stdout, f"sent before the move: {before_move}; refused: {len(refused)}")

        everyone = accepted[MOVER] + accepted[STAYER]
        wait_for(
            lambda: (
                set(sent(b, MOVER)) >= set(accepted[MOVER])
                and set(sent(a, STAYER)) >= set(accepted[STAYER])
            ),
            90,
            "every accepted reminder to be sent",
        )
        time.sleep(2)  # a duplicate would have been recorded by now
        mover_sent = sent(b, MOVER)
        assert set(mover_sent) == set(accepted[MOVER])
        assert set(mover_sent.values()) == {1}
        assert user_rows(a, MOVER) == 0  # nothing of the mover left in a
        assert set(sent(a, STAYER)) == set(accepted[STAYER])
        assert user_rows(b, STAYER) == 0
        emails = Counter(p.name[:36] for p in (tmp_path / "mail").glob("*.eml"))
        assert set(emails) == set(everyone)
        assert set(emails.values()) == {1}  # exactly once, whichever cell sent it
        for r in refused:
            assert r.status_code == 503, r.text
            assert r.headers["content-type"] == "application/problem+json"
            assert int(r.headers["Retry-After"]) > 0
        with a.connect() as conn:
            home = conn.execute(
                text("SELECT cell FROM cell_assignments WHERE user_id = :u"), {"u": MOVER}
            ).scalar_one()
        assert home == "b"
        assert len(accepted[MOVER]) > STREAM  # the writer got through after the move
    finally:
        procs.kill_all()
