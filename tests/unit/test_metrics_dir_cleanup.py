"""`reminders api --workers N`'s metrics directory after its supervisor was killed with
SIGKILL (trial helper-57: `/tmp/reminders-metrics-*` left after each, six 64 KiB files):
the next supervisor removes the directories of supervisors that are gone."""

from __future__ import annotations

import os
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest

from reminder_api import main as api_main


def test_the_directories_of_supervisors_gone_are_removed(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    gone = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"],
                          capture_output=True, text=True, check=True)  # fmt: skip
    dead_pid = int(gone.stdout)
    dead = tmp_path / f"reminders-metrics-{dead_pid}-abc123"
    alive = tmp_path / f"reminders-metrics-{os.getpid()}-def456"
    unnamed = tmp_path / "reminders-metrics-k2j4h5"  # an older version's: no pid, kept
    other = tmp_path / f"other-{dead_pid}-x"
    for directory in (dead, alive, unnamed, other):
        directory.mkdir()
        (directory / "counter_1.db").write_bytes(b"\0" * 64)
    link = tmp_path / f"reminders-metrics-{dead_pid}-link"
    link.symlink_to(other)

    api_main._remove_orphaned_metrics_dirs()

    assert not dead.exists()
    assert alive.is_dir()
    assert unnamed.is_dir()
    assert (other / "counter_1.db").exists()  # a link is not followed
    assert link.is_symlink()
