"""Provider-shaped webhook documents, mutated at random (strings with U+0000 and lone
surrogates included), parsed and applied with `apply_event` against the real database:
the outcome is an event stored, or an error the API answers with a 4xx (issue 6: "never a
500"; a new-user trial's Postmark bounce whose Description held a NUL answered 500 on
every retry, psycopg refusing the INSERT).

The documented payloads (tests.support.webhook_payloads) each match a `sent` delivery, so
mutations that keep the message id go through the whole apply path (delivery bounced,
address suppressed, reminders paused). Each example runs in a transaction that is rolled
back, as the webhook router's would be on an error.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from sqlalchemy import Engine, text

from reminder_core.errors import DomainError
from tests.support.sns import TOPIC_ARN
from tests.support.webhook_payloads import (
    POSTMARK_BOUNCE,
    POSTMARK_COMPLAINT,
    RESEND_BOUNCED,
    RESEND_COMPLAINED,
    SES_BOUNCE,
    SES_COMPLAINT,
)
from tests.unit.test_webhooks_fuzz import mutated
from webhooks.apply import apply_event
from webhooks.events import WebhookEvent
from webhooks.postmark import parse_postmark_events
from webhooks.resend import parse_resend_events
from webhooks.sns import SnsMessage, parse_ses_events

pytestmark = pytest.mark.timeout(300)

NOW = datetime(2030, 1, 1, 12, 0, tzinfo=UTC)

Parser = Callable[[bytes], list[WebhookEvent]]


def _ses(body: bytes) -> list[WebhookEvent]:
    return parse_ses_events(SnsMessage("Notification", "sns-1", TOPIC_ARN, body.decode(), ""))


#: (provider, documented payload, its message id and recipient, parser).
CASES: list[tuple[str, dict[str, Any], str, str, Parser]] = [
    ("postmark", POSTMARK_BOUNCE, POSTMARK_BOUNCE["MessageID"], POSTMARK_BOUNCE["Email"],
     parse_postmark_events),
    ("postmark", POSTMARK_COMPLAINT, POSTMARK_COMPLAINT["MessageID"], POSTMARK_COMPLAINT["Email"],
     parse_postmark_events),
    ("resend", RESEND_BOUNCED, RESEND_BOUNCED["data"]["email_id"], "delivered@example.com",
     lambda b: parse_resend_events("msg_1\x00", b)),
    ("resend", RESEND_COMPLAINED, RESEND_COMPLAINED["data"]["email_id"], "delivered@example.com",
     lambda b: parse_resend_events("msg_2", b)),
    ("ses", SES_BOUNCE, SES_BOUNCE["mail"]["messageId"], "jane@example.com", _ses),
    ("ses", SES_COMPLAINT, SES_COMPLAINT["mail"]["messageId"], "richard@example.com", _ses),
]  # fmt: skip

FUZZ = settings(
    derandomize=True,
    max_examples=150,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture],
)


def _sent_deliveries(engine: Engine) -> None:
    """One pending daily reminder of alice's and a `sent` delivery per provider message id
    of the payloads (committed: the examples roll back their own work)."""
    with engine.begin() as conn:
        reminder_id = conn.execute(
            text(
                "INSERT INTO reminders (user_id, title, start_local, timezone, rrule,"
                " next_run_utc, status) VALUES ('alice', 'Standup', '2029-12-01T12:00', 'UTC',"
                " 'FREQ=DAILY', :next, 'pending') RETURNING id"
            ),
            {"next": NOW + timedelta(days=1)},
        ).scalar_one()
        ids = {(provider, mid): to for provider, _, mid, to, _ in CASES}
        for day, ((provider, message_id), recipient) in enumerate(ids.items()):
            conn.execute(
                text(
                    "INSERT INTO delivery_log (reminder_id, user_id, run_time_utc, status,"
                    " provider, provider_message_id, recipient, sent_at) VALUES (:r, 'alice',"
                    " :run, 'sent', :provider, :mid, :recipient, :run)"
                ),
                {
                    "r": reminder_id,
                    "run": NOW - timedelta(days=day + 1),
                    "provider": provider,
                    "mid": message_id,
                    "recipient": recipient,
                },
            )


@FUZZ
@given(st.data())
def test_mutated_provider_documents_apply_or_answer_4xx(db: Engine, data: st.DataObject) -> None:
    if not _count(db, "delivery_log"):
        _sent_deliveries(db)
    _, document, _, _, parse = data.draw(st.sampled_from(CASES))
    body = json.dumps(mutated(document, data)).encode()
    try:
        events = parse(body)
    except DomainError:
        return  # 400 / 401
    with db.connect() as conn, conn.begin() as tx:
        try:
            for event in events:
                apply_event(conn, event, raw_body=body, now=NOW)
        except ValueError as exc:  # the router answers 400; UnicodeEncodeError is no such
            assert "names no recipient" in str(exc)  # noqa: PT017
        finally:
            tx.rollback()


def test_the_documented_payloads_apply_through_the_whole_path(db: Engine) -> None:
    # The fuzz above starts from these; without mutation each reaches its delivery.
    _sent_deliveries(db)
    outcomes = []
    for _, document, _, _, parse in CASES:
        with db.connect() as conn, conn.begin() as tx:
            for event in parse(json.dumps(document).encode()):
                outcomes.append(apply_event(conn, event, raw_body=b"{}", now=NOW).outcome.value)
            tx.rollback()
    # A hard bounce or a complaint about a known delivery suppresses (docs/design.md,
    # "Suppression list").
    assert outcomes == ["suppressed"] * len(CASES)


def _count(engine: Engine, table: str) -> int:
    with engine.connect() as conn:
        return int(conn.execute(text(f"SELECT count(*) FROM {table}")).scalar_one())
