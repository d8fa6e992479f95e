"""Fixtures of the API tests: a settable clock and a TestClient on the app under test."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from fastapi.testclient import TestClient
from sqlalchemy import Engine

from reminder_core.settings import Settings
from tests.integration.api_support import NOW, Clock, build_app


@pytest.fixture
def clock() -> Clock:
    return Clock(NOW)


@pytest.fixture
def client(db: Engine, settings: Settings, clock: Clock) -> Iterator[TestClient]:
    with TestClient(build_app(settings, db, clock)) as c:
        yield c
