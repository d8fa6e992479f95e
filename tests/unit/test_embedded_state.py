"""Commands that need the database, run where there is no state (DATABASE_URL unset, no
embedded database under STATE_DIR): refused with status 2 (docs/cli.md: a bad setting)
and nothing created. Trial helper-53: `reminders status` (and `dlq list`, `suppressions
list`) started a fresh 40 MB embedded PostgreSQL in the directory, then said that
"the database (DATABASE_URL)" lacked the schema, and `reminders migrate` then made an
empty database in the wrong directory."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest


@pytest.mark.parametrize(
    "command", [["status"], ["dlq", "list"], ["suppressions", "list"]], ids=" ".join
)
def test_a_database_command_where_there_is_no_state_is_refused(
    tmp_path: Path, command: list[str]
) -> None:
    env = {k: v for k, v in os.environ.items() if k not in ("DATABASE_URL", "STATE_DIR")}
    done = subprocess.run(
        [sys.executable, "-m", "reminders", *command],
        env=env, cwd=tmp_path, capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    assert done.returncode == 2, done.stdout + done.stderr
    assert "holds no embedded database: run `reminders dev` once" in done.stderr
    assert os.listdir(tmp_path) == []
