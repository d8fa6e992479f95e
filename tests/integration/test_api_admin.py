"""The operators' routes /v1/admin/* (issue 16, the console's SRE pages): a token with
the `reminders:admin` scope (RFC 8693 §4.2 `scope` claim) is needed, a user's token gets
403 problem+json; the overview is `reminders status`; the delivery-lag chart comes from
the delivery log (percentile_cont: PostgreSQL's linear interpolation between the two
nearest ranks); replay and suppression removal are the CLI's operations. Against a real
PostgreSQL through the app."""

from __future__ import annotations

from datetime import timedelta

import pytest
from fastapi.testclient import TestClient
from sqlalchemy import Engine, text

from coordinator.service import Coordinator
from reminder_core.queue import PostgresQueue
from reminder_core.settings import Settings
from reminder_core.status import collect_status
from reminder_core.tokens import ADMIN_SCOPE, mint_token
from reminder_core.worker.loop import Heartbeat
from reminder_core.worker.registry import WorkerRegistry
from tests.integration.api_support import NOW, PROBLEM_JSON, Clock, bearer
from tests.integration.helpers import insert_due_reminders

ROUTES = [
    ("GET", "/v1/admin/overview"),
    ("GET", "/v1/admin/delivery-lag"),
    ("GET", "/v1/admin/dead-letters"),
    ("POST", "/v1/admin/dead-letters:replay"),
    ("GET", "/v1/admin/suppressions"),
    ("DELETE", "/v1/admin/suppressions/a@example.com"),
]


@pytest.fixture
def admin(settings: Settings) -> dict[str, str]:
    return bearer(mint_token(settings, "sre", scopes=[ADMIN_SCOPE]))


@pytest.mark.parametrize(("method", "path"), ROUTES)
def test_a_user_token_is_403_and_no_token_401(
    client: TestClient, settings: Settings, method: str, path: str
) -> None:
    user = bearer(mint_token(settings, "alice"))
    other_scope = bearer(mint_token(settings, "alice", scopes=["reminders:read"]))
    for headers, status in ((user, 403), (other_scope, 403), ({}, 401)):
        resp = client.request(method, path, headers=headers, json={})
        assert resp.status_code == status, resp.text
        assert resp.headers["content-type"] == PROBLEM_JSON
        assert resp.json()["status"] == status


def test_overview_is_reminders_status_and_lists_the_workers(
    client: TestClient, db: Engine, settings: Settings, clock: Clock, admin: dict[str, str]
) -> None:
    registry = WorkerRegistry(
        db, {"coordinator": Heartbeat(last_tick_at=NOW)}, interval_s=10, clock=lambda: NOW
    )
    assert registry.beat()
    stale = WorkerRegistry(db, {"sender": Heartbeat()}, interval_s=10,
                           clock=lambda: NOW - timedelta(minutes=5))  # fmt: skip
    assert stale.beat()
    insert_due_reminders(db, 2, next_run_utc=NOW - timedelta(minutes=10))  # late: lag 600 s

    resp = client.get("/v1/admin/overview", headers=admin)
    assert resp.status_code == 200, resp.text
    body = resp.json()
    queue = PostgresQueue(db, name="reminders", max_receive_count=settings.max_receive_count)
    expected = collect_status(db, queue, settings, now=clock.now).to_json()
    assert (body["status"], body["exit_code"]) == (expected["status"], expected["exit_code"])
    assert [c["name"] for c in body["checks"]] == [c["name"] for c in expected["checks"]]
    checks = {c["name"]: c for c in body["checks"]}
    assert checks["next_run_lag"]["value"] == 600.0
    assert checks["next_run_lag"]["state"] == "alert"  # > ALERT_NEXT_RUN_LAG_S (120)
    assert checks["due_backlog"]["value"] == 2
    assert (checks["workers_coordinator"]["state"], checks["workers_coordinator"]["value"]) == (
        "ok",
        1,
    )
    assert checks["workers_sender"]["state"] == "alert"  # last seen 5 min ago > 30 s
    workers = {w["role"]: w for w in body["workers"]}
    assert workers["coordinator"]["live"] is True
    assert workers["sender"]["live"] is False
    assert workers["coordinator"]["last_tick_at"] == "2029-06-01T12:00:00Z"


def test_delivery_lag_percentiles_per_bucket_from_the_delivery_log(
    client: TestClient, db: Engine, admin: dict[str, str]
) -> None:
    insert_due_reminders(db, 1, next_run_utc=NOW)
    # Four sent in the minute starting 12:00 - 60 min, lags 1, 2, 3, 4 s; one in the last
    # minute, lag 10 s; one `failed` (never counted) and one sent outside the hour.
    sent = [
        (NOW - timedelta(minutes=60) + timedelta(seconds=10 + 10 * i), float(i + 1))
        for i in range(4)
    ]
    sent.append((NOW - timedelta(seconds=30), 10.0))
    with db.begin() as conn:
        rid = conn.execute(text("SELECT id FROM reminders")).scalar_one()
        rows = [(at, lag, "sent") for at, lag in sent]
        rows += [(NOW - timedelta(minutes=2), 50.0, "failed"),
                 (NOW - timedelta(minutes=61), 99.0, "sent")]  # fmt: skip
        for at, lag, status in rows:
            conn.execute(
                text(
                    "INSERT INTO delivery_log (reminder_id, user_id, run_time_utc, status,"
                    " sent_at, attempt_count) VALUES (:r, 'alice', :run, :s, :at, 1)"
                ),
                {"r": rid, "run": at - timedelta(seconds=lag), "s": status, "at": at},
            )
    resp = client.get("/v1/admin/delivery-lag?window_s=3600&bucket_s=60", headers=admin)
    assert resp.status_code == 200, resp.text
    body = resp.json()
    assert body["bucket_s"] == 60
    first, last = body["buckets"]
    assert first["start"] == "2029-06-01T11:00:00Z"
    # Lags 1, 2, 3, 4: p50 between ranks 2 and 3 = 2.5; p90 at 0.9 * 3 = 2.7 past rank 1
    # = 3 + 0.7 = 3.7; p99 = 3 + 0.97 = 3.97; max 4.
    assert (first["sent"], first["max_s"]) == (4, 4.0)
    assert first["p50_s"] == pytest.approx(2.5)
    assert first["p90_s"] == pytest.approx(3.7)
    assert first["p99_s"] == pytest.approx(3.97)
    assert last["start"] == "2029-06-01T11:59:00Z"
    assert (last["sent"], last["p50_s"], last["p99_s"]) == (1, 10.0, 10.0)


@pytest.mark.parametrize(
    "query", ["bucket_s=7200&window_s=3600", "bucket_s=10&window_s=86400", "window_s=10"]
)
def test_a_delivery_lag_query_that_makes_no_sense_is_422(
    client: TestClient, admin: dict[str, str], query: str
) -> None:
    resp = client.get(f"/v1/admin/delivery-lag?{query}", headers=admin)
    assert resp.status_code == 422, resp.text
    assert resp.headers["content-type"] == PROBLEM_JSON
    assert resp.json()["status"] == 422


def test_a_replay_is_the_cli_replay(
    client: TestClient, db: Engine, admin: dict[str, str], queue: PostgresQueue
) -> None:
    insert_due_reminders(db, 1, next_run_utc=NOW)
    Coordinator(db, queue, lookahead_s=0, batch_size=10, worker_id="c").run_once(NOW)
    with db.begin() as conn:  # as after MAX_RECEIVE_COUNT failed receives
        conn.execute(
            text("UPDATE queue_messages SET dead_lettered = true, dead_lettered_at = :now"),
            {"now": NOW},
        )
    (letter,) = client.get("/v1/admin/dead-letters", headers=admin).json()
    with db.connect() as conn:
        rid = str(conn.execute(text("SELECT id FROM reminders")).scalar_one())
    assert (letter["reminder_id"], letter["run_time_utc"]) == (rid, "2029-06-01T12:00:00Z")

    resp = client.post(
        "/v1/admin/dead-letters:replay", headers=admin, json={"ids": ["nope", letter["message_id"]]}
    )
    assert resp.status_code == 200, resp.text
    assert resp.json() == {
        "redriven": 1, "already_done": 0, "malformed": 0, "missing_ids": ["nope"], "held": 0,
    }  # fmt: skip
    assert client.get("/v1/admin/dead-letters", headers=admin).json() == []
    assert len(queue.receive(now=NOW, max_messages=10, visibility_timeout_s=30)) == 1


def test_suppressions_list_and_removal(
    client: TestClient, db: Engine, admin: dict[str, str]
) -> None:
    with db.begin() as conn:
        conn.execute(
            text(
                "INSERT INTO suppressions (email, reason, provider) VALUES"
                " ('bounced@example.com', 'bounce', 'resend')"
            )
        )
    (entry,) = client.get("/v1/admin/suppressions", headers=admin).json()
    assert (entry["email"], entry["reason"], entry["paused"]) == (
        "bounced@example.com",
        "bounce",
        0,
    )
    resp = client.delete("/v1/admin/suppressions/Bounced@Example.com", headers=admin)
    assert resp.status_code == 200, resp.text
    assert resp.json() == {
        "email": "bounced@example.com", "removed": True, "resumed": 0, "left_paused": 0,
    }  # fmt: skip
    again = client.delete("/v1/admin/suppressions/bounced@example.com", headers=admin)
    assert again.json()["removed"] is False
    assert client.get("/v1/admin/suppressions", headers=admin).json() == []
