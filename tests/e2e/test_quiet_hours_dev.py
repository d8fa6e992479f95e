"""Quiet hours through real workloads (issue 17, "How we will check it"): `reminders dev`
runs the API, coordinator, sender and maintenance; a user whose profile (written by
`reminders users add --quiet-hours`) has a window around now gets a reminder due inside
it: no email until the window ends, then exactly one, and the delivery history shows the
due, held and sent instants.

The window is whole minutes (HH:MM) in UTC: from the current minute to two minutes
later, so the hold ends 60-120 s after the test starts.
"""

from __future__ import annotations

import subprocess
import time
from datetime import UTC, datetime, timedelta

import httpx
import pytest

from tests.e2e.test_dev import (
    DevProcess,
    create,
    dev,  # noqa: F401 (fixture)
    dev_database_url,  # noqa: F401 (fixture)
    due_in,
    eml_path,
    reminders_command,
    wait_ready,
)

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(240)]

USER = "night-owl"
SEND_MARGIN_S = 15.0  # the held message comes back at the window's end; a poll or two


def run_cli(dev: DevProcess, *args: str) -> str:  # noqa: F811
    done = subprocess.run(
        [*reminders_command(), *args], cwd=dev.workdir, env=dev.env, capture_output=True,
        text=True, timeout=30, check=False,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    return done.stdout


def test_held_in_quiet_hours_then_sent_once(dev: DevProcess) -> None:  # noqa: F811
    client = httpx.Client(base_url=dev.base_url, timeout=10.0, trust_env=False)
    try:
        wait_ready(dev, client)
        start = datetime.now(UTC).replace(second=0, microsecond=0)
        end = start + timedelta(minutes=2)
        run_cli(dev, "users", "add", USER, "--email", "owl@example.com", "--tz", "UTC",
                "--quiet-hours", f"{start:%H:%M}-{end:%H:%M}")  # fmt: skip
        client.headers["Authorization"] = "Bearer " + run_cli(dev, "token", "--user", USER).strip()

        due = due_in(3)
        assert due < end
        reminder = create(client, "Feed the owl", due)
        path = eml_path(dev.mail_dir, reminder["id"], due)

        # Well past its due time, inside the window: nothing sent, nothing recorded.
        time.sleep(max(0.0, (due - datetime.now(UTC)).total_seconds()) + 5)
        assert not path.exists()
        history = client.get(f"/v1/reminders/{reminder['id']}/deliveries")
        assert history.status_code == 200, history.text
        assert history.json()["items"] == []
        assert client.get(f"/v1/reminders/{reminder['id']}").json()["status"] == "claimed"

        # Not before the window ends.
        while datetime.now(UTC) < end - timedelta(seconds=1):
            assert not path.exists(), "sent inside the quiet hours"
            assert dev.proc.poll() is None, dev.output()
            time.sleep(0.5)
        deadline = end + timedelta(seconds=SEND_MARGIN_S)
        while not path.exists():
            assert datetime.now(UTC) < deadline, f"not sent after the window:\n{dev.output()}"
            time.sleep(0.2)

        # Settled: one email, and the history holds due, held and sent instants.
        settle = time.monotonic() + 10
        while True:
            items = client.get(f"/v1/reminders/{reminder['id']}/deliveries").json()["items"]
            if (items and items[0]["status"] == "sent") or time.monotonic() > settle:
                break
            time.sleep(0.1)
        (item,) = items
        assert item["status"] == "sent"
        assert datetime.fromisoformat(item["run_time_utc"]) == due
        assert datetime.fromisoformat(item["held_until"]) == end
        assert datetime.fromisoformat(item["sent_at"]) >= end
        assert sorted(p.name for p in dev.mail_dir.glob(f"{reminder['id']}-*.eml")) == [path.name]
    finally:
        client.close()
