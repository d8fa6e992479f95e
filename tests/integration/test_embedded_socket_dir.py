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

import pytest

from reminder_core.db.embedded import embedded_database_url
from reminder_core.errors import ConfigurationError

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


@pytest.mark.parametrize("directory", ["my proj", "it's"])
def test_the_embedded_server_starts_under_a_path_with_a_space(
    tmp_path: Path, directory: str
) -> None:
    state = tmp_path / directory / ".reminders"
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


@pytest.mark.parametrize("character", ["$", "`", '"', "\\"])
def test_a_path_the_shell_would_expand_is_refused_before_anything_is_made(
    tmp_path: Path, character: str
) -> None:
    # pg_ctl starts postgres through the shell as `-D "<pgdata>"` (src/bin/pg_ctl/pg_ctl.c,
    # start_postmaster): inside double quotes the shell still expands these.
    state = tmp_path / f"a{character}b"
    with pytest.raises(ConfigurationError, match="pg_ctl passes its path through the shell"):
        embedded_database_url(state)
    assert os.listdir(tmp_path) == []
