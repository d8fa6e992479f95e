"""The API while the database is unreachable (trial finding: every request answered 500):
a retryable outage answers 503 problem+json with Retry-After (RFC 9110 §15.6.4, §10.2.3),
never 500, and the API recovers by itself when the database is back."""

from __future__ import annotations

import socket

from fastapi.testclient import TestClient
from sqlalchemy import Engine

from reminder_core.db.session import make_engine
from reminder_core.settings import Settings
from reminder_core.tokens import mint_token
from tests.integration.api_support import NOW, PROBLEM_JSON, URL, Clock, bearer, build_app


def closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def test_requests_answer_503_while_the_database_refuses_connections(
    settings: Settings, db: Engine
) -> None:
    dead = make_engine(f"postgresql+psycopg://postgres@127.0.0.1:{closed_port()}/nowhere")
    token = bearer(mint_token(settings, "alice"))
    with TestClient(build_app(settings, dead, Clock(NOW)), raise_server_exceptions=False) as c:
        listed = c.get(URL, headers=token)
        created = c.post(
            URL, headers=token, json={"title": "Tea", "start_local": "2029-06-02T09:00"}
        )
    for response in (listed, created):
        assert response.status_code == 503, response.text
        assert response.headers["content-type"] == PROBLEM_JSON
        assert response.headers["retry-after"] == "5"
        assert "database" in response.json()["detail"]
    dead.dispose()
    # The same app on a reachable database answers normally (nothing was cached broken).
    with TestClient(build_app(settings, db, Clock(NOW))) as c:
        assert c.get(URL, headers=token).status_code == 200
