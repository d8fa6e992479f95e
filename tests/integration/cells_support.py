"""Two cells for the integration tests of cells (issue 18): cell `a` (the test's
database, holding the directory) and cell `b` (a fresh copy of the migrated template,
taking no new users), with the API routing between them (the `cells` fixture of
conftest.py)."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

from fastapi.testclient import TestClient
from sqlalchemy import Engine

from reminder_api.app import create_app
from reminder_core.cell_directory import CellDirectory, open_cell_routing
from reminder_core.cells import CellConfig, cells_of
from reminder_core.profiles import LocalProfileSource
from reminder_core.services.cell_move import CellMove
from reminder_core.settings import Settings
from tests.integration.api_support import Clock
from tests.support.workloads import fresh_database

TTL_S = 0.3  # the API's CELL_CACHE_TTL_S here: a move waits it out for real


@dataclass
class Cells:
    a: Engine
    b: Engine
    settings: Settings
    client: TestClient
    clock: Clock
    progress: list[str] = field(default_factory=list)
    feed_url: str = ""

    def mover(self, **kwargs: Any) -> CellMove:
        """A move tool with its own directory cache, as `reminders cells move` has."""
        directory = CellDirectory(self.a, cells_of(self.settings), cache_ttl_s=TTL_S)
        engines = {"a": self.a, "b": self.b}
        options: dict[str, Any] = {
            "cache_ttl_s": TTL_S,
            "delivery_lease_s": 45.0,
            "progress": self.progress.append,
            "clock": self.clock,
            "poll_interval_s": 0.05,
        }
        options.update(kwargs)
        return CellMove(directory, lambda cell: engines[cell.name], **options)


@contextmanager
def two_cells(
    db: Engine,
    settings: Settings,
    clock: Clock,
    admin_url: str,
    template_database: str,
    **extra: Any,
) -> Iterator[Cells]:
    """Cells a (the test's database, with the directory) and b (a fresh copy of the
    template, taking no new users), and the API on both; `extra` settings on top."""
    with fresh_database(admin_url, "reminders_cell_b", template=template_database) as (
        url_b,
        b,
    ):
        configured = settings.model_copy(
            update={
                "cells": (
                    CellConfig(name="a", database_url=settings.database_url or ""),
                    # b takes no new users: everyone starts in a.
                    CellConfig(name="b", database_url=url_b, accepts_new_users=False),
                ),
                "cell_cache_ttl_s": TTL_S,
                "rate_limit_per_minute": 0,
                **extra,
            }
        )
        routing = open_cell_routing(configured, db, application_name="test-cells")
        assert routing is not None
        app = create_app(
            configured,
            db,
            LocalProfileSource(configured.effective_profiles_file),
            clock=clock,
            cells=routing,
        )
        try:
            with TestClient(app) as client:
                yield Cells(db, b, configured, client, clock)
        finally:
            routing.close()
