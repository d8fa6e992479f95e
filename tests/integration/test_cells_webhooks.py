"""Provider webhooks with cells (issue 18: "a provider webhook finds its cell from the
message tag or id it carries"; docs/design.md, "Cells"), against two real databases.

Payloads are Resend's documented `email.bounced` example (tests.support.webhook_payloads),
signed with svix as Resend signs them. Expected, from webhooks.cells' documented order:
a bounce about a delivery of cell b is applied in b (the delivery `bounced`, the address
suppressed, the user's reminders paused there) and nothing is written to cell a; an
event whose delivery nobody knows yet goes to the cell its `cell` tag names; the sender's
SES request carries that tag.
"""

from __future__ import annotations

import copy
from collections.abc import Iterator
from typing import Any

import pytest
from pydantic import SecretStr
from sqlalchemy import Engine, text

from reminder_core.settings import Settings
from sender.providers.base import OutgoingEmail
from sender.providers.ses import build_send_email_request
from tests.integration.api_support import Clock
from tests.integration.cells_support import Cells, two_cells
from tests.integration.test_webhooks_api import (
    RESEND_SECRET,
    RESEND_URL,
    delivery_status,
    raw,
    resend_headers,
    sent_delivery,
)
from tests.support.webhook_payloads import RESEND_BOUNCED
from webhooks.resend import parse_resend_events

EMAIL_ID = RESEND_BOUNCED["data"]["email_id"]


@pytest.fixture
def cells(
    db: Engine, settings: Settings, clock: Clock, admin_url: str, template_database: str
) -> Iterator[Cells]:
    extra = {"webhook_resend_secret": SecretStr(RESEND_SECRET)}
    with two_cells(db, settings, clock, admin_url, template_database, **extra) as c:
        yield c


def count(engine: Engine, table: str) -> int:
    with engine.connect() as conn:
        return int(conn.execute(text(f"SELECT count(*) FROM {table}")).scalar_one())


def bounced(tags: dict[str, str]) -> dict[str, Any]:
    document = copy.deepcopy(RESEND_BOUNCED)
    document["data"]["tags"] = tags
    return document


def test_a_bounce_is_applied_in_the_cell_of_its_delivery(cells: Cells) -> None:
    # Alice lives in b (the directory says so) and her email was sent from there; the
    # event carries no cell tag (an email sent before CELLS): found by its message id.
    with cells.a.begin() as conn:
        conn.execute(text("INSERT INTO cell_assignments VALUES ('alice', 'b', now())"))
    delivery = sent_delivery(
        cells.b, provider="resend", message_id=EMAIL_ID, recipient="delivered@example.com"
    )
    body = raw(bounced({"category": "confirm_email"}))

    resp = cells.client.post(RESEND_URL, content=body, headers=resend_headers(body))

    assert resp.status_code == 200, resp.text
    assert resp.json() == {"status": "processed", "events": 1, "duplicates": 0}
    assert delivery_status(cells.b, delivery) == "bounced"
    with cells.b.connect() as conn:
        assert conn.execute(text("SELECT email FROM suppressions")).scalars().all() == [
            "delivered@example.com"
        ]
        assert conn.execute(text("SELECT status FROM reminders")).scalars().all() == ["paused"]
    for table in ("webhook_events", "suppressions", "delivery_log"):
        assert count(cells.a, table) == 0, table
    assert count(cells.b, "webhook_events") == 1


def test_an_unmatched_event_goes_to_the_cell_its_tag_names(cells: Cells) -> None:
    body = raw(bounced({"idempotency_key": "x", "cell": "b"}))
    resp = cells.client.post(RESEND_URL, content=body, headers=resend_headers(body))
    assert resp.status_code == 200, resp.text
    assert count(cells.b, "webhook_events") == 1  # stored UNMATCHED there, rematched there
    assert count(cells.a, "webhook_events") == 0
    # A tag naming no configured cell is ignored: the first cell stores it.
    other = raw(bounced({"cell": "zz"}))
    headers = resend_headers(other, msg_id="msg_other")
    assert cells.client.post(RESEND_URL, content=other, headers=headers).status_code == 200
    assert count(cells.a, "webhook_events") == 1


def test_the_cell_tag_is_sent_and_read_back() -> None:
    email = OutgoingEmail(
        sender="r@example.com", to="u@example.com", subject="s", text="t", html="<p>t</p>"
    )
    request = build_send_email_request(email, idempotency_key="k", cell="b")
    assert {"Name": "cell", "Value": "b"} in request["EmailTags"]
    assert "cell" not in str(build_send_email_request(email, idempotency_key="k")["EmailTags"])
    events = parse_resend_events("msg_1", raw(bounced({"cell": "b"})))
    assert [e.cell for e in events] == ["b"]
