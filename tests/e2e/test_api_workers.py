"""`reminders api --workers N` (issue 15): N processes serve one socket, every one of them
answers, /metrics sums all of them, and SIGTERM stops them all with exit status 0."""

from __future__ import annotations

import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import BinaryIO

import httpx
import pytest
from prometheus_client.mmap_dict import MmapedDict
from sqlalchemy import Engine, text

from bench.support import process_tree
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

SECRET = "e2e-" + "k" * 48
CREATES = 60


@pytest.fixture
def e2e_db(admin_url: str) -> Iterator[tuple[str, Engine]]:
    with fresh_database(admin_url, "reminders_e2e") as url_and_engine:
        yield url_and_engine


def _requests_counted(base: str) -> float:
    total = 0.0
    for line in httpx.get(f"{base}/metrics", timeout=10).text.splitlines():
        if line.startswith('reminders_api_requests_total{method="POST",route="/v1/reminders"'):
            total += float(line.rsplit(" ", 1)[1])
    return total


def start_two_workers(
    url: str, tmp_path: Path, **directories: Path
) -> tuple[subprocess.Popen[bytes], str, BinaryIO]:
    """Migrate the database at `url`, then start `reminders api --workers 2` on a free
    port, with each of `directories` (an environment variable naming a directory, made
    here) and no PROMETHEUS_MULTIPROC_DIR unless one of them is it; returns the process,
    its base URL and its log file (tmp_path/api.log, the caller closes it)."""
    env = api_env(url, tmp_path, SECRET)
    env.pop("PROMETHEUS_MULTIPROC_DIR", None)
    for variable, directory in directories.items():
        directory.mkdir()
        env[variable] = str(directory)
    migrate(env)
    port = free_port()
    log = (tmp_path / "api.log").open("wb")
    proc = subprocess.Popen(
        [sys.executable, "-m", "reminders", "api", "--port", str(port), "--workers", "2"],
        env=env, stdout=log, stderr=subprocess.STDOUT, start_new_session=True,
    )  # fmt: skip
    return proc, f"http://127.0.0.1:{port}", log


@contextmanager
def two_workers(
    url: str, tmp_path: Path, **directories: Path
) -> Iterator[tuple[subprocess.Popen[bytes], str]]:
    """`start_two_workers`, answering; yields (process, base URL), and kills the process
    if it is still running at the end."""
    proc, base, log = start_two_workers(url, tmp_path, **directories)
    try:
        wait_until(lambda: api_ready(base), 60, "the API")
        yield proc, base
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait(10)
        log.close()


def stopped(proc: subprocess.Popen[bytes], tmp_path: Path) -> None:
    """SIGTERM `proc`; it must exit 0 within 60 s (its log's end otherwise)."""
    proc.send_signal(signal.SIGTERM)
    assert proc.wait(timeout=60) == 0, (tmp_path / "api.log").read_text()[-3000:]


def test_two_worker_processes_serve_count_and_stop_together(
    e2e_db: tuple[str, Engine], tmp_path: Path
) -> None:
    url, engine = e2e_db
    metrics_dir = tmp_path / "metrics"
    with two_workers(url, tmp_path, PROMETHEUS_MULTIPROC_DIR=metrics_dir) as (proc, base):
        wait_until(
            lambda: len([p for p in process_tree(proc.pid) if _is_worker(p)]) == 2,
            60,
            "two worker processes",
        )
        workers = [p for p in process_tree(proc.pid) if _is_worker(p)]
        token = {"Authorization": f"Bearer {mint_token(Settings(jwt_secret=SECRET), 'erin')}"}
        for i in range(CREATES):
            # A new connection each time: the kernel spreads them over the workers.
            with httpx.Client(base_url=base, headers=token, timeout=10) as c:
                r = c.post(
                    "/v1/reminders",
                    json={"title": f"t{i}", "start_local": "2031-01-01T09:00", "timezone": "UTC"},
                )
            assert r.status_code == 201, r.text
        with engine.connect() as conn:
            assert conn.execute(text("SELECT count(*) FROM reminders")).scalar_one() == CREATES
        # Both workers served creates (each process writes its own samples file) ...
        per_worker = {pid: _creates_in(metrics_dir, pid) for pid in workers}
        assert all(n > 0 for n in per_worker.values()), per_worker
        assert sum(per_worker.values()) == CREATES
        # ... and /metrics sums every worker's, whichever worker answers it.
        assert _requests_counted(base) == CREATES
        assert _requests_counted(base) == CREATES

        stopped(proc, tmp_path)
        deadline = time.monotonic() + 10
        while any(Path(f"/proc/{p}").exists() for p in workers) and time.monotonic() < deadline:
            time.sleep(0.1)
        assert not [p for p in workers if Path(f"/proc/{p}").exists()]


def test_the_metrics_directory_the_api_made_is_removed_when_it_stops(
    e2e_db: tuple[str, Engine], tmp_path: Path
) -> None:
    # Without PROMETHEUS_MULTIPROC_DIR, `--workers 2` makes one in $TMPDIR for its
    # workers' samples; one was left behind at every start (43 in /tmp in one session).
    url, _ = e2e_db
    scratch = tmp_path / "tmp"
    with two_workers(url, tmp_path, TMPDIR=scratch) as (proc, _):
        made = list(scratch.glob("reminders-metrics-*"))
        assert len(made) == 1, made  # the workers' samples are there while it runs
        stopped(proc, tmp_path)
        assert not made[0].exists()


def _creates_in(metrics_dir: Path, pid: int) -> float:
    """POST /v1/reminders requests counted by process `pid` (its counter_<pid>.db file of
    prometheus_client's multiprocess mode)."""
    path = metrics_dir / f"counter_{pid}.db"
    if not path.exists():
        return 0.0
    total = 0.0
    for key, value, *_ in MmapedDict.read_all_values_from_file(str(path)):
        if '"reminders_api_requests_total"' in key and '"/v1/reminders"' in key and '"POST"' in key:
            total += value
    return total


def _is_worker(pid: int) -> bool:
    """A uvicorn worker: a `multiprocessing.spawn` child (not the resource tracker)."""
    try:
        cmdline = Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ")
    except OSError:
        return False
    return b"spawn_main" in cmdline
