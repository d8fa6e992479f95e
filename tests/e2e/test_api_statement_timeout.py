"""API_STATEMENT_TIMEOUT_S in the processes users run (`reminders api`, with one and two
worker processes, and `reminders dev`): with `reminders` locked ACCESS EXCLUSIVE by another
session, a create is answered 503 problem+json with Retry-After once the bound has passed
(PostgreSQL cancels the waiting statement), nothing is written, and the API serves again
when the lock is gone (adversarial trial, 2026-12-06: requests were held as long as the
lock, 15 s). The lock is released by a timer after LOCK_HELD_S whatever happens: without
the bound, the create would succeed late and the test fail, not hang."""

from __future__ import annotations

import subprocess
import sys
import threading
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
from sqlalchemy import Engine, text

from reminder_core.settings import Settings
from reminder_core.tokens import mint_token
from tests.support.workloads import (
    api_env,
    api_ready,
    free_port,
    fresh_database,
    migrate,
    wait_until,
)

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(180)]

SECRET = "e2e-" + "t" * 48
LOCK_HELD_S = 30.0
CREATE = {"title": "Tea", "start_local": "2031-01-01T09:00", "timezone": "UTC"}


@pytest.fixture
def e2e_db(admin_url: str) -> Iterator[tuple[str, Engine]]:
    with fresh_database(admin_url, "reminders_e2e") as url_and_engine:
        yield url_and_engine


@pytest.mark.parametrize(
    "command",
    [["api"], ["api", "--workers", "2"], ["dev", "--host", "127.0.0.1"]],
    ids=["api", "api-2-workers", "dev"],
)
def test_a_create_on_a_locked_table_is_answered_503_after_the_bound(
    command: list[str], e2e_db: tuple[str, Engine], tmp_path: Path
) -> None:
    url, engine = e2e_db
    env = api_env(
        url, tmp_path, SECRET, {"API_STATEMENT_TIMEOUT_S": "0.5", "RATE_LIMIT_PER_MINUTE": "0"}
    )
    migrate(env)
    port = free_port()
    base = f"http://127.0.0.1:{port}"
    log_path = tmp_path / "process.log"
    with log_path.open("wb") as log:
        proc = subprocess.Popen(
            [sys.executable, "-m", "reminders", *command, "--port", str(port)],
            env=env, stdout=log, stderr=subprocess.STDOUT, start_new_session=True,
        )  # fmt: skip
    token = {"Authorization": f"Bearer {mint_token(Settings(jwt_secret=SECRET), 'erin')}"}
    try:
        wait_until(lambda: api_ready(base), 90, "the API")
        with engine.connect() as holder:
            trans = holder.begin()
            holder.execute(text("LOCK TABLE reminders IN ACCESS EXCLUSIVE MODE"))
            timer = threading.Timer(LOCK_HELD_S, trans.rollback)
            timer.start()
            try:
                held = httpx.post(f"{base}/v1/reminders", headers=token, json=CREATE, timeout=60)
            finally:
                timer.cancel()
                if trans.is_active:
                    trans.rollback()
        assert held.status_code == 503, held.text
        assert held.headers["content-type"] == "application/problem+json"
        assert held.headers["retry-after"] == "5"
        with engine.connect() as conn:
            assert conn.execute(text("SELECT count(*) FROM reminders")).scalar_one() == 0
        served = httpx.post(f"{base}/v1/reminders", headers=token, json=CREATE, timeout=30)
        assert served.status_code == 201, served.text
    finally:
        proc.terminate()
        try:
            proc.wait(60)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(10)
    assert "Traceback" not in log_path.read_text(), log_path.read_text()[-3000:]
