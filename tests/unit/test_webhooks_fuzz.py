"""No input makes a webhook verifier or parser fail with anything but the errors the API
answers with a 4xx (issue 6: "never a 500"): random bodies, JSON documents shaped like the
providers' and random signature headers (hypothesis). Strings include what PostgreSQL
text cannot hold (U+0000, lone surrogates: a new-user trial's bounce description with a
NUL answered 500) and instants at the edge of Python's range; the same documents go
through `apply_event` against the database in tests/integration/test_webhooks_fuzz_db.py.
"""

from __future__ import annotations

import base64
import json
from typing import Any

import httpx
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from reminder_core.errors import DomainError
from tests.support.sns import CERT_PATH, CERT_URL, TOPIC_ARN, SnsSigner
from tests.support.webhook_payloads import (
    POSTMARK_BOUNCE,
    RESEND_BOUNCED,
    SES_BOUNCE,
    SES_COMPLAINT,
)
from webhooks.parsing import instant, storable
from webhooks.postmark import check_basic_auth, parse_postmark_events
from webhooks.resend import ResendVerifier, parse_resend_events
from webhooks.sns import SnsMessage, SnsVerifier, parse_ses_events

SECRET = "whsec_" + base64.b64encode(b"k" * 24).decode()
SIGNER = SnsSigner()

#: Any code point, surrogates included, with U+0000 and a lone surrogate drawn often.
texts = st.text(
    st.characters(exclude_categories=()) | st.sampled_from(["\x00", "\ud800", "\udfff"]),
    max_size=20,
)
#: ISO 8601 instants whose UTC reading falls outside datetime's years 1..9999, and others.
edge_instants = st.sampled_from(
    [
        "0001-01-01T00:00:00+01:00",
        "9999-12-31T23:59:59-01:00",
        "0001-01-01T00:00:00Z",
        "2016-01-27T14:59:38.237Z",
        "2016-01-27T14:59:38",
    ]
)
json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | texts | edge_instants,
    lambda children: st.lists(children, max_size=3) | st.dictionaries(texts, children, max_size=3),
    max_leaves=12,
)


def mutated(document: dict[str, Any], data: st.DataObject) -> dict[str, Any]:
    """`document` with some keys (top level or one level down) replaced or removed."""
    result = json.loads(json.dumps(document))
    for _ in range(data.draw(st.integers(0, 3))):
        target = result
        nested = [k for k, v in result.items() if isinstance(v, dict)]
        if nested and data.draw(st.booleans()):
            target = result[data.draw(st.sampled_from(nested))]
        if not target:
            continue
        key = data.draw(st.sampled_from(sorted(target)))
        if data.draw(st.booleans()):
            del target[key]
        else:
            target[key] = data.draw(json_values)
    return result


FUZZ = settings(
    derandomize=True,  # as the recurrence property tests: CI runs the same examples
    max_examples=300,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow],
)


@FUZZ
@given(texts)
def test_storable_text_encodes_to_utf8_without_nul(text: str) -> None:
    kept = storable(text)
    assert "\x00" not in kept
    kept.encode("utf-8")  # strict: a lone surrogate would raise
    assert len(kept) == len(text)
    assert all(a == b or b == "\ufffd" for a, b in zip(text, kept, strict=True))


@FUZZ
@given(st.one_of(edge_instants, texts, json_values))
def test_instants_never_raise(value: object) -> None:
    parsed = instant(value)
    assert parsed is None or parsed.utcoffset() is not None


@FUZZ
@given(st.binary(max_size=200))
def test_random_bytes(body: bytes) -> None:
    for parse in (
        lambda: parse_postmark_events(body),
        lambda: parse_resend_events("msg_1", body),
        lambda: ResendVerifier(SECRET).verify(body, {}),
    ):
        try:
            parse()
        except DomainError:
            pass


@FUZZ
@given(st.data())
def test_provider_shaped_documents(data: st.DataObject) -> None:
    for document, parse in (
        (POSTMARK_BOUNCE, lambda b: parse_postmark_events(b)),
        (RESEND_BOUNCED, lambda b: parse_resend_events("msg_1", b)),
        (
            SES_BOUNCE,
            lambda b: parse_ses_events(SnsMessage("Notification", "m", TOPIC_ARN, b.decode(), "")),
        ),
        (
            SES_COMPLAINT,
            lambda b: parse_ses_events(SnsMessage("Notification", "m", TOPIC_ARN, b.decode(), "")),
        ),
    ):
        body = json.dumps(mutated(document, data)).encode()
        try:
            events = parse(body)
        except DomainError:
            continue
        assert all(e.recipient and e.event_id for e in events)


@FUZZ
@given(st.dictionaries(st.sampled_from(["svix-id", "svix-timestamp", "svix-signature"]), st.text()))
def test_random_svix_headers(headers: dict[str, str]) -> None:
    try:
        ResendVerifier(SECRET).verify(json.dumps(RESEND_BOUNCED).encode(), headers)
    except DomainError:
        pass


@FUZZ
@given(st.one_of(st.none(), st.text(max_size=60)))
def test_random_authorization_headers(header: str | None) -> None:
    try:
        check_basic_auth(header, user="u", password="p")
    except DomainError:
        pass


def serve_certificate(request: httpx.Request) -> httpx.Response:
    if request.url.path == CERT_PATH:
        return httpx.Response(200, content=SIGNER.cert_pem)
    return httpx.Response(200, content=b"<ConfirmSubscriptionResponse/>")


@FUZZ
@given(st.data())
def test_sns_envelopes(data: st.DataObject) -> None:
    verifier = SnsVerifier(
        topic_arns=[TOPIC_ARN], http=httpx.Client(transport=httpx.MockTransport(serve_certificate))
    )
    message = {
        "Type": "Notification",
        "MessageId": "m",
        "TopicArn": TOPIC_ARN,
        "Message": json.dumps(SES_BOUNCE),
        "Timestamp": "2016-01-27T14:59:38.237Z",
    }
    signed = SIGNER.sign(message, version=data.draw(st.sampled_from(["1", "2"])))
    assert signed["SigningCertURL"] == CERT_URL
    envelope = mutated(signed, data)
    try:
        parse_ses_events(verifier.receive(json.dumps(envelope).encode()).message)
    except DomainError:
        pass
