"""The embedded PostgreSQL through signals and odd paths (trial helper-54), with the real
`reminders` commands in child processes, DATABASE_URL unset.

- A terminal's Ctrl-C and timeout(1) signal the whole process group; while the embedded
  server starts, initdb and pg_ctl were in it and died with the process: a
  CalledProcessError traceback, status 1, and (7 of 7 runs) a postmaster left running.
- `reminders api --workers N` left the server running: its workers die by the SIGTERM
  uvicorn re-raises after their shutdown, past pgserver's exit hook, and stayed listed
  as its users.
- A STATE_DIR with `+` or `%41` in its path: pgserver's URL carries the socket directory
  raw, SQLAlchemy decoded it into another path, and the command failed (status 3)
  blaming DATABASE_URL.
"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from tests.e2e.test_dev import Postmaster, free_port, process_alive, stop_embedded_server

START_TIMEOUT_S = 120.0


@pytest.fixture
def workdir() -> Iterator[Path]:
    """A directory outside pytest's tmp_path (see tests/e2e/test_dev.py, `running_dev`:
    pgserver, run as root, needs every parent of the data directory open to its user);
    any embedded server left in it is stopped at teardown."""
    path = Path(tempfile.mkdtemp(prefix="reminders-signals-"))
    try:
        yield path
    finally:
        stop_embedded_server(path / ".reminders" / "pgdata")
        shutil.rmtree(path, ignore_errors=True)


def embedded_env() -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k not in ("DATABASE_URL", "STATE_DIR")}
    return env | {"LOG_FORMAT": "console", "PYTHONUNBUFFERED": "1"}


def migrated(workdir: Path) -> None:
    """`reminders migrate` in `workdir`: its embedded database made and migrated."""
    done = subprocess.run(
        [sys.executable, "-m", "reminders", "migrate"],
        cwd=workdir, env=embedded_env(), capture_output=True, text=True,
        timeout=START_TIMEOUT_S,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr


def start(workdir: Path, *arguments: str) -> tuple[subprocess.Popen[bytes], Path]:
    """`reminders <arguments>` in `workdir`, in a process group of its own (as a shell
    starts a foreground job), its output in `workdir/log`."""
    log_path = workdir / "log"
    with log_path.open("wb") as log:
        proc = subprocess.Popen(
            [sys.executable, "-m", "reminders", *arguments],
            cwd=workdir, env=embedded_env(), stdin=subprocess.DEVNULL,
            stdout=log, stderr=subprocess.STDOUT, start_new_session=True,
        )  # fmt: skip
    return proc, log_path


def wait_for_line(proc: subprocess.Popen[bytes], log_path: Path, text: str) -> None:
    deadline = time.monotonic() + START_TIMEOUT_S
    while text not in log_path.read_text(errors="replace"):
        assert proc.poll() is None, log_path.read_text(errors="replace")
        assert time.monotonic() < deadline, f"no {text!r} in:\n{log_path.read_text()}"
        time.sleep(0.005)


def left_running(pgdata: Path) -> int | None:
    """The pid of a postmaster still running on `pgdata`, else None."""
    postmaster = Postmaster.read(pgdata)
    if postmaster is None or not process_alive(postmaster.pid):
        return None
    return postmaster.pid


def finished(proc: subprocess.Popen[bytes], log_path: Path) -> tuple[int, str]:
    try:
        code = proc.wait(timeout=START_TIMEOUT_S)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()
        pytest.fail(f"still running:\n{log_path.read_text(errors='replace')}")
    return code, log_path.read_text(errors="replace")


@pytest.mark.parametrize("state", ["new (initdb)", "made before (pg_ctl start)"])
def test_a_signal_to_the_process_group_while_the_embedded_server_starts(
    workdir: Path, state: str
) -> None:
    # As timeout(1) does (coreutils src/timeout.c, `cleanup`): SIGTERM to the child,
    # then to its process group; 30 ms after the start was logged, as in the trial.
    pgdata = workdir / ".reminders" / "pgdata"
    if state.startswith("made before"):
        migrated(workdir)
        assert left_running(pgdata) is None  # stopped with its last user
    proc, log_path = start(workdir, "dev", "--port", str(free_port()))
    wait_for_line(proc, log_path, "starting embedded PostgreSQL")
    time.sleep(0.03)
    os.kill(proc.pid, signal.SIGTERM)
    os.killpg(proc.pid, signal.SIGTERM)

    code, output = finished(proc, log_path)

    assert code == 0, output
    assert "Traceback" not in output, output
    assert "stopped during startup" in output, output
    assert left_running(pgdata) is None, f"embedded PostgreSQL left running:\n{output}"
    assert (pgdata / "PG_VERSION").is_file()  # initdb was let finish, not killed midway


def test_the_api_with_workers_stops_the_embedded_server_it_started(workdir: Path) -> None:
    migrated(workdir)
    (workdir / ".reminders" / "jwt_secret").write_text("a-secret-of-at-least-32-bytes-for-hs256\n")
    port = free_port()
    proc, log_path = start(workdir, "api", "--workers", "2", "--port", str(port))
    deadline = time.monotonic() + START_TIMEOUT_S
    ready = 0
    while ready < 2:  # two answers: both workers need not have started, one did
        assert proc.poll() is None, log_path.read_text(errors="replace")
        assert time.monotonic() < deadline, log_path.read_text(errors="replace")
        try:
            answer = httpx.get(f"http://127.0.0.1:{port}/readyz", timeout=2.0, trust_env=False)
            ready += answer.status_code == 200
        except httpx.TransportError:
            pass
        time.sleep(0.2)
    pgdata = workdir / ".reminders" / "pgdata"
    assert left_running(pgdata) is not None

    os.kill(proc.pid, signal.SIGTERM)
    code, output = finished(proc, log_path)

    assert code == 0, output
    assert left_running(pgdata) is None, f"embedded PostgreSQL left running:\n{output}"


@pytest.mark.parametrize("name", ["a+b", "a%41b", "a%2Fb"])
def test_a_state_dir_with_url_characters_in_its_path(workdir: Path, name: str) -> None:
    # `+` is a space and `%41` an "A" once a URL's query is decoded (RFC 3986 §2.1;
    # application/x-www-form-urlencoded); the URL must carry the socket directory
    # percent-encoded for the server in this very directory to be reached.
    state = workdir / name / ".reminders"
    env = embedded_env() | {"STATE_DIR": str(state)}
    try:
        for command in (["migrate"], ["dlq", "list", "--json"]):
            done = subprocess.run(
                [sys.executable, "-m", "reminders", *command],
                cwd=workdir, env=env, capture_output=True, text=True,
                timeout=START_TIMEOUT_S,
            )  # fmt: skip
            assert done.returncode == 0, done.stderr
            assert "Traceback" not in done.stderr, done.stderr
        assert done.stdout.strip() == "[]"  # the schema migrate made, in this directory
        assert (state / "pgdata" / "PG_VERSION").is_file()
        assert left_running(state / "pgdata") is None
    finally:
        stop_embedded_server(state / "pgdata")
