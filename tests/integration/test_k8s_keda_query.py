"""The due-backlog query KEDA's PostgreSQL scaler runs to scale the coordinator
(k8s/base/scaledobject-coordinator.yaml), run against the real schema."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from pathlib import Path

from sqlalchemy import Engine

from tests.integration.helpers import insert_due_reminders
from tests.support import kustomize

PRODUCTION = Path(__file__).resolve().parents[2] / "k8s" / "overlays" / "production"


def backlog_query() -> str:
    (scaled,) = [
        d
        for d in kustomize.build(PRODUCTION)
        if d["kind"] == "ScaledObject" and d["metadata"]["name"] == "reminders-coordinator"
    ]
    (trigger,) = scaled["spec"]["triggers"]
    assert trigger["type"] == "postgresql"
    return str(trigger["metadata"]["query"])


def test_counts_pending_reminders_already_due(db: Engine) -> None:
    # The query reads the database's own clock (now()): rows an hour either side of it.
    now = datetime.now(UTC)
    insert_due_reminders(db, 3, next_run_utc=now - timedelta(hours=1), title="due")
    insert_due_reminders(db, 2, next_run_utc=now + timedelta(hours=1), title="future")
    insert_due_reminders(db, 1, next_run_utc=now - timedelta(hours=1), status="paused")

    # KEDA reads the first column of the first row as the metric.
    with db.connect() as conn:
        rows = conn.exec_driver_sql(backlog_query()).all()

    assert rows == [(3,)]
