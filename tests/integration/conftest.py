"""Fixtures of the integration tests: a settable clock and a TestClient on the app under
test; the PostgreSQL queue and the counting provider of the sender tests."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from fastapi.testclient import TestClient
from sqlalchemy import Engine

from reminder_core.queue import PostgresQueue
from reminder_core.settings import Settings
from tests.integration.api_support import NOW, Clock, build_app
from tests.integration.cells_support import Cells, two_cells
from tests.support.sending import CountingProvider


@pytest.fixture
def clock() -> Clock:
    return Clock(NOW)


@pytest.fixture
def client(db: Engine, settings: Settings, clock: Clock) -> Iterator[TestClient]:
    with TestClient(build_app(settings, db, clock)) as c:
        yield c


@pytest.fixture
def queue(db: Engine) -> PostgresQueue:
    """The PostgreSQL queue `reminders` (maximum receive count 5)."""
    return PostgresQueue(db, name="reminders", max_receive_count=5)


@pytest.fixture
def provider(settings: Settings) -> CountingProvider:
    """The file sink in the test's MAIL_DIR, counting its calls."""
    return CountingProvider(settings.effective_mail_dir)


@pytest.fixture
def cells(
    db: Engine, settings: Settings, clock: Clock, admin_url: str, template_database: str
) -> Iterator[Cells]:
    """Cells a and b with the API on both (tests.integration.cells_support)."""
    with two_cells(db, settings, clock, admin_url, template_database) as c:
        yield c
