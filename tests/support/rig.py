"""The system under test of the kill -9 e2e tests (tests/e2e/test_chaos.py,
tests/e2e/test_crash_duplicates.py): a database, the fake provider in its own process,
the workload processes, and the checks and kill storms those tests share.

Every workload runs as `python -m reminders <workload>` against the fake
Resend-compatible provider (tests/support/fake_provider.py), with timeouts shortened
through the environment so that recovery (visibility timeout, delivery lease, claim
reaper) takes seconds. Given a Resend webhook secret, the `api` workload serves
`/v1/webhooks/resend` (WEBHOOK_RESEND_SECRET) and `provider_webhooks_to_api` makes the
fake post its Svix-signed events there, as Resend would.
"""

from __future__ import annotations

import json
import random
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Any

import httpx
from sqlalchemy import Engine

from tests.support.workloads import (
    HOST,
    FakeProviderProcess,
    Workloads,
    child_env,
    connected_applications,
    free_port,
    key_of,
    migrate,
    occurrence_rows,
    progress,
    provider_figures,
    settled_or_none,
    wait_until,
)

SECRET = "chaos-" + "s" * 48
USER = "chaos"
GRACE_S = 5.0  # SHUTDOWN_GRACE_S of every workload in these tests

#: Small timeouts so that recovery happens within seconds (brief of issue 4's checks).
FAST_RECOVERY = {
    "VISIBILITY_TIMEOUT_S": "3",
    "DELIVERY_LEASE_S": "4",
    "CLAIM_TIMEOUT_S": "6",
    "ABANDON_AFTER_S": "6",
    "MAINTENANCE_POLL_INTERVAL_S": "1",
    "SENDER_POLL_INTERVAL_S": "0.1",
    "COORDINATOR_POLL_INTERVAL_S": "0.2",
    "SWEEPER_POLL_INTERVAL_S": "0.5",
    "OUTBOX_GRACE_S": "2",
    "SHUTDOWN_GRACE_S": str(GRACE_S),
    "RETRY_BASE_S": "0.1",
    "PROVIDER_CONNECT_TIMEOUT_S": "2",
    "PROVIDER_READ_TIMEOUT_S": "10",
}

APPS = {
    "coordinator": "reminders-coordinator",
    "sweeper": "reminders-sweeper",
    "sender": "reminders-sender",
    "maintenance": "reminders-maintenance",
    "api": "reminders-api",
}


@dataclass
class Rig:
    """One system under test: a database, the fake provider, the workload processes.

    Args:
        resend_webhook_secret: a "whsec_<base64>" secret (e.g.
            tests.support.fake_provider.new_webhook_secret()) given to every workload as
            WEBHOOK_RESEND_SECRET, so that the `api` serves /v1/webhooks/resend; None:
            unset, that endpoint answers 404.
    """

    workdir: Path
    url: str
    engine: Engine
    resend_webhook_secret: str | None = None
    provider: FakeProviderProcess = field(init=False)
    procs: Workloads = field(init=False)
    api_port: int = field(init=False, default=0)

    def __post_init__(self) -> None:
        (self.workdir / "profiles.json").write_text(
            json.dumps({USER: {"email": "chaos@example.com", "timezone": "UTC"}})
        )
        self.provider = FakeProviderProcess(self.workdir)
        env = child_env(
            {
                "DATABASE_URL": self.url,
                "JWT_SECRET": SECRET,
                "STATE_DIR": str(self.workdir / "state"),
                "PROFILES_FILE": str(self.workdir / "profiles.json"),
                "MAIL_DIR": str(self.workdir / "mail"),
                "EMAIL_PROVIDER": "resend",
                "RESEND_API_URL": self.provider.url,
                "RESEND_API_KEY": "test-key",
                **FAST_RECOVERY,
            }
        )
        if self.resend_webhook_secret is not None:
            env["WEBHOOK_RESEND_SECRET"] = self.resend_webhook_secret
        self.procs = Workloads(env, self.workdir)

    def configure(self, **values: str) -> None:
        """Settings for processes started from now on."""
        self.procs.env.update(values)

    def migrate(self) -> None:
        migrate(self.procs.env)

    def start(self, *names: str) -> None:
        for name in names:
            if name.startswith("api"):
                self.api_port = free_port()
                self.procs.start(name, "api", "--port", str(self.api_port))
            else:
                self.procs.start(name)

    @property
    def api(self) -> str:
        return f"http://{HOST}:{self.api_port}"

    @property
    def resend_webhook_url(self) -> str:
        """The API's Resend webhook endpoint (served with a `resend_webhook_secret`)."""
        return f"{self.api}/v1/webhooks/resend"

    def provider_webhooks_to_api(
        self, delay_s: float, events: tuple[str, ...] = ("email.sent",)
    ) -> None:
        """Make the fake post `events` for every message it accepts from now on to the
        API's /v1/webhooks/resend, signed with this rig's secret, `delay_s` after
        acceptance. Needs the secret, and "api" started (its port is known then)."""
        assert self.resend_webhook_secret is not None, "a Rig without a webhook secret"
        assert self.api_port, "start the api first"
        self.provider.set_webhooks(
            self.resend_webhook_url, self.resend_webhook_secret, delay_s, events
        )

    def api_ready(self) -> bool:
        try:
            return httpx.get(f"{self.api}/readyz", timeout=2).status_code == 200
        except httpx.HTTPError:
            return False

    def wait_connected(self, *workloads: str, timeout: float = 60) -> None:
        """Until a session of each workload is open on the database (it runs its loop)."""
        wanted = {APPS[w] for w in workloads}
        wait_until(
            lambda: wanted <= connected_applications(self.engine) or self._crashed(),
            timeout,
            f"{', '.join(sorted(workloads))} to connect",
        )
        self._crashed()

    def _crashed(self) -> bool:
        dead = self.procs.dead()
        assert not dead, f"exited on their own: {dead}\n" + "\n".join(
            self.procs.log_tail(n) for n in dead
        )
        return False

    def wait_settled(self, expected: int, timeout: float) -> float:
        """Until every occurrence is in a terminal state and the system is idle."""
        try:
            return wait_until(settled_or_none(self.engine, expected), timeout, "the run to settle")
        except AssertionError:
            self._crashed()
            raise AssertionError(f"not settled: {progress(self.engine)}") from None

    def close(self) -> None:
        self.procs.close()
        self.provider.close()


def assert_each_sent_once(
    rig: Rig, due: dict[str, datetime], *, provider_dedupes: bool = True
) -> dict[str, Any]:
    """Every occurrence in `due`: reminder `completed`, exactly one delivery row, `sent`;
    the provider accepted exactly these keys, each at least once. With
    `provider_dedupes` (the fake's default) it kept one message per key; without (its
    `/_mode` {"dedupe": false}), one per call: a key's first plus one per `duplicates`.
    Returns the figures (tests.support.workloads.provider_figures, plus `duplicates`
    and `expected_keys`)."""
    rows = occurrence_rows(rig.engine)
    wrong = {rid: rows.get(rid) for rid in due if rows.get(rid) != ("completed", ["sent"])}
    assert not wrong, (
        f"{len(wrong)} occurrences not sent exactly once, e.g. {list(wrong.items())[:5]}"
    )
    stats = rig.provider.stats()
    figures = provider_figures(stats)
    expected = {key_of(rid, at) for rid, at in due.items()}
    assert figures["accepted_keys"] == expected, (
        f"missing {len(expected - figures['accepted_keys'])}, "
        f"unexpected {len(figures['accepted_keys'] - expected)}"
    )
    resent = 0 if provider_dedupes else stats["duplicates"]
    assert len(stats["messages"]) == len(figures["accepted_keys"]) + resent
    figures["duplicates"] = stats["duplicates"]
    figures["expected_keys"] = expected
    return figures


def report(title: str, **values: Any) -> None:
    print(f"\n[{title}] " + ", ".join(f"{k}={v}" for k, v in values.items()), flush=True)


#: A process still importing (about 2 s on a loaded machine) has nothing in flight: a
#: storm picks among those that have been in their loop for this long.
WORKING_FOR_S = 0.5


def kill_storm(
    rig: Rig,
    targets: Sequence[str],
    choose: Callable[[list[str]], str | None],
    *,
    rng: random.Random,
    gap_s: tuple[float, float],
    seconds: float,
    max_kills: int | None = None,
) -> dict[str, int]:
    """kill -9 and restart a workload of `targets` after every pause of `gap_s` (a
    uniform range, seconds), for `seconds` or until `max_kills` kills. `choose` gets the
    targets that have been in their loop for WORKING_FOR_S and names the victim (None:
    no kill this time). Returns {target: kills}, every target present."""
    kills = dict.fromkeys(targets, 0)
    started = time.monotonic()
    while time.monotonic() - started < seconds:  # bounded: the loop stops itself
        if max_kills is not None and sum(kills.values()) >= max_kills:
            break
        time.sleep(rng.uniform(*gap_s))
        victim = choose([n for n in targets if rig.procs.working_for(n) >= WORKING_FOR_S])
        if victim is not None:
            rig.procs.restart(victim)
            kills[victim] += 1
    return kills
