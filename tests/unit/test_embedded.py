"""The embedded PostgreSQL's list of users forgets processes that died without cleaning
up (new-user trial: after a second Ctrl-C the server was never stopped again)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

from reminder_core.db.embedded import _forget_dead_handles


def test_dead_pids_are_dropped_and_live_ones_kept(tmp_path: Path) -> None:
    dead = subprocess.Popen([sys.executable, "-c", "pass"])
    dead.wait()
    handles = tmp_path / ".handle_pids.json"
    handles.write_text(json.dumps([os.getpid(), dead.pid]))

    _forget_dead_handles(tmp_path)

    assert json.loads(handles.read_text()) == [os.getpid()]


def test_a_missing_list_is_left_alone_and_a_garbled_one_started_afresh(tmp_path: Path) -> None:
    _forget_dead_handles(tmp_path)  # no file: nothing to do
    assert not (tmp_path / ".handle_pids.json").exists()
    # Garbled (trial helper-58: emptied by an interrupted rewrite), it made every later
    # start fail; it is now replaced by an empty list (tests/unit/test_embedded_state.py).
    (tmp_path / ".handle_pids.json").write_text("not json")
    _forget_dead_handles(tmp_path)
    assert (tmp_path / ".handle_pids.json").read_text() == "[]"
