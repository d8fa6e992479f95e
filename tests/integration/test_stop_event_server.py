"""The API's uvicorn server under the process's own stop handlers (reminder_api.serving).

uvicorn's own signal capture held every signal while it served and raised them again,
back to back and last first, once it had shut down (uvicorn/server.py,
`capture_signals`). Under `install_stop_handlers` a user's real second Ctrl-C then came
back as "the same signal twice within REPEAT_WINDOW_S": one soft stop, status 0 after
the whole grace instead of 130; and SIGTERM then SIGINT was logged as a "second
SIGTERM" (trial helper-54). A real server in a child process, a slow request in
flight so that the graceful shutdown lasts, and real signals.
"""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import httpx
import pytest

PROGRAM = """
import asyncio, logging, sys, threading
import uvicorn
from fastapi import FastAPI
from reminder_api.serving import StopEventServer
from reminder_core.worker.signals import install_stop_handlers

logging.basicConfig(level=logging.INFO, stream=sys.stderr, format="%(levelname)s %(message)s")
app = FastAPI()

@app.get("/slow")
async def slow() -> dict[str, str]:
    await asyncio.sleep(20)
    return {"status": "late"}

@app.get("/ok")
async def ok() -> dict[str, str]:
    return {"status": "ok"}

stop = threading.Event()
install_stop_handlers(stop)
config = uvicorn.Config(app, host="127.0.0.1", port=int(sys.argv[1]), log_config=None,
                        timeout_graceful_shutdown=15)
server = StopEventServer(config, stop)
server.run()
print("returned", flush=True)
"""


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def serving(tmp_path: Path) -> tuple[subprocess.Popen[str], str, threading.Thread]:
    """The program, answering, with one slow request in flight (its graceful shutdown
    then waits for it, up to 15 s)."""
    port = free_port()
    proc = subprocess.Popen(
        [sys.executable, "-c", PROGRAM, str(port)],
        stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, cwd=tmp_path,
    )  # fmt: skip
    base = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + 30
    while True:
        try:
            if httpx.get(f"{base}/ok", timeout=1.0, trust_env=False).status_code == 200:
                break
        except httpx.TransportError:
            pass
        assert proc.poll() is None, proc.communicate()[0]
        assert time.monotonic() < deadline, "the server never answered"
        time.sleep(0.05)

    def slow() -> None:
        try:
            httpx.get(f"{base}/slow", timeout=30.0, trust_env=False)
        except httpx.TransportError:
            pass  # the hard stop drops it

    request = threading.Thread(target=slow, daemon=True)
    request.start()
    time.sleep(0.3)  # the request reached the server
    return proc, base, request


@contextmanager
def killed_at_exit(proc: subprocess.Popen[str]) -> Iterator[None]:
    """Kill `proc` on leaving, if it still runs (a failed assertion inside)."""
    try:
        yield
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()


@pytest.mark.parametrize(
    ("first", "second"),
    [(signal.SIGINT, signal.SIGINT), (signal.SIGTERM, signal.SIGINT)],
    ids=["INT then INT", "TERM then INT"],
)
def test_a_second_signal_during_the_graceful_shutdown_stops_at_once(
    tmp_path: Path, first: signal.Signals, second: signal.Signals
) -> None:
    proc, _, request = serving(tmp_path)
    with killed_at_exit(proc):
        os.kill(proc.pid, first)
        time.sleep(1.0)  # over REPEAT_WINDOW_S: a second request, not the same one
        assert proc.poll() is None  # still draining the slow request
        stopped_at = time.monotonic()
        os.kill(proc.pid, second)
        output, _ = proc.communicate(timeout=10)
    assert proc.returncode == 130, output
    assert time.monotonic() - stopped_at < 5  # not after the graceful shutdown's 15 s
    assert "returned" not in output
    assert f"second {second.name}: stopping now" in output, output
    request.join(5)


def test_one_signal_is_a_graceful_shutdown(tmp_path: Path) -> None:
    # The first signal stops the server as uvicorn's own handler did (should_exit): the
    # request in flight is waited for up to the graceful timeout, then run() returns.
    proc, base, request = serving(tmp_path)
    with killed_at_exit(proc):
        os.kill(proc.pid, signal.SIGTERM)
        time.sleep(0.5)
        with pytest.raises(httpx.TransportError):  # no longer accepting connections
            httpx.get(f"{base}/ok", timeout=1.0, trust_env=False)
        output, _ = proc.communicate(timeout=30)
    assert proc.returncode == 0, output
    assert "returned" in output
    assert "SIGTERM received: finishing current work, then stopping" in output
    request.join(5)
