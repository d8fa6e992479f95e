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

import contextlib
import json
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import psutil
import pytest

from tests.e2e.test_dev import Postmaster, free_port, process_alive, stop_embedded_server

START_TIMEOUT_S = 120.0


@pytest.fixture
def workdir() -> Iterator[Path]:
    """A directory outside pytest's tmp_path (see tests/e2e/test_dev.py, `running_dev`:
    pgserver, run as root, needs every parent of the data directory open to its user);
    at teardown, every process working in it is killed and its embedded server stopped."""
    path = Path(tempfile.mkdtemp(prefix="reminders-signals-"))
    try:
        yield path
    finally:
        # Whatever a test left running in it, orphaned workers included (their cwd).
        for process in psutil.process_iter(["cwd"]):
            if (process.info["cwd"] or "").startswith(str(path)):
                with contextlib.suppress(psutil.Error):
                    process.kill()
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


def start(
    workdir: Path, *arguments: str, python_options: tuple[str, ...] = ()
) -> tuple[subprocess.Popen[bytes], Path]:
    """`reminders <arguments>` in `workdir`, in a process group of its own (as a shell
    starts a foreground job), its output in `workdir/log`."""
    log_path = workdir / "log"
    with log_path.open("wb") as log:
        proc = subprocess.Popen(
            [sys.executable, *python_options, "-m", "reminders", *arguments],
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


def until_caught(proc: subprocess.Popen[bytes], log_path: Path) -> None:
    """Wait until `proc` catches SIGTERM (it then holds SIGINT too)."""
    deadline = time.monotonic() + START_TIMEOUT_S
    while not catches(proc.pid, signal.SIGTERM):
        assert proc.poll() is None, log_path.read_text(errors="replace")
        assert time.monotonic() < deadline
        time.sleep(0.001)


def catches(pid: int, signum: int) -> bool:
    """Whether process `pid` has a handler for `signum` (proc(5): SigCgt, a hex mask)."""
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("SigCgt:"):
            return bool(int(line.split()[1], 16) >> (signum - 1) & 1)
    return False


def test_a_signal_while_dev_loads_its_modules_is_a_stop_during_startup(workdir: Path) -> None:
    # Trial helper-55: the first second or two of `reminders dev` (imports, before its
    # handlers) ended with status 143 and nothing said. The CLI installs them before it
    # imports the rest: SIGTERM as soon as it is caught (proc(5) SigCgt).
    proc, log_path = start(workdir, "dev", "--port", str(free_port()))
    until_caught(proc, log_path)
    os.kill(proc.pid, signal.SIGTERM)

    code, output = finished(proc, log_path)

    assert code == 0, output
    assert "stopped during startup" in output, output
    assert "Traceback" not in output, output
    assert sorted(os.listdir(workdir)) == ["log"]  # no state written


WORKLOADS = [
    ("dev", "--port", "8765"),
    ("api", "--workers", "1"),
    ("api", "--workers", "2"),
    ("coordinator",),
    ("sender",),
    ("sweeper",),
    ("maintenance",),
]


@pytest.mark.parametrize("signum", [signal.SIGTERM, signal.SIGINT], ids=["TERM", "INT"])
@pytest.mark.parametrize("arguments", WORKLOADS, ids=[" ".join(w) for w in WORKLOADS])
def test_a_signal_before_the_cli_is_imported_is_held_for_the_workload(
    workdir: Path, arguments: tuple[str, ...], signum: signal.Signals
) -> None:
    # Trial helper-56: a workload's first 0.2-1 s (typer, the CLI, its own modules) came
    # before its stop handlers: SIGTERM then ended it with status 143, SIGINT with a
    # KeyboardInterrupt traceback. The entry point holds them from its first line
    # (hold_early_stop_signals). `-X importtime` reports each import as it completes: the
    # signal is sent once the process catches SIGTERM and before typer is imported.
    proc, log_path = start(workdir, *arguments, python_options=("-X", "importtime"))
    until_caught(proc, log_path)
    imported_then = log_path.read_text(errors="replace")
    os.kill(proc.pid, signum)

    code, output = finished(proc, log_path)

    assert not re.search(r"\|\s+typer$", imported_then, re.MULTILINE), (
        "SIGTERM was caught only after the CLI's imports"
    )
    assert code == 0, output
    assert "Traceback" not in output, output
    assert "KeyboardInterrupt" not in output, output
    assert "stopped during startup" in output or "stopped while starting" in output, output
    assert sorted(os.listdir(workdir)) == ["log"]  # nothing written, no server started


def test_a_second_signal_while_held_exits_at_once(workdir: Path) -> None:
    # Two requests before the handlers (a TERM, then a Ctrl-C): a hard stop, status 130,
    # as once the handlers run; nothing has started to wait for.
    proc, log_path = start(workdir, "coordinator", python_options=("-X", "importtime"))
    until_caught(proc, log_path)
    os.kill(proc.pid, signal.SIGTERM)
    os.kill(proc.pid, signal.SIGINT)

    code, output = finished(proc, log_path)

    assert code == 130, output
    assert sorted(os.listdir(workdir)) == ["log"]


def test_signals_while_the_interpreter_finalizes_do_not_kill_a_clean_stop(workdir: Path) -> None:
    # Trial helper-57: after its last log line a process spends up to half a second in
    # the exit hooks (the embedded server's stop) and the interpreter's finalization,
    # which puts Python-handled signals back to their default action: a SIGTERM then
    # killed a process that had stopped cleanly (status 143, 2 of 2 with a TERM every
    # 50 ms). Every status is now one the documentation gives: 0, or 130 for a second
    # request over REPEAT_WINDOW_S after the first.
    migrated(workdir)
    proc, log_path = start(workdir, "coordinator")
    wait_for_line(proc, log_path, "running coordinator")
    while proc.poll() is None:
        with contextlib.suppress(ProcessLookupError):
            os.kill(proc.pid, signal.SIGTERM)
        time.sleep(0.05)

    code, output = finished(proc, log_path)

    assert code in (0, 130), output
    assert "Traceback" not in output, output


def test_migrate_stopped_by_sigterm_stops_the_embedded_server_it_started(workdir: Path) -> None:
    # Trial helper-57: `reminders migrate` had no handler, so SIGTERM killed it past
    # pgserver's exit hook and left the embedded server running (2 of 4). It now runs
    # under the stop handlers: the start finishes, then it stops (143, nothing migrated).
    migrated(workdir)  # made, migrated, and its server stopped again
    pgdata = workdir / ".reminders" / "pgdata"
    proc, log_path = start(workdir, "migrate")
    deadline = time.monotonic() + START_TIMEOUT_S
    while left_running(pgdata) is None and proc.poll() is None:  # this start's server
        assert time.monotonic() < deadline, log_path.read_text(errors="replace")
        time.sleep(0.005)
    os.kill(proc.pid, signal.SIGTERM)

    code, output = finished(proc, log_path)

    assert code in (0, 143), output  # 0: it had finished already
    assert "Traceback" not in output, output
    if code == 143:
        assert "stopped by a signal: not every database was migrated" in output, output
    deadline = time.monotonic() + 30
    while left_running(pgdata) is not None:
        assert time.monotonic() < deadline, f"server left running:\n{output}"
        time.sleep(0.1)


@pytest.mark.parametrize("command", [("status",), ("token", "--user", "u1")])
def test_a_ctrl_c_while_a_one_shot_command_loads_is_one_line(
    workdir: Path, command: tuple[str, ...]
) -> None:
    # Trial helper-57: a Ctrl-C in the first 100-400 ms of `migrate`, `status`, `list`
    # (imports) printed a KeyboardInterrupt traceback.
    proc, log_path = start(workdir, *command)
    until_caught(proc, log_path)  # the entry point has run
    os.kill(proc.pid, signal.SIGINT)

    code, output = finished(proc, log_path)

    assert code in (130, 2), output  # 2: it had ended already (no database, no JWT key)
    assert "Traceback" not in output, output
    if code == 130:
        assert output.strip().splitlines()[-1] == "interrupted", output


def environ(pid: int) -> dict[str, str]:
    """proc(5) environ of `pid` (as it started)."""
    pairs = Path(f"/proc/{pid}/environ").read_bytes().split(b"\0")
    return dict(p.decode(errors="replace").partition("=")[::2] for p in pairs if p)


def cmdline(pid: int) -> bytes:
    """proc(5) cmdline of `pid`, b"" once it has exited."""
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes()
    except OSError:
        return b""


def supervisor_and_workers(workdir: Path) -> tuple[subprocess.Popen[bytes], Path, int, list[int]]:
    """`reminders api --workers 2` on the embedded database (made by `migrate`), both
    workers answering: (its process, its log, the port, the workers' pids)."""
    migrated(workdir)
    (workdir / ".reminders" / "jwt_secret").write_text("a-secret-of-at-least-32-bytes-for-hs256\n")
    port = free_port()
    proc, log_path = start(workdir, "api", "--workers", "2", "--port", str(port))
    deadline = time.monotonic() + START_TIMEOUT_S
    while True:
        assert proc.poll() is None, log_path.read_text(errors="replace")
        assert time.monotonic() < deadline, log_path.read_text(errors="replace")
        workers = [  # not multiprocessing's resource tracker, its other child
            int(p) for p in Path(f"/proc/{proc.pid}/task/{proc.pid}/children").read_text().split()
            if b"spawn_main" in cmdline(int(p))
        ]  # fmt: skip
        try:
            listed = json.loads(
                (workdir / ".reminders" / "pgdata" / ".handle_pids.json").read_text()
            )
        except (FileNotFoundError, json.JSONDecodeError):
            # pgserver rewrites the list in place (truncate, then write): read between
            # the two, it is empty (a CI run); read it again.
            listed = []
        if len(workers) == 2 and set(workers) <= set(listed):  # both attached
            try:
                answer = httpx.get(f"http://127.0.0.1:{port}/healthz", timeout=2.0, trust_env=False)
                if answer.status_code == 200:
                    return proc, log_path, port, workers
            except httpx.TransportError:
                pass
        time.sleep(0.2)


def test_a_second_signal_stops_the_api_workers_at_once(workdir: Path) -> None:
    # Trial helper-55: uvicorn's supervisor queued signals and handled none while it
    # waited for its workers: a second Ctrl-C did nothing (status 0 once a slow request
    # ended). A request in flight, its body still coming, holds the graceful stop.
    proc, log_path, port, workers = supervisor_and_workers(workdir)
    metrics_dir = Path(environ(workers[0])["PROMETHEUS_MULTIPROC_DIR"])  # made for them
    assert metrics_dir.is_dir()
    # Named by the supervisor's pid: the next one removes it if it is killed with SIGKILL.
    assert metrics_dir.name.startswith(f"reminders-metrics-{proc.pid}-")
    slow = socket.create_connection(("127.0.0.1", port))
    slow.sendall(b"POST /v1/reminders HTTP/1.1\r\nHost: x\r\nContent-Length: 100\r\n\r\n{")
    time.sleep(0.3)
    try:
        os.kill(proc.pid, signal.SIGINT)
        time.sleep(1.0)  # over REPEAT_WINDOW_S
        assert proc.poll() is None  # waiting for the slow request
        os.kill(proc.pid, signal.SIGINT)
        code, output = finished(proc, log_path)
    finally:
        slow.close()
    assert code == 130, output
    assert "second SIGINT: stopping now" in output, output
    deadline = time.monotonic() + 10
    while any(process_alive(w) for w in workers):  # killed with the supervisor
        assert time.monotonic() < deadline, "a worker outlived its supervisor's hard stop"
        time.sleep(0.1)
    # Trial helper-56: the hard stop's exit skipped the removal of the directory made for
    # the workers' metrics; one was left in $TMPDIR after each.
    assert not metrics_dir.exists()


def test_workers_whose_supervisor_is_killed_stop_and_stop_the_embedded_server(
    workdir: Path,
) -> None:
    # Trial helper-55: after `kill -9` of the supervisor its workers kept serving the
    # port, and once stopped left the embedded PostgreSQL running (every user listed,
    # none alive). They now get SIGTERM when it dies (prctl PR_SET_PDEATHSIG) and release
    # the server at their app's shutdown.
    proc, _, port, workers = supervisor_and_workers(workdir)
    pgdata = workdir / ".reminders" / "pgdata"
    os.kill(proc.pid, signal.SIGKILL)
    proc.wait(timeout=10)
    deadline = time.monotonic() + 30
    while any(process_alive(w) for w in workers) or left_running(pgdata) is not None:
        assert time.monotonic() < deadline, (
            f"workers alive: {[w for w in workers if process_alive(w)]},"
            f" server: {left_running(pgdata)}"
        )
        time.sleep(0.2)
    with pytest.raises(httpx.TransportError):
        httpx.get(f"http://127.0.0.1:{port}/healthz", timeout=2.0, trust_env=False)
