"""Fixtures of the browser tests: a `reminders dev` and Debian's Chromium driven by
Playwright (headless, --no-sandbox, executable_path: Playwright's own browser download is
never used)."""

from __future__ import annotations

import os
import subprocess
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import httpx
import pytest
from playwright.sync_api import Browser, Page, ViewportSize, expect, sync_playwright

from reminder_core.db.session import normalize_url
from tests.e2e.test_dev import DEMO_USER, DevProcess, reminders_command, running_dev, wait_ready
from tests.support.workloads import fresh_database

CHROMIUM = Path("/usr/bin/chromium")
REPO_ROOT = Path(__file__).resolve().parents[2]
SCREENSHOTS = REPO_ROOT / "docs" / "screenshots"
#: Short loops, so that a reminder due in a few seconds is sent within about a second.
FAST_LOOPS = {"COORDINATOR_POLL_INTERVAL_S": "0.2", "SENDER_POLL_INTERVAL_S": "0.2"}
WIDE: ViewportSize = {"width": 1280, "height": 900}
NARROW: ViewportSize = {"width": 390, "height": 844}  # a phone


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line(
        "markers", "browser: drives Chromium against the console of a real `reminders dev`"
    )


@dataclass
class Console:
    """A running `reminders dev` and a token of its demo user."""

    dev: DevProcess
    token: str

    @property
    def url(self) -> str:
        return f"{self.dev.base_url}/console"


@pytest.fixture
def console(tmp_path: Path) -> Iterator[Console]:
    """`reminders dev` on a fresh database of DATABASE_URL's server (else its embedded
    PostgreSQL), with the token `reminders token --user demo` prints."""
    admin_url = os.environ.get("DATABASE_URL")
    if admin_url:
        with (
            fresh_database(normalize_url(admin_url), "reminders_browser") as (url, _),
            running_dev(tmp_path, url, FAST_LOOPS) as dev,
        ):
            yield _signed(dev)
    else:
        with running_dev(tmp_path, None, FAST_LOOPS) as dev:
            yield _signed(dev)


def _signed(dev: DevProcess) -> Console:
    with httpx.Client(base_url=dev.base_url, timeout=10.0, trust_env=False) as client:
        wait_ready(dev, client)
    return Console(dev=dev, token=mint(dev, "--user", DEMO_USER))


def mint(dev: DevProcess, *args: str) -> str:
    """The token `reminders token ARGS` prints in the dev's directory and environment."""
    command = [*reminders_command(), "token", *args]
    printed = subprocess.check_output(command, cwd=dev.workdir, env=dev.env, timeout=30)
    return printed.decode().strip()


@pytest.fixture
def browser() -> Iterator[Browser]:
    """Debian's Chromium, headless (Playwright's own browser download is not used)."""
    if not CHROMIUM.exists():
        pytest.skip(f"{CHROMIUM} is absent (apt-get install chromium; .ci/run installs it)")
    with sync_playwright() as playwright:
        chromium = playwright.chromium.launch(
            executable_path=str(CHROMIUM), headless=True, args=["--no-sandbox"]
        )
        try:
            yield chromium
        finally:
            chromium.close()


@contextmanager
def console_tab(
    browser: Browser,
    console: Console,
    viewport: ViewportSize = WIDE,
    *,
    signed_in: bool = True,
    token: str | None = None,
) -> Iterator[Page]:
    """A tab on the console in a fresh browser context (its own sessionStorage), signed in
    with `token` (default: the demo user's) unless `signed_in` is false. On a normal exit,
    checks what the page did meanwhile: it requested nothing from another origin (no CDN,
    docs/console.md), and logged no script error or Content-Security-Policy refusal (the
    API's 4xx answers Chromium logs as "Failed to load resource" are expected)."""
    context = browser.new_context(viewport=viewport)
    try:
        tab = context.new_page()
        requested: list[str] = []
        errors: list[str] = []
        tab.on("request", lambda request: requested.append(request.url))
        tab.on("pageerror", lambda error: errors.append(str(error)))
        tab.on(
            "console",
            lambda message: (
                errors.append(message.text)
                if message.type == "error"
                and not message.text.startswith("Failed to load resource")
                else None
            ),
        )
        response = tab.goto(console.url)
        assert response is not None
        assert response.status == 200
        policy = response.headers["content-security-policy"]
        assert "script-src 'self'" in policy, policy
        assert "connect-src 'self'" in policy, policy
        expect(tab.get_by_role("heading", name="Sign in")).to_be_visible()
        if signed_in:
            sign_in(tab, token or console.token)
        yield tab
        assert [u for u in requested if not u.startswith(console.dev.base_url + "/")] == []
        assert errors == []
    finally:
        context.close()


def sign_in(tab: Page, token: str) -> None:
    """Paste `token` on the console's sign-in screen."""
    tab.get_by_label("Token").fill(token)
    tab.get_by_role("button", name="Sign in").click()
    expect(tab.get_by_role("heading", name="Your reminders")).to_be_visible()


def screenshot(tab: Page, name: str) -> None:
    """Save the whole page as <name>.png: into docs/screenshots/ (which docs/console.md
    and the README show) when CONSOLE_SCREENSHOTS=1, else into a temporary directory, so
    that a test run does not rewrite tracked files."""
    directory = SCREENSHOTS if os.environ.get("CONSOLE_SCREENSHOTS") == "1" else _SCRATCH
    directory.mkdir(parents=True, exist_ok=True)
    tab.screenshot(path=str(directory / f"{name}.png"), full_page=True)


_SCRATCH = Path(tempfile.gettempdir()) / "reminders-console-screenshots"
