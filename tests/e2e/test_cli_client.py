"""End to end: `reminders api` as a real process on a scratch database, driven by the
`reminders` CLI as subprocesses (create, list, show, edit, pause, resume, cancel, preview,
login, logout, users, token) and by `reminders.client.ReminderClient` (issue 16).

Expected values come from docs/api.md and docs/cli.md: statuses (a new reminder is
`pending` at version 1, every user change bumps the version, pause gives `paused`, resume
`pending`, cancel `cancelled` and cancelling twice is fine), the problem statuses (404 an
unknown id, 422 an invalid field or a user without a profile, 401 a bad token, 412 a stale
If-Match, 409 an idempotency key reused with another body), the CLI's exit statuses (0, 1
an API refusal, 2 a usage error or no token, 3 no answer), and the tz database's offsets:
Europe/Paris is UTC+1 in January; New York springs forward on 2027-03-14, where the
docs/api.md example has 02:30 fire at 03:30 EDT (RFC 5545 §3.3.5).
"""

from __future__ import annotations

import json
import os
import shutil
import stat
import subprocess
import sys
import tempfile
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import httpx
import pytest

from reminders.client import (
    UNSET,
    ApiError,
    ApiUnreachable,
    ReminderClient,
    Schedule,
)
from tests.support.workloads import (
    HOST,
    child_env,
    free_port,
    fresh_database,
    migrate,
    wait_until,
)

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(300)]

JWT_SECRET = "cli-e2e-" + "s" * 40
ALICE = "alice"
ALICE_EMAIL = "alice@example.com"
NOBODY = "nobody-has-this-profile"
#: 2030-01-15 09:00 in Paris (CET, UTC+1) is 08:00 UTC.
PARIS_START = "2030-01-15T09:00:00"
PARIS_START_UTC = datetime(2030, 1, 15, 8, tzinfo=UTC)


def reminders_script() -> list[str]:
    """The installed `reminders` script next to this interpreter, else `python -m`."""
    script = Path(sys.executable).with_name("reminders")
    return [str(script)] if script.exists() else [sys.executable, "-m", "reminders"]


@dataclass
class Api:
    """A running `reminders api` and what the CLI needs to talk to it."""

    url: str
    workdir: Path  # the CLI's cwd: its ./.reminders is the API's STATE_DIR
    env: dict[str, str]  # the CLI's environment (no token, XDG_CONFIG_HOME of its own)
    log: Path

    def run(
        self, *args: str, token: str | None = None, stdin: str | None = None, **env: str
    ) -> subprocess.CompletedProcess[str]:
        """`reminders ARGS` against this API; REMINDERS_TOKEN=`token` when given."""
        values = {**self.env, **env}
        if token is not None:
            values["REMINDERS_TOKEN"] = token
        return subprocess.run(
            [*reminders_script(), *args],
            cwd=self.workdir,
            env=values,
            input=stdin,
            capture_output=True,
            text=True,
            timeout=60,
            check=False,
        )

    def ok(self, *args: str, token: str | None = None) -> Any:
        """`reminders ARGS --json`; must exit 0; its stdout parsed."""
        done = self.run(*args, "--json", token=token)
        assert done.returncode == 0, done.stderr
        return json.loads(done.stdout)

    def token(self, user: str) -> str:
        done = self.run("token", "--user", user)
        assert done.returncode == 0, done.stderr
        return done.stdout.strip()


@pytest.fixture(scope="module")
def live_api(admin_url: str) -> Iterator[Api]:
    """`reminders api` on a migrated scratch database, state in a fresh directory, with
    alice's profile added by `reminders users add`; killed at teardown."""
    workdir = Path(tempfile.mkdtemp(prefix="reminders-cli-e2e-"))
    config_home = workdir / "config"
    with fresh_database(admin_url, "reminders_cli_e2e") as (database_url, _):
        server_env = child_env(
            {
                "DATABASE_URL": database_url,
                "JWT_SECRET": JWT_SECRET,
                "STATE_DIR": str(workdir / ".reminders"),
            }
        )
        for name in ("REMINDERS_TOKEN", "REMINDERS_API_URL", "XDG_CONFIG_HOME"):
            server_env.pop(name, None)
        migrate(server_env)
        port = free_port()
        log = workdir / "api.log"
        with log.open("wb") as out:
            proc = subprocess.Popen(
                [*reminders_script(), "api", "--host", HOST, "--port", str(port)],
                cwd=workdir, env=server_env, stdout=out, stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL, start_new_session=True,
            )  # fmt: skip
        url = f"http://{HOST}:{port}"
        api = Api(
            url=url,
            workdir=workdir,
            env={**server_env, "REMINDERS_API_URL": url, "XDG_CONFIG_HOME": str(config_home)},
            log=log,
        )
        try:
            wait_until(lambda: _ready(proc, url, log), 60, "reminders api /readyz")
            added = api.run("users", "add", ALICE, "--email", ALICE_EMAIL, "--tz", "Europe/Paris")
            assert added.returncode == 0, added.stderr
            yield api
        finally:
            if proc.poll() is None:
                os.killpg(proc.pid, 9)
            proc.wait(30)
            shutil.rmtree(workdir, ignore_errors=True)


def _ready(proc: subprocess.Popen[bytes], url: str, log: Path) -> bool:
    if proc.poll() is not None:
        raise AssertionError(f"reminders api exited {proc.returncode}:\n{log.read_text()}")
    try:
        return httpx.get(f"{url}/readyz", timeout=2, trust_env=False).status_code == 200
    except httpx.HTTPError:
        return False


@pytest.fixture(scope="module")
def alice_token(live_api: Api) -> str:
    return live_api.token(ALICE)


@pytest.fixture
def client(live_api: Api, alice_token: str) -> Iterator[ReminderClient]:
    with ReminderClient(live_api.url, alice_token) as c:
        yield c


# --------------------------------------------------------------------------- users, token


def test_users_add_list_and_refusals(live_api: Api) -> None:
    bob = f"bob-{uuid.uuid4().hex[:6]}"
    added = live_api.run("users", "add", bob, "--email", "bob@example.org", "--tz", "Asia/Tokyo")
    assert added.returncode == 0, added.stderr

    listed = live_api.ok("users", "list")
    assert listed[bob] == {"email": "bob@example.org", "timezone": "Asia/Tokyo"}
    assert listed[ALICE] == {"email": ALICE_EMAIL, "timezone": "Europe/Paris"}
    table = live_api.run("users", "list")
    assert table.returncode == 0
    assert bob in table.stdout
    assert "Asia/Tokyo" in table.stdout

    again = live_api.run("users", "add", bob, "--email", "other@example.org", "--tz", "UTC")
    assert again.returncode == 1
    assert "already has a profile" in again.stderr
    assert live_api.ok("users", "list")[bob]["email"] == "bob@example.org"  # unchanged

    bad_zone = live_api.run(
        "users", "add", "carol", "--email", "c@example.org", "--tz", "Mars/Base"
    )
    assert bad_zone.returncode == 2
    assert "Mars/Base" in bad_zone.stderr
    for address in ("not-an-address", "Carol <c@example.org>", "c@", "c d@example.org"):
        bad_email = live_api.run("users", "add", "carol", "--email", address, "--tz", "UTC")
        assert bad_email.returncode == 2, address
        assert "--email" in bad_email.stderr
    assert "carol" not in live_api.ok("users", "list")


def test_token_warns_about_a_user_without_profile(live_api: Api) -> None:
    missing = live_api.run("token", "--user", NOBODY)
    assert missing.returncode == 0, missing.stderr
    assert missing.stdout.strip().count(".") == 2  # still a JWT (header.payload.signature)
    assert "warning:" in missing.stderr
    assert "no profile" in missing.stderr
    assert f"reminders users add {NOBODY}" in missing.stderr

    known = live_api.run("token", "--user", ALICE)
    assert known.returncode == 0
    assert known.stderr == ""

    # What the warning announces: every create with that token is refused with 422.
    refused = live_api.run(
        "create", "Nobody gets this", "--at", PARIS_START, "--tz", "UTC",
        token=missing.stdout.strip(),
    )  # fmt: skip
    assert refused.returncode == 1
    assert "422" in refused.stderr
    assert "user:" in refused.stderr  # the field error names `user`


# --------------------------------------------------------------------------- CLI commands


def test_cli_lifecycle_with_json_output(live_api: Api, alice_token: str) -> None:
    title = f"Water the plants {uuid.uuid4().hex[:6]}"
    created = live_api.ok(
        "create", title, "--at", PARIS_START, "--tz", "Europe/Paris",
        "--rrule", "FREQ=DAILY", "--body", "Both balconies.", token=alice_token,
    )  # fmt: skip
    rid = created["id"]
    assert created["status"] == "pending"
    assert created["version"] == 1
    assert created["title"] == title
    assert created["body"] == "Both balconies."
    assert created["rrule"] == "FREQ=DAILY"
    assert datetime.fromisoformat(created["next_run_utc"]) == PARIS_START_UTC

    listed = live_api.ok("list", token=alice_token)
    assert rid in [r["id"] for r in listed["items"]]
    assert "next_cursor" in listed
    assert rid in [
        r["id"] for r in live_api.ok("list", "--status", "pending", token=alice_token)["items"]
    ]
    assert rid not in [
        r["id"] for r in live_api.ok("list", "--status", "paused", token=alice_token)["items"]
    ]

    shown = live_api.ok("show", rid, token=alice_token)
    assert shown == created
    text = live_api.run("show", rid, token=alice_token)
    assert text.returncode == 0
    assert title in text.stdout
    assert "pending" in text.stdout

    edited = live_api.ok(
        "edit", rid, "--title", "Water the ferns", "--if-version", "1", token=alice_token
    )
    assert edited["title"] == "Water the ferns"
    assert edited["version"] == 2
    stale = live_api.run(
        "edit", rid, "--title", "Lost update", "--if-version", "1", token=alice_token
    )
    assert stale.returncode == 1
    assert "412" in stale.stderr
    assert live_api.ok("show", rid, token=alice_token)["title"] == "Water the ferns"

    occurrences = live_api.ok("preview", rid, "--limit", "3", token=alice_token)
    assert occurrences["timezone"] == "Europe/Paris"
    assert [datetime.fromisoformat(o["run_time_utc"]) for o in occurrences["items"]] == [
        PARIS_START_UTC.replace(day=15 + i) for i in range(3)
    ]

    paused = live_api.ok("pause", rid, token=alice_token)
    assert paused["status"] == "paused"
    assert paused["version"] == 3
    assert rid in [
        r["id"] for r in live_api.ok("list", "--status", "paused", token=alice_token)["items"]
    ]
    resumed = live_api.ok("resume", rid, token=alice_token)
    assert resumed["status"] == "pending"

    cancelled = live_api.ok("cancel", rid, token=alice_token)
    assert cancelled["status"] == "cancelled"
    assert live_api.ok("cancel", rid, token=alice_token)["status"] == "cancelled"  # twice: fine
    assert live_api.ok("preview", rid, token=alice_token)["items"] == []  # cancelled: none


def test_cli_preview_of_an_unsaved_schedule_flags_the_dst_shift(
    live_api: Api, alice_token: str
) -> None:
    # docs/api.md's example: 02:30 daily in New York from 2027-03-13; on 2027-03-14 02:30
    # does not exist and fires at 03:30 EDT (shift, the default).
    preview = live_api.ok(
        "preview", "--at", "2027-03-13T02:30", "--tz", "America/New_York",
        "--rrule", "FREQ=DAILY;COUNT=3", "--from", "2027-01-01T00:00:00Z", token=alice_token,
    )  # fmt: skip
    items = preview["items"]
    assert [o["local"] for o in items] == [
        "2027-03-13T02:30:00-05:00",
        "2027-03-14T03:30:00-04:00",
        "2027-03-15T02:30:00-04:00",
    ]
    assert [o["shifted"] for o in items] == [False, True, False]
    text = live_api.run(
        "preview", "--at", "2027-03-13T02:30", "--tz", "America/New_York",
        "--rrule", "FREQ=DAILY;COUNT=3", "--from", "2027-01-01T00:00:00Z", token=alice_token,
    )  # fmt: skip
    assert text.returncode == 0
    assert "shifted" in text.stdout
    # With `--dst skip` the 02:30 that does not exist is dropped and not counted toward
    # COUNT (RFC 5545 §3.3.10, docs/api.md): three sends on the 13th, 15th and 16th.
    skipping = live_api.ok(
        "preview", "--at", "2027-03-13T02:30", "--tz", "America/New_York", "--dst", "skip",
        "--rrule", "FREQ=DAILY;COUNT=3", "--from", "2027-01-01T00:00:00Z", token=alice_token,
    )  # fmt: skip
    sent = [o["local"] for o in skipping["items"] if not o["skipped"]]
    assert sent == [
        "2027-03-13T02:30:00-05:00",
        "2027-03-15T02:30:00-04:00",
        "2027-03-16T02:30:00-04:00",
    ]
    assert all(o["run_time_utc"] is None for o in skipping["items"] if o["skipped"])
    bad_policy = live_api.run(
        "preview", "--at", "2027-03-13T02:30", "--dst", "sideways", token=alice_token
    )
    assert bad_policy.returncode == 2
    assert "--dst 'sideways'" in bad_policy.stderr
    usage = live_api.run("preview", token=alice_token)  # neither an id nor --at
    assert usage.returncode == 2


def test_cli_idempotent_create(live_api: Api, alice_token: str) -> None:
    key = f"cli-{uuid.uuid4()}"
    args = ("create", "Once only", "--at", PARIS_START, "--idempotency-key", key)
    first = live_api.run(*args, "--json", token=alice_token)
    second = live_api.run(*args, "--json", token=alice_token)
    assert first.returncode == 0, first.stderr
    assert second.returncode == 0, second.stderr
    assert json.loads(first.stdout)["id"] == json.loads(second.stdout)["id"]
    assert "replayed" in second.stderr
    assert "replayed" not in first.stderr


def test_cli_refusals_and_their_exit_statuses(live_api: Api, alice_token: str) -> None:
    missing = live_api.run("show", str(uuid.uuid4()), token=alice_token)
    assert missing.returncode == 1
    assert missing.stderr.startswith("error: 404 Not found")

    invalid = live_api.run(
        "create", "Bad rule", "--at", PARIS_START, "--rrule", "FREQ=SOMETIMES", token=alice_token
    )
    assert invalid.returncode == 1
    assert "422" in invalid.stderr
    assert "  rrule: " in invalid.stderr  # the field error, on its own line

    bad_token = live_api.run("list", token="not.a.token")
    assert bad_token.returncode == 1
    assert "401 Unauthorized" in bad_token.stderr
    assert "reminders login" in bad_token.stderr

    no_token = live_api.run("list")
    assert no_token.returncode == 2
    assert "no token" in no_token.stderr

    nobody_listens = live_api.run(
        "list", "--api-url", f"http://{HOST}:{free_port()}", token=alice_token
    )
    assert nobody_listens.returncode == 3
    assert "cannot reach the API" in nobody_listens.stderr

    usage = live_api.run(
        "edit", str(uuid.uuid4()), "--rrule", "FREQ=DAILY", "--one-time", token=alice_token
    )
    assert usage.returncode == 2
    for out in (missing, invalid, bad_token, no_token, nobody_listens):
        assert "Traceback" not in out.stderr


def test_login_saves_the_token_privately_and_logout_removes_it(
    live_api: Api, alice_token: str, tmp_path: Path
) -> None:
    config = {"XDG_CONFIG_HOME": str(tmp_path / "xdg")}
    saved = tmp_path / "xdg" / "reminders" / "credentials.json"

    refused = live_api.run("login", stdin="not.a.token\n", **config)
    assert refused.returncode == 1
    assert "401" in refused.stderr
    assert not saved.exists()

    done = live_api.run("login", stdin=alice_token + "\n", **config)
    assert done.returncode == 0, done.stderr
    assert stat.S_IMODE(saved.stat().st_mode) == 0o600
    assert json.loads(saved.read_text())["token"] == alice_token

    # Neither REMINDERS_TOKEN nor --api-url: both come from the saved file.
    env = {**config, "REMINDERS_API_URL": ""}
    listed = live_api.run("list", "--json", **env)
    assert listed.returncode == 0, listed.stderr
    assert isinstance(json.loads(listed.stdout)["items"], list)

    out = live_api.run("logout", **config)
    assert out.returncode == 0
    assert not saved.exists()
    after = live_api.run("list", **env)
    assert after.returncode == 2
    assert "no token" in after.stderr


# --------------------------------------------------------------------------- the client


def test_client_round_trip_and_pagination(client: ReminderClient) -> None:
    created = [
        client.create(f"Page {i}", Schedule(PARIS_START, timezone="Europe/Paris")).reminder
        for i in range(3)
    ]
    assert all(r.status == "pending" and r.version == 1 for r in created)
    assert created[0].next_run_utc == PARIS_START_UTC

    assert client.get(created[1].id) == created[1]
    first = client.list(limit=2)
    assert [r.id for r in first.items] == [created[2].id, created[1].id]  # newest first
    assert first.next_cursor is not None
    every = [r.id for r in client.iter_all(page_size=2)]
    assert every[:3] == [r.id for r in reversed(created)]
    assert len(every) == len(set(every))

    changed = client.update(
        created[0].id, if_match=1, title="Renamed", body=None, rrule="FREQ=WEEKLY"
    )
    assert (changed.title, changed.body, changed.rrule, changed.version) == (
        "Renamed",
        None,
        "FREQ=WEEKLY",
        2,
    )
    one_time = client.update(created[0].id, rrule=None, title=UNSET)
    assert one_time.rrule is None
    assert one_time.title == "Renamed"
    assert client.pause(created[0].id).status == "paused"
    assert client.resume(created[0].id).status == "pending"
    assert client.cancel(created[0].id, if_match=one_time.version + 2).status == "cancelled"


def test_client_raises_typed_problems(client: ReminderClient, live_api: Api) -> None:
    with pytest.raises(ApiError) as not_found:
        client.get(uuid.uuid4())
    assert (not_found.value.status, not_found.value.title) == (404, "Not found")

    with pytest.raises(ApiError) as invalid:
        client.create("Bad", Schedule(PARIS_START, timezone="Mars/Base"))
    assert invalid.value.status == 422
    assert [e.field for e in invalid.value.errors] == ["timezone"]

    r = client.create("Stale", Schedule(PARIS_START)).reminder
    client.update(r.id, title="First writer")
    with pytest.raises(ApiError) as stale:
        client.update(r.id, if_match=r.version, title="Second writer")
    assert stale.value.status == 412

    key = f"client-{uuid.uuid4()}"
    first = client.create("Keyed", Schedule(PARIS_START), idempotency_key=key)
    replay = client.create("Keyed", Schedule(PARIS_START), idempotency_key=key)
    assert (first.replayed, replay.replayed, replay.reminder.id) == (False, True, first.reminder.id)
    with pytest.raises(ApiError) as conflict:
        client.create("Keyed, other body", Schedule(PARIS_START), idempotency_key=key)
    assert conflict.value.status == 409

    client.cancel(r.id)
    with pytest.raises(ApiError) as finished:
        client.pause(r.id)
    assert finished.value.status == 409

    with ReminderClient(live_api.url, "not.a.token") as bad, pytest.raises(ApiError) as denied:
        bad.list()
    assert denied.value.status == 401

    with ReminderClient(f"http://{HOST}:{free_port()}", "t", timeout_s=2) as gone:
        with pytest.raises(ApiUnreachable):
            gone.list()


def test_client_preview(client: ReminderClient) -> None:
    schedule = Schedule("2027-03-13T02:30", timezone="America/New_York", rrule="FREQ=DAILY;COUNT=3")
    occurrences = client.preview(schedule, from_utc=datetime(2027, 1, 1, tzinfo=UTC))
    assert occurrences.timezone == "America/New_York"
    assert [o.run_time_utc for o in occurrences.items] == [
        datetime(2027, 3, 13, 7, 30, tzinfo=UTC),  # 02:30 EST (UTC-5)
        datetime(2027, 3, 14, 7, 30, tzinfo=UTC),  # 02:30 does not exist: 03:30 EDT (UTC-4)
        datetime(2027, 3, 15, 6, 30, tzinfo=UTC),  # 02:30 EDT
    ]
    assert [o.shifted for o in occurrences.items] == [False, True, False]
