"""A bad configuration or an unreachable database at start: the CLI (and `python -m
<package>`) prints one `error: ...` line naming the setting and exits 2 (configuration) or
3 (dependency unavailable), never a traceback (docs/operations.md, "Exit status"). `python -m
<package> --help` prints the command's usage and exits 0.

Expected lines come from the new-user trial's report (each bad setting it tried) and the
docs/operations.md's exit statuses. Every case fails at start, so these run in seconds.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from tests.support.workloads import REPO_ROOT, child_env, free_port

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(120)]

JWT = {"JWT_SECRET": "e2e-" + "k" * 40}


def run(args: list[str], env: dict[str, str], cwd: Path) -> subprocess.CompletedProcess[str]:
    """`python -m ...` with `args`, in `cwd` (no ./.reminders there), product settings
    only from `env`."""
    return subprocess.run(
        [sys.executable, "-m", *args],
        env=child_env({"PYTHONPATH": str(REPO_ROOT), **env}),
        cwd=cwd,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )


def assert_one_error(result: subprocess.CompletedProcess[str], status: int, *needles: str) -> None:
    lines = result.stderr.strip().splitlines()
    assert result.returncode == status, result.stderr
    assert len(lines) == 1, result.stderr
    assert lines[0].startswith("error: "), lines[0]
    for needle in needles:
        assert needle in lines[0]
    assert "Traceback" not in result.stdout + result.stderr


@pytest.mark.parametrize(
    ("command", "env", "line"),
    [
        (
            ["reminders", "sender"],
            {"EMAIL_PROVIDER": "sendgrid"},
            "error: EMAIL_PROVIDER: must be one of file|resend|ses|smtp",
        ),
        (
            ["reminders", "sender"],
            {"SMTP_STARTTLS": "maybe"},
            "error: SMTP_STARTTLS: must be one of required|opportunistic|off",
        ),
        (
            ["reminders", "sender"],
            {"EMAIL_PROVIDER": "smtp", "SMTP_HOST": ""},  # empty means unset
            "error: EMAIL_PROVIDER=smtp needs SMTP_HOST",
        ),
        (
            ["reminders", "sender"],
            {"EMAIL_PROVIDER": "resend"},
            "error: EMAIL_PROVIDER=resend needs RESEND_API_KEY",
        ),
        (
            ["sender"],  # python -m sender: the same command
            {"EMAIL_PROVIDER_BACKUP": "file"},
            "error: EMAIL_PROVIDER_BACKUP must name another provider than EMAIL_PROVIDER",
        ),
    ],
    ids=["unknown-provider", "starttls", "smtp-host-empty", "resend-key", "backup-same"],
)
def test_bad_sender_settings_are_one_line_and_exit_2(
    command: list[str], env: dict[str, str], line: str, database_url: str, tmp_path: Path
) -> None:
    result = run(command, {"DATABASE_URL": database_url, **env}, tmp_path)

    assert_one_error(result, 2)
    assert result.stderr.strip() == line


@pytest.mark.parametrize(
    ("command", "env", "needles"),
    [
        (["reminders", "api"], {**JWT, "QUEUE_URL": "garbage"}, ["QUEUE_URL", "garbage"]),
        (["reminders", "api"], {**JWT, "DATABASE_URL": "mysql://x"}, ["DATABASE_URL", "mysql"]),
        (["reminders", "api"], {}, ["JWT_SECRET"]),  # no key set, none stored in cwd
        (["reminder_api"], {**JWT, "DB_POOL_SIZE": "0"}, ["error: DB_POOL_SIZE: "]),
        (["coordinator"], {"QUEUE_URL": "garbage"}, ["QUEUE_URL"]),
        # Found by a new-user trial: both were tracebacks with exit status 1.
        (["coordinator.maintenance"], {"LOG_LEVEL": "verbose"}, ["error: LOG_LEVEL: "]),
        (["reminders", "sender"], {"DATABASE_URL": "notaurl"}, ["DATABASE_URL", "not a"]),
    ],
    ids=[
        "queue-url",
        "database-url",
        "no-jwt-key",
        "python-m-api",
        "python-m-coordinator",
        "log-level",
        "database-url-not-a-url",
    ],
)
def test_bad_api_and_worker_settings_are_one_line_and_exit_2(
    command: list[str],
    env: dict[str, str],
    needles: list[str],
    database_url: str,
    tmp_path: Path,
) -> None:
    result = run(command, {"DATABASE_URL": database_url, **env}, tmp_path)

    assert_one_error(result, 2, *needles)


def test_one_line_per_bad_setting(database_url: str, tmp_path: Path) -> None:
    env = {"DATABASE_URL": database_url, "EMAIL_PROVIDER": "sendgrid", "METRICS_PORT": "x"}

    result = run(["reminders", "sender"], env, tmp_path)

    assert result.returncode == 2, result.stderr
    lines = sorted(result.stderr.strip().splitlines())
    assert [line.split(":")[:2] for line in lines] == [
        ["error", " EMAIL_PROVIDER"],
        ["error", " METRICS_PORT"],
    ]


@pytest.mark.parametrize("command", [["reminders", "migrate"], ["reminders", "dlq", "list"]])
def test_unreachable_database_is_one_line_and_exit_3(command: list[str], tmp_path: Path) -> None:
    url = f"postgresql://postgres@127.0.0.1:{free_port()}/reminders"  # nothing listens

    result = run(command, {"DATABASE_URL": url}, tmp_path)

    assert_one_error(result, 3, "DATABASE_URL")


@pytest.mark.parametrize(
    ("package", "usage"),
    [
        ("coordinator", "python -m coordinator [OPTIONS]"),
        ("coordinator.maintenance", "python -m coordinator.maintenance [OPTIONS]"),
        ("outbox_sweeper", "python -m outbox_sweeper [OPTIONS]"),
        ("sender", "python -m sender [OPTIONS]"),
        ("reminder_api", "python -m reminder_api [OPTIONS]"),
        ("reminders", "python -m reminders [OPTIONS] COMMAND [ARGS]..."),
    ],
)
def test_python_m_help_prints_usage_and_exits_0(package: str, usage: str, tmp_path: Path) -> None:
    # An unreachable database: had --help started the workload, it would not exit 0 at once.
    url = f"postgresql://postgres@127.0.0.1:{free_port()}/reminders"

    result = run([package, "--help"], {"DATABASE_URL": url}, tmp_path)

    assert result.returncode == 0, result.stderr
    assert usage in result.stdout


@pytest.mark.parametrize(
    ("command", "table"),
    [
        (["reminders", "dlq", "list"], "queue_messages"),
        (["reminders", "dlq", "replay", "--wait-s", "0"], "queue_messages"),
        (["reminders", "dlq", "purge", "--all", "--wait-s", "0"], "queue_messages"),
        (["reminders", "suppressions", "list"], "suppressions"),
    ],
)
def test_a_database_never_migrated_is_one_line_and_exit_2(
    command: list[str], table: str, admin_url: str, tmp_path: Path
) -> None:
    # The previous session's trial: `reminders dlq purge` on an empty database printed a
    # 220-line traceback. A missing table is a configuration to fix: `reminders migrate`.
    from tests.support.workloads import fresh_database

    with fresh_database(admin_url, "reminders_unmigrated") as (url, _):
        result = run(command, {"DATABASE_URL": url, **JWT}, tmp_path)
    assert_one_error(result, 2, f'relation "{table}" does not exist', "run `reminders migrate`")


@pytest.mark.parametrize(
    ("args", "needle"),
    [
        # Found by a new user's trial (each exited 0 or 3, or said "not both" for neither).
        (["preview"], "give a reminder id, or --at"),
        (["list", "--cursor", "x", "--all"], "--cursor and --all exclude each other"),
        (["list", "--api-url", "notaurl"], "is not an http(s) URL"),
        (
            ["edit", "0b6f3a52-4c1e-4e8a-9a57-2f4ad1d2c8e1", "--all-day", "--timed"],
            "give one of --all-day/--timed",
        ),
        # Trial helper-53: an empty PATCH, exit 0, nothing said.
        (["edit", "0b6f3a52-4c1e-4e8a-9a57-2f4ad1d2c8e1"], "nothing to change"),
        # Trial helper-57: an --api-url urlsplit or httpx refuses gave a traceback (exit 1).
        (["list", "--api-url", "http://[::1"], "is not an http(s) URL"),
        (["list", "--api-url", "http://127.0.0.1:abc"], "is not an http(s) URL"),
        # Trial helper-58: host names IDNA refuses, at construction or at the request.
        (["list", "--api-url", "http://a..b"], "cannot be used"),
        (["list", "--api-url", "http://xn--zz/"], "cannot be used: Invalid A-label"),
        (
            ["show", "0b6f3a52-4c1e-4e8a-9a57-2f4ad1d2c8e1", "--api-url", "http://[zz]:80"],
            "is not an http(s) URL",
        ),
    ],
)
def test_client_usage_errors_are_one_line_and_exit_2(
    args: list[str], needle: str, tmp_path: Path
) -> None:
    result = run(["reminders", *args], {"REMINDERS_TOKEN": "a.b.c"}, tmp_path)

    assert_one_error(result, 2, needle)


@pytest.mark.parametrize("command", ["show", "cancel", "pause", "resume", "edit", "preview"])
@pytest.mark.parametrize("reminder_id", ["../calendar-feed", "..", "x/../../v1/me", ""])
def test_an_id_that_is_not_a_uuid_is_refused_before_any_request(
    command: str, reminder_id: str, tmp_path: Path
) -> None:
    # Trial helper-57: the id went into the request's path as it was, and `reminders
    # cancel ../calendar-feed` sent DELETE /v1/calendar-feed: the feed was revoked (204).
    # An API URL where nothing listens: any request would exit 3, not 2.
    extra = ["--title", "x"] if command == "edit" else []
    result = run(
        ["reminders", command, reminder_id, *extra,
         "--api-url", f"http://127.0.0.1:{free_port()}"],
        {"REMINDERS_TOKEN": "a.b.c"}, tmp_path,
    )  # fmt: skip

    assert result.returncode == 2, result.stdout + result.stderr
    shown = " ".join(result.stderr.replace("│", " ").split())  # rich's box, wrapped
    assert "is not a reminder id (a UUID)" in shown, result.stderr
    assert "Traceback" not in result.stdout + result.stderr


@pytest.mark.parametrize("workers", ["1", "2"])
def test_the_api_on_a_port_in_use_says_so_and_exits_1(workers: str, tmp_path: Path) -> None:
    # Trial helper-57: uvicorn's bind failure came after the database opened, as one log
    # record, and the process exited 3 (5 of 5). Now asked before anything opens.
    import socket

    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        result = run(
            ["reminders", "api", "--workers", workers, "--port", str(port)],
            {**JWT, "LOG_FORMAT": "console"}, tmp_path,
        )  # fmt: skip

    output = result.stdout + result.stderr
    assert result.returncode == 1, output
    assert f"cannot serve on 127.0.0.1:{port}: already in use" in output, output
    assert "Traceback" not in output, output
    assert not (tmp_path / ".reminders").exists()  # nothing opened
