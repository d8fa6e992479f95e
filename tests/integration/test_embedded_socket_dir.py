"""The embedded PostgreSQL (pgserver) under a path with a space: pgserver hands its
socket directory to pg_ctl as `-o "-k <dir>"`, which pg_ctl runs through the shell
unquoted, so `make dev` in a checkout under "my proj/" failed ("postgres: invalid
argument", trial helper-53). reminder_core.db.embedded picks pgserver's second choice
of socket directory (its runtime path) there."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

PROGRAM = """
import sys
from pathlib import Path
from sqlalchemy import create_engine, text
from reminder_core.db.embedded import embedded_database_url
url = embedded_database_url(Path(sys.argv[1]))
engine = create_engine(url)
with engine.connect() as conn:
    print(conn.execute(text("SHOW unix_socket_directories")).scalar_one())
    print(conn.execute(text("SHOW data_directory")).scalar_one())
engine.dispose()
"""


def test_the_embedded_server_starts_under_a_path_with_a_space(tmp_path: Path) -> None:
    state = tmp_path / "my proj" / ".reminders"
    env = {k: v for k, v in os.environ.items() if k != "DATABASE_URL"}
    done = subprocess.run(
        [sys.executable, "-c", PROGRAM, str(state)],
        env=env, capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr[-2000:]
    sockets, data = done.stdout.split("\n")[:2]
    assert data == str((state / "pgdata").resolve())
    assert " " not in sockets
    assert sockets != data
    # The server stopped with its last user (pgserver's cleanup): no postmaster left.
    assert not (state / "pgdata" / "postmaster.pid").exists()
