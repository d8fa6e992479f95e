"""GET /v1/reminders/{id}/deliveries (docs/design.md, "REST API"; issue 6): each
occurrence's state, bounces included, newest first with a cursor; another user's reminder
is 404 (docs/design.md, "REST API": a user sees only their own reminders). And what the
API shows of a reminder paused by a suppression (docs/design.md, "Suppression list":
status `paused`, reason given)."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

from fastapi.testclient import TestClient
from sqlalchemy import Engine, text

from tests.conftest import utc
from tests.integration.api_support import PROBLEM_JSON, URL, TokenFor, bearer

DAILY = {"title": "Stretch", "start_local": "2029-06-02T09:00", "timezone": "UTC",
         "rrule": "FREQ=DAILY"}  # fmt: skip


def create(client: TestClient, token: str) -> dict[str, Any]:
    resp = client.post(URL, json=DAILY, headers=bearer(token))
    assert resp.status_code == 201, resp.text
    return resp.json()


def record(db: Engine, rid: str, rows: list[dict[str, Any]]) -> None:
    with db.begin() as conn:
        for row in rows:
            conn.execute(
                text(
                    "INSERT INTO delivery_log (reminder_id, user_id, run_time_utc, status,"
                    " provider, provider_message_id, attempt_count, error, sent_at)"
                    " VALUES (:rid, 'alice', :run, :status, :provider, :msg, :attempts,"
                    " :error, :sent_at)"
                ),
                {"rid": rid, "msg": None, "provider": None, "attempts": 0, "error": None,
                 "sent_at": None, **row},
            )  # fmt: skip


def test_deliveries_newest_first_with_bounces_and_a_cursor(
    client: TestClient, db: Engine, token_for: TokenFor
) -> None:
    token = token_for("alice")
    rid = create(client, token)["id"]
    d1, d2, d3 = utc(2029, 6, 2, 9), utc(2029, 6, 3, 9), utc(2029, 6, 4, 9)
    record(db, rid, [
        {"run": d1, "status": "bounced", "provider": "ses", "msg": "m1", "attempts": 1,
         "error": "hard bounce: Permanent/General", "sent_at": d1 + timedelta(seconds=2)},
        {"run": d2, "status": "sent", "provider": "ses", "msg": "m2", "attempts": 2,
         "sent_at": d2 + timedelta(seconds=1)},
        {"run": d3, "status": "suppressed",
         "error": "not sent: alice@example.com is on the suppression list (bounce)"},
    ])  # fmt: skip

    first = client.get(f"{URL}/{rid}/deliveries?limit=2", headers=bearer(token))
    assert first.status_code == 200, first.text
    body = first.json()
    assert [i["run_time_utc"] for i in body["items"]] == [
        "2029-06-04T09:00:00Z",
        "2029-06-03T09:00:00Z",
    ]
    suppressed, sent = body["items"]
    assert suppressed["status"] == "suppressed"
    assert (suppressed["provider"], suppressed["attempt_count"], suppressed["sent_at"]) == (
        None, 0, None)  # fmt: skip
    assert "suppression list" in suppressed["error"]
    assert (sent["status"], sent["provider"], sent["attempt_count"], sent["error"]) == (
        "sent", "ses", 2, None)  # fmt: skip
    assert sent["sent_at"] == "2029-06-03T09:00:01Z"
    assert body["next_cursor"]

    second = client.get(
        f"{URL}/{rid}/deliveries", params={"limit": 2, "cursor": body["next_cursor"]},
        headers=bearer(token),
    )  # fmt: skip
    assert second.status_code == 200
    (bounced,) = second.json()["items"]
    assert second.json()["next_cursor"] is None
    assert (bounced["run_time_utc"], bounced["status"], bounced["attempt_count"]) == (
        "2029-06-02T09:00:00Z", "bounced", 1)  # fmt: skip
    assert bounced["error"] == "hard bounce: Permanent/General"


def test_no_deliveries_yet_is_an_empty_page(client: TestClient, token_for: TokenFor) -> None:
    token = token_for("alice")
    rid = create(client, token)["id"]
    resp = client.get(f"{URL}/{rid}/deliveries", headers=bearer(token))
    assert resp.json() == {"items": [], "next_cursor": None}


def test_another_users_reminder_is_404(client: TestClient, db: Engine, token_for) -> None:
    rid = create(client, token_for("alice"))["id"]
    record(db, rid, [{"run": utc(2029, 6, 2, 9), "status": "sent", "sent_at": utc(2029, 6, 2, 9)}])
    resp = client.get(f"{URL}/{rid}/deliveries", headers=bearer(token_for("bob")))
    assert resp.status_code == 404
    assert resp.headers["content-type"].startswith(PROBLEM_JSON)
    assert "sent" not in resp.text
    unknown = "018f0000-0000-7000-8000-000000000000"
    resp = client.get(f"{URL}/{unknown}/deliveries", headers=bearer(token_for("alice")))
    assert resp.status_code == 404


def test_a_foreign_cursor_is_422(client: TestClient, token_for: TokenFor) -> None:
    token = token_for("alice")
    rid = create(client, token)["id"]
    resp = client.get(f"{URL}/{rid}/deliveries?cursor=not-a-cursor", headers=bearer(token))
    assert resp.status_code == 422
    assert resp.headers["content-type"].startswith(PROBLEM_JSON)


def pause_by_suppression(db: Engine, rid: str) -> None:
    with db.begin() as conn:
        conn.execute(
            text(
                "UPDATE reminders SET status = 'paused', paused_reason = 'suppressed: bounce',"
                " suppressed_address = 'alice@example.com' WHERE id = :id"
            ),
            {"id": rid},
        )


def test_a_reminder_paused_by_a_suppression_shows_why_and_resumes_on_request(
    client: TestClient, db: Engine, token_for: TokenFor
) -> None:
    token = token_for("alice")
    created = create(client, token)
    assert created["paused_reason"] is None
    rid = created["id"]
    pause_by_suppression(db, rid)
    shown = client.get(f"{URL}/{rid}", headers=bearer(token)).json()
    assert (shown["status"], shown["paused_reason"]) == ("paused", "suppressed: bounce")

    resumed = client.post(f"{URL}/{rid}/resume", headers=bearer(token))
    assert resumed.status_code == 200
    assert (resumed.json()["status"], resumed.json()["paused_reason"]) == ("pending", None)
    with db.connect() as conn:
        assert (
            conn.execute(
                text("SELECT suppressed_address FROM reminders WHERE id = :id"), {"id": rid}
            ).scalar_one()
            is None
        )


def test_pausing_a_reminder_paused_by_a_suppression_makes_it_the_users_pause(
    client: TestClient, db: Engine, token_for: TokenFor
) -> None:
    token = token_for("alice")
    rid = create(client, token)["id"]
    pause_by_suppression(db, rid)
    paused = client.post(f"{URL}/{rid}/pause", headers=bearer(token))
    assert paused.status_code == 200
    assert (paused.json()["status"], paused.json()["paused_reason"]) == ("paused", None)
    assert paused.json()["version"] == 2  # a user change bumps the version
    with db.connect() as conn:
        assert (
            conn.execute(
                text("SELECT suppressed_address FROM reminders WHERE id = :id"), {"id": rid}
            ).scalar_one()
            is None
        )
