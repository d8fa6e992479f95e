"""Two `reminders migrate` runs at once on a fresh database (a migration Job pod replaced
while the old one still runs; trial finding: one failed with UniqueViolation): both exit
0 and the schema is at head once."""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Iterator

import pytest
from sqlalchemy import create_engine, text

from reminder_core.settings import Settings
from tests.support.workloads import fresh_database


@pytest.fixture
def fresh_url(admin_url: str) -> Iterator[str]:
    with fresh_database(admin_url, "reminders_migrate") as (url, _):
        yield url


def test_concurrent_migrations_both_succeed(fresh_url: str) -> None:
    settings_vars = {name.upper() for name in Settings.model_fields}
    env = {k: v for k, v in os.environ.items() if k.upper() not in settings_vars}
    env["DATABASE_URL"] = fresh_url
    runs = [
        subprocess.Popen(
            [sys.executable, "-m", "reminders", "migrate"],
            env=env,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
        )
        for _ in range(3)
    ]
    outcomes = [(run.wait(120), run.stderr.read().decode()[-1500:]) for run in runs]  # type: ignore[union-attr]
    assert [code for code, _ in outcomes] == [0, 0, 0], outcomes
    engine = create_engine(fresh_url)
    with engine.connect() as conn:
        versions = conn.execute(text("SELECT version_num FROM alembic_version")).scalars().all()
    engine.dispose()
    heads = sorted(p.split("_")[0] for p in os.listdir("migrations/versions") if p[:4].isdigit())
    assert versions == [heads[-1]]
