"""The operators' API with cells (issue 18, "Operations across cells"): `/v1/admin/*`
take `?cell=NAME` and read or act on that cell's database and queue (default: the
first cell's), against two real databases. Expected from the routes' documentation:
each cell's own suppression list, removal acting in the named cell only, the overview's
checks named for their cell, and an unknown cell a 422 problem naming `cell` that
changes nothing.
"""

from __future__ import annotations

from sqlalchemy import Engine, text

from reminder_core.settings import Settings
from reminder_core.tokens import ADMIN_SCOPE, mint_token
from tests.integration.api_support import PROBLEM_JSON, bearer
from tests.integration.cells_support import Cells


def suppress(engine: Engine, email: str) -> None:
    with engine.begin() as conn:
        conn.execute(
            text("INSERT INTO suppressions (email, reason, provider) VALUES (:e, 'bounce', 'ses')"),
            {"e": email},
        )


def listed(engine: Engine) -> list[str]:
    with engine.connect() as conn:
        return list(conn.execute(text("SELECT email FROM suppressions ORDER BY 1")).scalars())


def test_admin_routes_act_on_the_cell_they_name(cells: Cells, settings: Settings) -> None:
    sre = bearer(mint_token(settings, "sre", scopes=[ADMIN_SCOPE]))
    suppress(cells.a, "in-a@example.com")
    suppress(cells.b, "in-b@example.com")
    get = cells.client.get

    def emails(query: str) -> list[str]:
        r = get(f"/v1/admin/suppressions{query}", headers=sre)
        assert r.status_code == 200, r.text
        return [e["email"] for e in r.json()]

    assert emails("") == ["in-a@example.com"]  # the first cell by default
    assert emails("?cell=a") == ["in-a@example.com"]
    assert emails("?cell=b") == ["in-b@example.com"]

    removed = cells.client.delete("/v1/admin/suppressions/in-b@example.com?cell=b", headers=sre)
    assert removed.status_code == 200, removed.text
    assert removed.json()["removed"] is True
    assert (listed(cells.a), listed(cells.b)) == (["in-a@example.com"], [])

    default = get("/v1/admin/overview", headers=sre).json()["checks"]
    assert {c["cell"] for c in default} == {"a"}  # the first cell, named as such
    overview = get("/v1/admin/overview?cell=b", headers=sre)
    assert overview.status_code == 200, overview.text
    checks = overview.json()["checks"]
    assert checks
    assert {c["cell"] for c in checks} == {"b"}
    assert all(c["label"].startswith("cell b: ") for c in checks)
    assert get("/v1/admin/dead-letters?cell=b", headers=sre).json() == []
    lag = get("/v1/admin/delivery-lag?cell=b", headers=sre)
    assert lag.status_code == 200, lag.text

    for bad in (
        get("/v1/admin/suppressions?cell=zz", headers=sre),
        cells.client.delete("/v1/admin/suppressions/in-a@example.com?cell=zz", headers=sre),
    ):
        assert bad.status_code == 422
        assert bad.headers["content-type"] == PROBLEM_JSON
        assert bad.json()["errors"][0]["field"] == "cell"
        assert "no such cell (the cells are: a, b)" in bad.json()["detail"]
    assert listed(cells.a) == ["in-a@example.com"]  # the refused removal changed nothing
