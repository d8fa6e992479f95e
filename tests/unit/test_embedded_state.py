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

from reminder_core.db.embedded import embedded_database_url
from reminder_core.errors import ConfigurationError
from tests.support.dev import reminders_dev


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


# Trial helper-54: a STATE_DIR/pgdata that is a dangling symbolic link had the database
# made at the link's target (pgserver resolves the path, then mkdir makes the target);
# one that is a regular file ended in initdb's traceback.


def test_a_pgdata_behind_a_dangling_link_is_refused_and_nothing_is_made(tmp_path: Path) -> None:
    state = tmp_path / "state"
    state.mkdir()
    (state / "pgdata").symlink_to(tmp_path / "elsewhere")

    with pytest.raises(ConfigurationError) as caught:
        embedded_database_url(state)

    expected = f"{state / 'pgdata'} is a symbolic link to {tmp_path / 'elsewhere'}, which does"
    assert expected in str(caught.value)
    assert not (tmp_path / "elsewhere").exists()


def test_a_pgdata_that_is_a_file_is_refused(tmp_path: Path) -> None:
    (tmp_path / "pgdata").write_text("not a directory")

    with pytest.raises(ConfigurationError) as caught:
        embedded_database_url(tmp_path)

    assert f"{tmp_path / 'pgdata'} is not a directory" in str(caught.value)


@pytest.mark.parametrize("case", ["a shell character", "a dangling pgdata"])
def test_reminders_dev_refuses_an_unusable_embedded_database_before_writing(
    tmp_path: Path, case: str
) -> None:
    # Trial helper-54: the `$` refusal came after dev had written its JWT secret, the
    # profiles file and the mail directory.
    if case == "a shell character":
        state = tmp_path / "a$b"
        reason = "pg_ctl passes its path through the shell"
    else:
        state = tmp_path / "state"
        state.mkdir()
        (state / "pgdata").symlink_to(tmp_path / "elsewhere")
        reason = "which does not exist"
    before = sorted(os.listdir(state)) if state.exists() else None

    done = reminders_dev(tmp_path, STATE_DIR=str(state))

    output = done.stdout + done.stderr
    assert done.returncode == 2, output
    assert "cannot hold the embedded PostgreSQL" in output
    assert reason in output
    assert "Traceback" not in output
    assert (sorted(os.listdir(state)) if state.exists() else None) == before
    assert not (tmp_path / "elsewhere").exists()


def test_pgserver_commands_run_in_their_own_session_with_pg_ctls_own_wait() -> None:
    # pgserver's initdb/pg_ctl functions take subprocess.run's keyword arguments; the
    # wrapper adds a session of their own (a group signal must not reach them) and lets
    # pg_ctl wait as long as pg_ctl itself does (60 s, not pgserver's 10).
    from reminder_core.db.embedded import PG_CTL_TIMEOUT_S, _in_own_session

    calls: list[dict[str, object]] = []

    def command(args: list[str], pgdata: Path | None = None, **kwargs: object) -> str:
        calls.append({"args": args, "pgdata": pgdata, **kwargs})
        return "ok"

    wrapped = _in_own_session(command)
    assert wrapped(["start"], pgdata=Path("/d"), user="pgserver", timeout=10) == "ok"
    assert wrapped(["-w", "stop"], pgdata=Path("/d")) == "ok"
    assert calls == [
        {"args": ["start"], "pgdata": Path("/d"), "user": "pgserver",
         "timeout": PG_CTL_TIMEOUT_S, "start_new_session": True},
        {"args": ["-w", "stop"], "pgdata": Path("/d"), "start_new_session": True},
    ]  # fmt: skip
    assert PG_CTL_TIMEOUT_S == 60.0


def test_a_state_dir_with_a_name_longer_than_the_filesystem_allows_is_refused(
    tmp_path: Path,
) -> None:
    # Trial helper-55: ENAMETOOLONG ended `reminders dev`, `migrate` and the workloads
    # in a traceback (status 1). NAME_MAX is 255 bytes on Linux filesystems (pathconf).
    name = "N" * (os.pathconf(tmp_path, "PC_NAME_MAX") + 1)
    state = tmp_path / "odd" / name

    with pytest.raises(ConfigurationError, match="over the filesystem's"):
        embedded_database_url(state)
    done = reminders_dev(tmp_path, STATE_DIR=str(state))

    assert done.returncode == 2, done.stderr
    assert "Traceback" not in done.stdout + done.stderr
    assert os.listdir(tmp_path) == []


def path_of_length(base: Path, length: int) -> Path:
    """A path under `base` whose absolute form is `length` bytes, of names of at most 200."""
    path, left = base, length - len(os.fsencode(str(base)))
    while left > 0:
        take = min(200, left - 1)  # a "/" and the name
        path, left = path / ("d" * take), left - take - 1
    assert len(os.fsencode(str(path))) == length
    return path


@pytest.mark.parametrize("relative", [False, True], ids=["absolute", "relative"])
def test_a_state_dir_whose_data_directory_would_pass_path_max_is_refused(
    tmp_path: Path, relative: bool
) -> None:
    # Trial helper-56: a STATE_DIR just under PATH_MAX passed the check, and initdb then
    # failed on the longer paths PostgreSQL writes beneath it (pg_wal/archive_status/...,
    # 59 bytes with pgdata/); a relative one was measured by its relative length.
    path_max = os.pathconf(tmp_path, "PC_PATH_MAX")
    state = path_of_length(tmp_path, path_max - 40)  # the directory alone would fit
    shown = str(state.relative_to(tmp_path)) if relative else str(state)

    done = reminders_dev(tmp_path, STATE_DIR=shown)

    assert done.returncode == 2, done.stdout + done.stderr
    assert "paths written under it" in done.stdout + done.stderr
    assert "Traceback" not in done.stdout + done.stderr
    assert os.listdir(tmp_path) == []


@pytest.mark.parametrize("content", ["", "[12, 3", "\0\0"])
def test_an_unreadable_list_of_the_servers_users_is_started_afresh(
    tmp_path: Path, content: str, caplog: pytest.LogCaptureFixture
) -> None:
    # Trial helper-58: a worker interrupted by a Ctrl-C storm while pgserver rewrote
    # .handle_pids.json (it truncates first) left it empty; every later start of every
    # workload then failed with "Expecting value" (exit 2), for ever.
    from reminder_core.db.embedded import _forget_dead_handles

    handles = tmp_path / ".handle_pids.json"
    handles.write_text(content)

    _forget_dead_handles(tmp_path)

    assert handles.read_text() == "[]"
    assert "is unreadable" in caplog.text
    assert sorted(p.name for p in tmp_path.iterdir()) == [".handle_pids.json"]


def test_dead_users_are_forgotten_and_live_ones_kept(tmp_path: Path) -> None:
    from reminder_core.db.embedded import _forget_dead_handles

    gone = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"],
                          capture_output=True, text=True, check=True)  # fmt: skip
    handles = tmp_path / ".handle_pids.json"
    handles.write_text(f"[{os.getpid()}, {int(gone.stdout)}]")

    _forget_dead_handles(tmp_path)

    assert handles.read_text() == f"[{os.getpid()}]"
