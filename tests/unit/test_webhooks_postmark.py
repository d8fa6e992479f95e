"""Postmark webhooks (webhooks.postmark): basic auth and record parsing.

Expected values come from:
- RFC 7617 §2: credentials are base64("user-id:password"); the example
  "Aladdin" / "open sesame" is sent as "Basic QWxhZGRpbjpvcGVuIHNlc2FtZQ==".
- Postmark developer docs, "Bounce webhook" example (ID 4323372036854775807, Type
  HardBounce, MessageID 883953f4-6105-42a2-a16a-77a8eac79483, Email john@example.com,
  BouncedAt 2019-11-05T16:33:54.9070259Z) and "Spam complaint webhook" example; the
  Bounce API's bounce types (HardBounce: "unknown user, mailbox not found"; SoftBounce:
  "mailbox full..."; AutoResponder: "Out of Office"...).
"""

from __future__ import annotations

import json
from datetime import UTC, datetime
from typing import Any

import pytest

from reminder_core.errors import MalformedBody, Unauthenticated
from tests.support.webhook_payloads import POSTMARK_BOUNCE as BOUNCE
from tests.support.webhook_payloads import POSTMARK_COMPLAINT as COMPLAINT
from webhooks.events import EventKind, WebhookEvent
from webhooks.postmark import check_basic_auth, parse_postmark_events

# -- basic auth -----------------------------------------------------------------------


def test_the_rfc_7617_example_credentials_pass() -> None:
    check_basic_auth("Basic QWxhZGRpbjpvcGVuIHNlc2FtZQ==", user="Aladdin", password="open sesame")


def test_the_scheme_is_case_insensitive() -> None:
    check_basic_auth("basic QWxhZGRpbjpvcGVuIHNlc2FtZQ==", user="Aladdin", password="open sesame")


@pytest.mark.parametrize(
    "header",
    [
        None,
        "",
        "Basic",
        "Basic ",
        "Bearer QWxhZGRpbjpvcGVuIHNlc2FtZQ==",
        "Basic QWxhZGRpbjpvcGVuIHNlc2FtZQ",  # padding missing
        "Basic !!!!",
        "Basic QWxhZGRpbg==",  # "Aladdin": no colon
        "Basic QWxhZGRpbjpvcGVuIHNlc2FtZSE=",  # "Aladdin:open sesame!"
        "Basic YWxhZGRpbjpvcGVuIHNlc2FtZQ==",  # "aladdin:open sesame"
        "Basic OmFsYWRkaW4=",  # ":aladdin"
        "Basic 4pyTIMOgIGxhIG1vZGU=",  # UTF-8, not ours
    ],
)
def test_missing_or_wrong_credentials_are_unauthenticated(header: str | None) -> None:
    with pytest.raises(Unauthenticated) as caught:
        check_basic_auth(header, user="Aladdin", password="open sesame")
    assert caught.value.challenge is not None
    assert caught.value.challenge.startswith("Basic realm=")


def test_a_password_containing_a_colon_passes() -> None:
    # RFC 7617 §2: the user-id cannot contain ":", the password may.
    check_basic_auth("Basic dTpwOnc=", user="u", password="p:w")  # "u:p:w"


# -- parsing --------------------------------------------------------------------------


def raw(document: dict[str, Any]) -> bytes:
    return json.dumps(document).encode()


def test_the_documented_hard_bounce() -> None:
    assert parse_postmark_events(raw(BOUNCE)) == [
        WebhookEvent(
            provider="postmark",
            event_id="4323372036854775807",  # exact: beyond 2**53
            kind=EventKind.HARD_BOUNCE,
            provider_message_id="883953f4-6105-42a2-a16a-77a8eac79483",
            recipient="john@example.com",
            reason="HardBounce: The server was unable to deliver your message (ex: unknown"
            " user, mailbox not found). Test bounce details",
            # 7 fractional digits: Python keeps microseconds (the 7th digit is dropped).
            occurred_at=datetime(2019, 11, 5, 16, 33, 54, 907025, tzinfo=UTC),
        )
    ]


def test_the_id_survives_as_written_in_the_body() -> None:
    body = raw(BOUNCE).replace(b"4323372036854775807", b"98765432109876543210987654321")
    [event] = parse_postmark_events(body)
    assert event.event_id == "98765432109876543210987654321"


def test_the_documented_spam_complaint() -> None:
    [event] = parse_postmark_events(raw(COMPLAINT))
    assert (event.kind, event.event_id, event.provider_message_id) == (
        EventKind.COMPLAINT,
        "42",
        "00000000-0000-0000-0000-000000000000",
    )


@pytest.mark.parametrize(
    ("bounce_type", "kind"),
    [
        ("HardBounce", EventKind.HARD_BOUNCE),
        ("BadEmailAddress", EventKind.HARD_BOUNCE),
        ("SoftBounce", EventKind.SOFT_BOUNCE),
        ("Transient", EventKind.SOFT_BOUNCE),
        ("DnsError", EventKind.SOFT_BOUNCE),
        ("Blocked", EventKind.SOFT_BOUNCE),
        ("SpamComplaint", EventKind.COMPLAINT),
    ],
)
def test_bounce_types(bounce_type: str, kind: EventKind) -> None:
    [event] = parse_postmark_events(raw({**BOUNCE, "Type": bounce_type}))
    assert event.kind is kind


@pytest.mark.parametrize(
    "document",
    [
        {**BOUNCE, "Type": "AutoResponder"},
        {**BOUNCE, "Type": "AddressChange"},
        {**BOUNCE, "Type": "Subscribe"},
        {**BOUNCE, "Type": "ChallengeVerification"},
        {**BOUNCE, "Type": ["HardBounce"]},  # found by test_webhooks_fuzz: not a type name
        {"RecordType": "Delivery", "MessageID": "m", "Recipient": "john@example.com"},
        {"RecordType": "Open", "MessageID": "m"},
    ],
)
def test_records_that_are_not_bounces_carry_nothing(document: dict[str, Any]) -> None:
    assert parse_postmark_events(raw(document)) == []


@pytest.mark.parametrize(
    "body",
    [
        b"{",
        b"[]",
        raw(BOUNCE).replace(b"4323372036854775807", b"4.323372036854776e18"),  # a float
        raw(BOUNCE).replace(b"4323372036854775807", b'"4323372036854775807"'),  # a string
        raw(BOUNCE).replace(b"4323372036854775807", b"true"),
        raw(BOUNCE).replace(b"4323372036854775807", b"NaN"),
        raw(BOUNCE).replace(b"4323372036854775807", b"1" * 5000),  # past int parsing limits
        raw({k: v for k, v in BOUNCE.items() if k != "ID"}),
        raw({k: v for k, v in BOUNCE.items() if k != "MessageID"}),
        raw({**BOUNCE, "Email": "not an address"}),
    ],
)
def test_malformed_records_are_refused(body: bytes) -> None:
    with pytest.raises(MalformedBody):
        parse_postmark_events(body)
