"""`reminders dev` run to its refusal (tests of what it checks before it starts)."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
from pathlib import Path


def reminders_dev(
    tmp_path: Path, *arguments: str, **variables: str
) -> subprocess.CompletedProcess[str]:
    """`reminders dev` on a free port (unless `arguments` name one) with these
    environment variables (no DATABASE_URL: it would stop before the embedded database
    starts, or fail the test if it did)."""
    if "--port" not in arguments:
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            arguments = (*arguments, "--port", str(s.getsockname()[1]))
    env = {k: v for k, v in os.environ.items() if k != "DATABASE_URL"}
    env |= {"LOG_FORMAT": "console", **variables}
    return subprocess.run(
        [sys.executable, "-m", "reminders", "dev", *arguments],
        env=env, capture_output=True, text=True, timeout=60, cwd=tmp_path,
    )  # fmt: skip
