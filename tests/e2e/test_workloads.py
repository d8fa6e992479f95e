"""End to end with every workload in its own process (issues 2 and 3): `reminders
migrate`, `api`, `coordinator`, `sweeper` and `sender` against one database.

A recurring reminder due every 3 seconds (FREQ=SECONDLY;INTERVAL=3, allowed by lowering
MIN_RECURRENCE_SPACING_S for the test) produces successive emails with successive
run_time_utc; then the coordinator is stopped (SIGTERM, which must exit 0) for several
occurrences, and when it comes back the default misfire policy `latest` sends one
catch-up email and records each older occurrence as `missed` (docs/design.md,
"Missed runs").
"""

from __future__ import annotations

import itertools
import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path

import httpx
import pytest
from sqlalchemy import Engine, text

from reminder_core.settings import Settings
from reminder_core.tokens import mint_token
from tests.e2e.test_dev import free_port
from tests.integration.helpers import run_status
from tests.support.workloads import fresh_database

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(180)]

SECRET = "e2e-" + "k" * 48
PERIOD_S = 3


@pytest.fixture
def workdir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("workloads")
    (path / "profiles.json").write_text(
        '{"carol": {"email": "carol@example.com", "timezone": "UTC"}}'
    )
    return path


@pytest.fixture
def e2e_db(admin_url: str) -> Iterator[tuple[str, Engine]]:
    with fresh_database(admin_url, "reminders_e2e") as url_and_engine:
        yield url_and_engine


class Processes:
    def __init__(self, env: dict[str, str], logs: Path) -> None:
        self.env, self.logs, self.procs = env, logs, {}  # type: ignore[var-annotated]

    def start(self, name: str, *args: str) -> subprocess.Popen[bytes]:
        log = (self.logs / f"{name}.log").open("ab")
        proc = subprocess.Popen(
            [sys.executable, "-m", "reminders", *args],
            env=self.env, stdout=log, stderr=subprocess.STDOUT, start_new_session=True,
        )  # fmt: skip
        self.procs[name] = proc
        return proc

    def stop(self, name: str, timeout: float = 30) -> int:
        proc = self.procs.pop(name)
        proc.send_signal(signal.SIGTERM)
        return proc.wait(timeout)

    def kill_all(self) -> None:
        for proc in self.procs.values():
            if proc.poll() is None:
                os.killpg(proc.pid, signal.SIGKILL)
                proc.wait(10)


def wait_for(predicate, timeout: float, what: str) -> None:  # type: ignore[no-untyped-def]
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():
            return
        time.sleep(0.2)
    raise AssertionError(f"timed out waiting for {what}")


def deliveries(engine: Engine, rid: str) -> list[tuple[datetime, str]]:
    with engine.connect() as conn:
        rows = conn.execute(
            text(
                "SELECT run_time_utc, status FROM delivery_log WHERE reminder_id = :r"
                " ORDER BY run_time_utc"
            ),
            {"r": rid},
        ).all()
    return [(r.run_time_utc, r.status) for r in rows]


def test_separate_workloads_deliver_a_recurring_reminder_and_catch_up_once(
    workdir: Path, e2e_db: tuple[str, Engine]
) -> None:
    url, engine = e2e_db
    settings_vars = {name.upper() for name in Settings.model_fields}
    env = {k: v for k, v in os.environ.items() if k.upper() not in settings_vars}
    env.update(
        DATABASE_URL=url,
        JWT_SECRET=SECRET,
        STATE_DIR=str(workdir / "state"),
        PROFILES_FILE=str(workdir / "profiles.json"),
        MAIL_DIR=str(workdir / "mail"),
        MIN_RECURRENCE_SPACING_S="1",
        COORDINATOR_POLL_INTERVAL_S="0.2",
        SENDER_POLL_INTERVAL_S="0.2",
        SWEEPER_POLL_INTERVAL_S="1",
    )
    procs = Processes(env, workdir)
    try:
        assert subprocess.run(
            [sys.executable, "-m", "reminders", "migrate"], env=env, timeout=120,
            capture_output=True,
        ).returncode == 0  # fmt: skip
        port = free_port()
        procs.start("api", "api", "--port", str(port))
        for name in ("coordinator", "sweeper", "sender"):
            procs.start(name, name)
        base = f"http://127.0.0.1:{port}"
        wait_for(lambda: _ready(base), 60, "the API")

        token = mint_token(Settings(jwt_secret=SECRET), "carol")
        start = (datetime.now(UTC) + timedelta(seconds=3)).replace(microsecond=0)
        created = httpx.post(
            f"{base}/v1/reminders",
            headers={"Authorization": f"Bearer {token}"},
            json={
                "title": "Breathe",
                "start_local": start.replace(tzinfo=None).isoformat(),
                "timezone": "UTC",
                "rrule": f"FREQ=SECONDLY;INTERVAL={PERIOD_S}",
            },
            timeout=10,
        )
        assert created.status_code == 201, created.text
        rid = created.json()["id"]
        assert created.json()["next_run_utc"] == start.isoformat().replace("+00:00", "Z")

        # Successive emails with successive run_time_utc, PERIOD_S apart.
        # A row is `sending` from before the provider call until its outcome is flushed:
        # wait for the first three to be recorded, not merely begun.
        wait_for(
            lambda: [s for _, s in deliveries(engine, rid)[:3]] == ["sent"] * 3,
            30,
            "three deliveries recorded sent",
        )
        first = deliveries(engine, rid)[:3]
        assert [s for _, s in first] == ["sent"] * 3
        assert [t for t, _ in first] == [start + timedelta(seconds=PERIOD_S * i) for i in range(3)]
        mails = sorted(p.name for p in (workdir / "mail").glob("*.eml"))
        assert mails[:3] == [f"{rid}-{t:%Y%m%dT%H%M%SZ}.eml" for t, _ in first]

        # Stop the coordinator for several occurrences.
        assert procs.stop("coordinator") == 0
        # Its process marked its heartbeat row stopped on the way out; `reminders status`
        # names it, and the maintenance workload this test never started (issue 16).
        code, checks = run_status(url, workdir / "state")
        assert code == 1
        assert checks["workers_coordinator"]["value"] == 0
        assert " stopped " in checks["workers_coordinator"]["detail"]
        assert checks["workers_maintenance"]["detail"] == "never seen"
        for role in ("sender", "outbox_sweeper"):
            assert (checks[f"workers_{role}"]["state"], checks[f"workers_{role}"]["value"]) == (
                "ok",
                1,
            ), checks[f"workers_{role}"]
        # Let anything already claimed be sent: wait until nothing new arrives for 1.5 s
        # (a fixed 1 s was too short on a loaded 2-core machine).
        before = deliveries(engine, rid)
        settle_by = time.monotonic() + 20
        while time.monotonic() < settle_by:
            time.sleep(1.5)
            now_seen = deliveries(engine, rid)
            if now_seen == before:
                break
            before = now_seen
        time.sleep(PERIOD_S * 4)
        assert deliveries(engine, rid) == before  # nothing is claimed while it is down
        procs.start("coordinator", "coordinator")
        wait_for(lambda: len(deliveries(engine, rid)) > len(before), 30, "the catch-up")
        time.sleep(1)
        # Sample between two sends: an occurrence begun but not yet recorded is `sending`.
        wait_for(lambda: deliveries(engine, rid)[-1][1] != "sending", 10, "a recorded send")
        after = deliveries(engine, rid)
        new = after[len(before) :]
        statuses = [s for _, s in new]
        # One catch-up email for the latest due occurrence, the older ones missed (at
        # least 3: four periods passed, less the one that may have been claimed before
        # the stop). Later on-time occurrences may follow, each sent.
        catch_up = statuses.index("sent")
        assert catch_up >= 3
        assert statuses[:catch_up] == ["missed"] * catch_up
        assert set(statuses[catch_up:]) == {"sent"}
        times = [t for t, _ in after]
        assert times == sorted(times)
        assert all((b - a).total_seconds() == PERIOD_S for a, b in itertools.pairwise(times))
        assert len(list((workdir / "mail").glob("*.eml"))) == statuses.count("sent") + len(
            [s for _, s in before if s == "sent"]
        )

        for name in ("api", "coordinator", "sweeper", "sender"):
            assert procs.stop(name) == 0, (workdir / f"{name}.log").read_text()[-2000:]
    finally:
        procs.kill_all()


def _ready(base: str) -> bool:
    try:
        return httpx.get(f"{base}/readyz", timeout=2).status_code == 200
    except httpx.HTTPError:
        return False
