"""Shared fixtures: one real PostgreSQL database per test process, cloned from a
template made once from the migrations.

CI sets DATABASE_URL to the local server; with DATABASE_URL unset (a laptop), an
embedded PostgreSQL (pgserver) is started in a temporary directory. The run's first
process (the pytest-xdist controller, or pytest itself without workers) creates
`reminders_template_<random>` and migrates it to head; each test process then gets its
own `reminders_test_<random>`, a copy of it (CREATE DATABASE ... TEMPLATE: milliseconds,
where migrating takes seconds; procrastinate's and River's test suites do the same).
Every database the run made is dropped at its end.
"""

from __future__ import annotations

import json
import os
import tempfile
from collections.abc import Callable, Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import Engine, text

from reminder_core.db.embedded import embedded_database_url
from reminder_core.db.migrate import upgrade
from reminder_core.db.session import make_engine, normalize_url
from reminder_core.settings import Settings
from reminder_core.tokens import mint_token
from tests.support.moto import moto_server
from tests.support.providers import close_test_providers
from tests.support.workloads import create_template, drop_database, fresh_database

TABLES = ("delivery_log", "outbox", "queue_messages", "reminders")
# Emptied before each test too, but not counted by table_counts (whose answers tests
# compare whole).
OTHER_TABLES = (
    "suppressions",
    "webhook_events",
    "worker_heartbeats",
    "rate_limits",
    "live_reminder_bounds",
    "calendar_feeds",
    "webhook_endpoints",
    "cell_assignments",
    "cell_loads",
    "cell_moves",
)
JWT_SECRET = "test-secret-" + "x" * 40


@pytest.fixture(autouse=True)
def _close_test_providers() -> Iterator[None]:
    """Close the Resend providers a test made (tests.support.providers)."""
    yield
    close_test_providers()


#: Where the controller leaves the server's URL and the template's name for its workers
#: (pytest-xdist's `workerinput`), and for itself.
ADMIN_URL_KEY = "reminders_admin_url"
TEMPLATE_KEY = "reminders_template"


def _server_url() -> str:
    url = os.environ.get("DATABASE_URL")
    if url:
        return normalize_url(url)
    # Not under pytest's tmp_path: run as root, pgserver runs PostgreSQL as another user
    # and needs every parent directory traversable, which pytest resets to 0700.
    return embedded_database_url(Path(tempfile.mkdtemp(prefix="reminders-test-pg-")))


def pytest_configure(config: pytest.Config) -> None:
    """In the run's first process only: the server, and the migrated template database."""
    if hasattr(config, "workerinput"):
        return  # an xdist worker: its controller made them
    admin = _server_url()
    template = create_template(admin, "reminders_template", upgrade)
    config.stash[_RUN] = {ADMIN_URL_KEY: admin, TEMPLATE_KEY: template}


@pytest.hookimpl(optionalhook=True)
def pytest_configure_node(node: Any) -> None:
    """pytest-xdist, in the controller: hand each worker the server and the template."""
    node.workerinput.update(node.config.stash[_RUN])


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """In each xdist worker: order the collection so that every worker's first share
    starts with its part of the long-running tests.

    `--dist worksteal` (the Makefile's) hands worker k the k-th contiguous slice of the
    collection and lets idle workers steal the tail of a busy one's queue. Collected in
    path order, every e2e test (seconds to a minute each) would sit in the first slice and
    run late, one after another. Dealt round-robin (e2e, then integration, then unit),
    each slice starts with about 1/N of them and ends with quick unit tests to steal.
    Every worker computes the same order, as xdist requires.
    """
    worker = getattr(config, "workerinput", None)
    if worker is None:
        return
    workers = int(worker.get("workercount", 1))
    if workers < 2:
        return
    kinds = ("e2e", "integration", "unit")

    def kind(item: pytest.Item) -> int:
        parts = Path(str(item.path)).parts
        return next((i for i, k in enumerate(kinds) if k in parts), len(kinds))

    ordered = sorted(items, key=kind)  # stable: path order within a kind
    slices: list[list[pytest.Item]] = [ordered[k::workers] for k in range(workers)]
    items[:] = [item for share in slices for item in share]


def pytest_unconfigure(config: pytest.Config) -> None:
    run = config.stash.get(_RUN, None)
    if run is not None:
        drop_database(run[ADMIN_URL_KEY], run[TEMPLATE_KEY])


def _run_values(config: pytest.Config) -> dict[str, str]:
    worker = getattr(config, "workerinput", None)
    return dict(worker) if worker is not None else config.stash[_RUN]


_RUN = pytest.StashKey[dict[str, str]]()


@pytest.fixture(scope="session")
def admin_url(pytestconfig: pytest.Config) -> str:
    """URL of a PostgreSQL server where the test run may create a database."""
    return _run_values(pytestconfig)[ADMIN_URL_KEY]


@pytest.fixture(scope="session")
def database_url(admin_url: str, pytestconfig: pytest.Config) -> Iterator[str]:
    """This test process's own database, a copy of the migrated template; dropped
    afterwards."""
    template = _run_values(pytestconfig)[TEMPLATE_KEY]
    with fresh_database(admin_url, "reminders_test", template=template) as (url, _):
        yield url


@pytest.fixture(scope="session")
def template_database(pytestconfig: pytest.Config) -> str:
    """The name of the run's migrated template database (`fresh_database(...,
    template=...)` copies it in a moment)."""
    return _run_values(pytestconfig)[TEMPLATE_KEY]


@pytest.fixture(scope="session")
def engine(database_url: str) -> Iterator[Engine]:
    eng = make_engine(database_url, pool_size=10, application_name="reminders-tests")
    yield eng
    eng.dispose()


@pytest.fixture(scope="session")
def moto_endpoint() -> Iterator[str]:
    """Endpoint URL of a local moto server (SQS, SES, ...) shared by the test run."""
    with moto_server() as url:
        yield url


@pytest.fixture
def db(engine: Engine) -> Engine:
    """The engine, with every table emptied before the test."""
    with engine.begin() as conn:
        conn.execute(text(f"TRUNCATE {', '.join(TABLES + OTHER_TABLES)} RESTART IDENTITY CASCADE"))
    return engine


@pytest.fixture
def settings(tmp_path: Path, database_url: str) -> Settings:
    """Settings pointing at the test database, with state in a temporary directory."""
    profiles = tmp_path / "profiles.json"
    profiles.write_text(
        json.dumps(
            {
                "alice": {"email": "alice@example.com", "timezone": "America/New_York"},
                "bob": {"email": "bob@example.com", "timezone": "Europe/Paris"},
            }
        )
    )
    return Settings(
        database_url=database_url,
        state_dir=tmp_path / "state",
        jwt_secret=JWT_SECRET,
        profiles_file=profiles,
        mail_dir=tmp_path / "mail",
    )


@pytest.fixture
def token_for(settings: Settings) -> Callable[[str], str]:
    """Mint a valid bearer token for a user id."""

    def mint(user_id: str) -> str:
        return mint_token(settings, user_id)

    return mint


def utc(*args: int) -> datetime:
    """Aware UTC datetime from (year, month, day, hour=0, minute=0, second=0)."""
    return datetime(*args, tzinfo=UTC)  # type: ignore[misc]


def table_counts(engine: Engine) -> dict[str, int]:
    """Row count of every table (for 'nothing changed' assertions)."""
    with engine.connect() as conn:
        return {t: conn.execute(text(f"SELECT count(*) FROM {t}")).scalar_one() for t in TABLES}
