"""Shared by the API tests: a settable clock, the app under test, bearer headers."""

from __future__ import annotations

from collections.abc import Callable
from datetime import datetime

from fastapi import FastAPI
from sqlalchemy import Engine

from reminder_api.app import create_app
from reminder_core.profiles import LocalProfileSource
from reminder_core.settings import Settings
from tests.conftest import utc

# 2029-06-01 12:00Z is 08:00 EDT in New York and 14:00 CEST in Paris.
NOW = utc(2029, 6, 1, 12, 0, 0)
PROBLEM_JSON = "application/problem+json"  # RFC 9457 §6.1 media type registration
URL = "/v1/reminders"

TokenFor = Callable[[str], str]


class Clock:
    """A settable clock: returns `now` until a test moves it."""

    def __init__(self, now: datetime) -> None:
        self.now = now

    def __call__(self) -> datetime:
        return self.now


def build_app(settings: Settings, db: Engine, clock: Callable[[], datetime]) -> FastAPI:
    return create_app(
        settings, db, LocalProfileSource(settings.effective_profiles_file), clock=clock
    )


def bearer(token: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {token}"}
