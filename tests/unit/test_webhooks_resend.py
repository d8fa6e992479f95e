"""Resend webhooks (webhooks.resend): Standard Webhooks signatures and event parsing.

Expected values come from:
- the Standard Webhooks specification, as svix implements it: headers svix-id,
  svix-timestamp (Unix seconds) and svix-signature ("v1,<base64 HMAC-SHA256 of
  '<id>.<timestamp>.<body>'>", space-separated entries); timestamps more than 5 minutes
  from now are refused. Signatures here are made with svix's own `Webhook.sign` and a
  secret made for the test.
- Resend docs, event pages `email.bounced` (example: email_id
  56761188-7520-42d8-8898-ff6fc54ce618, bounce type "Permanent", subType "Suppressed")
  and `email.complained`, `email.sent` (its example, with our `idempotency_key` tag).
"""

from __future__ import annotations

import base64
import json
import os
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from svix.webhooks import Webhook

from reminder_core.errors import MalformedBody, Unauthenticated
from tests.support.webhook_payloads import RESEND_BOUNCED as BOUNCED
from tests.support.webhook_payloads import RESEND_COMPLAINED as COMPLAINED
from tests.support.webhook_payloads import RESEND_SENT as SENT
from webhooks.events import EventKind, WebhookEvent
from webhooks.resend import ResendVerifier, parse_resend_events

SECRET = "whsec_" + base64.b64encode(os.urandom(24)).decode()
MSG_ID = "msg_2KWPBgLlAfxdpx2AI54pPJ85f4W"


def signed_headers(
    raw: bytes, *, at: datetime | None = None, msg_id: str = MSG_ID, secret: str = SECRET
) -> dict[str, str]:
    when = at or datetime.now(UTC)
    return {
        "svix-id": msg_id,
        "svix-timestamp": str(int(when.timestamp())),
        "svix-signature": Webhook(secret).sign(msg_id, when, raw.decode()),
    }


def raw(document: dict[str, Any]) -> bytes:
    return json.dumps(document).encode()


def test_a_signed_request_verifies_and_yields_its_svix_id() -> None:
    body = raw(BOUNCED)
    assert ResendVerifier(SECRET).verify(body, signed_headers(body)) == MSG_ID


def test_header_names_are_matched_without_case() -> None:
    body = raw(BOUNCED)
    headers = {k.upper(): v for k, v in signed_headers(body).items()}
    assert ResendVerifier(SECRET).verify(body, headers) == MSG_ID


def test_any_matching_signature_among_several_verifies() -> None:
    # Standard Webhooks: several space-separated signatures (secret rotation).
    body = raw(BOUNCED)
    headers = signed_headers(body)
    old = signed_headers(body, secret="whsec_" + base64.b64encode(b"o" * 24).decode())
    headers["svix-signature"] = f"{old['svix-signature']} {headers['svix-signature']}"
    assert ResendVerifier(SECRET).verify(body, headers) == MSG_ID


def flip_one_byte(body: bytes) -> bytes:
    index = body.index(b"delivered@")
    return body[:index] + bytes([body[index] ^ 1]) + body[index + 1 :]


def test_a_tampered_body_is_refused() -> None:
    body = raw(BOUNCED)
    with pytest.raises(Unauthenticated):
        ResendVerifier(SECRET).verify(flip_one_byte(body), signed_headers(body))


def test_another_secret_is_refused() -> None:
    body = raw(BOUNCED)
    other = "whsec_" + base64.b64encode(os.urandom(24)).decode()
    with pytest.raises(Unauthenticated):
        ResendVerifier(SECRET).verify(body, signed_headers(body, secret=other))


@pytest.mark.parametrize("offset_s", [-6 * 60, 6 * 60])
def test_a_timestamp_outside_five_minutes_is_refused(offset_s: int) -> None:
    body = raw(BOUNCED)
    at = datetime.now(UTC) + timedelta(seconds=offset_s)
    with pytest.raises(Unauthenticated):
        ResendVerifier(SECRET).verify(body, signed_headers(body, at=at))


def test_a_replay_inside_the_window_verifies_again() -> None:
    # Deduplication is by svix-id when applied, not by the verifier.
    body = raw(BOUNCED)
    headers = signed_headers(body, at=datetime.now(UTC) - timedelta(minutes=4))
    verifier = ResendVerifier(SECRET)
    assert verifier.verify(body, headers) == verifier.verify(body, headers) == MSG_ID


@pytest.mark.parametrize(
    "change",
    [
        {"svix-id": ""},
        {"svix-timestamp": ""},
        {"svix-signature": ""},
        {"svix-timestamp": "yesterday"},
        {"svix-timestamp": "nan"},
        {"svix-timestamp": "1e400"},
        {"svix-timestamp": "99999999999999999999"},
        {"svix-signature": "v1"},
        {"svix-signature": "v1,"},
        {"svix-signature": "v1,a,b"},
        {"svix-signature": "v1,%%%%"},
        {"svix-signature": "v1,é"},
        {"svix-signature": "v2,AAAA"},
        {"svix-signature": "garbage"},
    ],
)
def test_malformed_signature_headers_are_unauthenticated(change: dict[str, str]) -> None:
    body = raw(BOUNCED)
    with pytest.raises(Unauthenticated):
        ResendVerifier(SECRET).verify(body, {**signed_headers(body), **change})


def test_missing_headers_are_unauthenticated() -> None:
    with pytest.raises(Unauthenticated):
        ResendVerifier(SECRET).verify(raw(BOUNCED), {})


def test_a_body_that_is_not_utf8_is_unauthenticated() -> None:
    body = raw(BOUNCED)
    with pytest.raises(Unauthenticated):
        ResendVerifier(SECRET).verify(b"\xff" + body, signed_headers(body))


@pytest.mark.parametrize("secret", ["", "whsec_", "whsec_not base64!"])
def test_a_bad_secret_is_a_configuration_error(secret: str) -> None:
    with pytest.raises(ValueError, match="secret"):
        ResendVerifier(secret)


# -- parsing --------------------------------------------------------------------------


def test_a_permanent_bounce_is_a_hard_bounce() -> None:
    assert parse_resend_events(MSG_ID, raw(BOUNCED)) == [
        WebhookEvent(
            provider="resend",
            event_id=MSG_ID,
            kind=EventKind.HARD_BOUNCE,
            provider_message_id="56761188-7520-42d8-8898-ff6fc54ce618",
            recipient="delivered@example.com",
            reason="Permanent/Suppressed: The recipient's email address is on the suppression"
            " list because it has a recent history of producing hard bounces.",
            occurred_at=datetime(2024, 11, 22, 23, 41, 12, 126000, tzinfo=UTC),
        )
    ]


def test_a_transient_bounce_is_soft() -> None:
    document = json.loads(raw(BOUNCED))
    document["data"]["bounce"] = {"type": "Transient", "subType": "MailboxFull"}
    [event] = parse_resend_events(MSG_ID, raw(document))
    assert event.kind is EventKind.SOFT_BOUNCE
    assert event.reason == "Transient/MailboxFull"


def test_a_complaint_is_a_complaint() -> None:
    [event] = parse_resend_events(MSG_ID, raw(COMPLAINED))
    assert (event.kind, event.recipient, event.event_id) == (
        EventKind.COMPLAINT,
        "delivered@example.com",
        MSG_ID,
    )


def test_several_recipients_get_one_event_each() -> None:
    document = json.loads(raw(COMPLAINED))
    document["data"]["to"] = ["a@example.com", "b@example.com"]
    events = parse_resend_events(MSG_ID, raw(document))
    assert [(e.event_id, e.recipient) for e in events] == [
        (f"{MSG_ID}#0", "a@example.com"),
        (f"{MSG_ID}#1", "b@example.com"),
    ]


@pytest.mark.parametrize("kind", ["email.sent", "email.delivered", "email.opened", None])
def test_other_events_carry_nothing(kind: str | None) -> None:
    assert parse_resend_events(MSG_ID, raw({"type": kind, "data": {}})) == []


@pytest.mark.parametrize(
    "body",
    [
        b"{not json",
        b"[1, 2]",
        raw({"type": "email.bounced"}),
        raw({"type": "email.bounced", "data": {"to": ["a@example.com"]}}),
        raw({"type": "email.bounced", "data": {"email_id": "e", "to": []}}),
        raw({"type": "email.bounced", "data": {"email_id": "e", "to": [7]}}),
        raw({"type": "email.bounced", "data": {"email_id": "e", "to": "a@x", "bounce": "P"}}),
    ],
)
def test_malformed_events_are_refused(body: bytes) -> None:
    with pytest.raises(MalformedBody):
        parse_resend_events(MSG_ID, body)


# -- email.sent / email.delivered: evidence that Resend accepted an email (issue 12) ----

KEY = "0192a4b5-6c7d-7e8f-9a0b-1c2d3e4f5a6b-20261202T090000Z"


def sent(kind: str = "email.sent", tags: object = None) -> bytes:
    document = json.loads(json.dumps(SENT))
    document["type"] = kind
    document["data"]["tags"] = {"idempotency_key": KEY} if tags is None else tags
    return json.dumps(document).encode()


@pytest.mark.parametrize("kind", ["email.sent", "email.delivered"])
def test_sent_and_delivered_are_evidence_found_by_the_tag(kind: str) -> None:
    # Resend's email.sent example, with our tag in the current docs' object form.
    assert parse_resend_events(MSG_ID, sent(kind)) == [
        WebhookEvent(
            provider="resend",
            event_id=MSG_ID,
            kind=EventKind.ACCEPTED,
            provider_message_id="56761188-7520-42d8-8898-ff6fc54ce618",
            recipient="delivered@example.com",
            reason="accepted",
            occurred_at=datetime(2024, 2, 22, 23, 41, 11, 894719, tzinfo=UTC),  # data's
            idempotency_key=KEY,
        )
    ]


def test_the_list_form_of_tags_is_read_too() -> None:
    # Earlier Resend docs show tags as [{"name": ..., "value": ...}].
    tags = [{"name": "category", "value": "x"}, {"name": "idempotency_key", "value": KEY}]
    [event] = parse_resend_events(MSG_ID, sent(tags=tags))
    assert event.idempotency_key == KEY


@pytest.mark.parametrize(
    "tags", [{}, {"category": "confirm_email"}, [], [{"name": "idempotency_key"}], "x", 7]
)
def test_a_sent_event_without_our_key_is_no_event(tags: object) -> None:
    assert parse_resend_events(MSG_ID, sent(tags=tags)) == []
