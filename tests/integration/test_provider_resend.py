"""The Resend provider against a real local HTTP server speaking the Resend API
(tests/support/fake_provider.py): the wire request and each error class.

Expected values from Resend's API reference: `POST /emails` with `Authorization: Bearer
<key>`, JSON {from, to, subject, text, html}, answer 200 {"id"}; the `Idempotency-Key`
header makes a retry with the same key return the first id without sending again; 429
carries `Retry-After` (RFC 9110 §10.2.3, delay-seconds). Transient/permanent/ambiguous
from docs/design.md, "Retries and the dead-letter queue" and "Provider failover".
"""

from __future__ import annotations

import dataclasses
import socket
import time
from collections.abc import Iterator

import pytest

from reminder_core.errors import PermanentDeliveryError, TransientDeliveryError
from sender.providers.resend import ResendProvider
from tests.support.emails import EMAIL, KEY
from tests.support.fake_provider import FakeProvider
from tests.support.providers import resend_provider


@pytest.fixture(scope="module")
def server() -> Iterator[FakeProvider]:
    provider = FakeProvider().start()
    yield provider
    provider.stop()


@pytest.fixture
def fake(server: FakeProvider) -> FakeProvider:
    with server.state.lock:
        server.state.reset()
    return server


def resend(url: str, *, read_timeout_s: float = 5.0) -> ResendProvider:
    return resend_provider(url, name="resend", api_key="re_test_key", read_timeout_s=read_timeout_s)


def test_wire_request_carries_the_key_both_parts_and_the_bearer_token(fake) -> None:
    receipt = resend(fake.url).send(EMAIL, idempotency_key=KEY)
    (message,) = fake.state.accepted.values()
    assert receipt.provider == "resend"
    assert receipt.provider_message_id == message["id"]
    assert message["key"] == KEY  # the Idempotency-Key header
    assert message["authorization"] == "Bearer re_test_key"
    assert message["from"] == "Reminders <reminders@example.com>"
    assert message["to"] == ["Alice <alice@example.org>"]
    assert message["subject"] == "Reminder: Stand-up — café"
    assert message["text"] == EMAIL.text
    assert message["html"] == EMAIL.html


def test_a_retry_with_the_same_key_is_not_sent_again(fake) -> None:
    provider = resend(fake.url)
    first = provider.send(EMAIL, idempotency_key=KEY)
    again = provider.send(EMAIL, idempotency_key=KEY)
    assert again == first
    assert len(fake.state.accepted) == 1
    assert fake.state.duplicates == 1


def test_the_same_key_with_another_payload_is_409_ambiguous_and_sends_nothing(fake) -> None:
    """Resend: 409 `invalid_idempotent_request`, "this idempotency key has already been
    used on a request that had a different payload" (resend.com/docs/dashboard/emails/
    idempotency-keys). The adapter cannot tell whether the first was delivered: an
    ambiguous transient error (no failover to a provider that would send it again)."""
    provider = resend(fake.url)
    provider.send(EMAIL, idempotency_key=KEY)
    changed = dataclasses.replace(EMAIL, text=EMAIL.text + " (edited)")
    with pytest.raises(TransientDeliveryError) as info:
        provider.send(changed, idempotency_key=KEY)
    assert info.value.ambiguous is True
    assert "invalid_idempotent_request" in str(info.value)
    assert len(fake.state.accepted) == 1
    assert fake.state.resent == []
    assert [r["status"] for r in fake.state.requests] == [200, "invalid_idempotent_request"]


@pytest.mark.parametrize(
    "body",
    [b'{"id": null}', b'{"id": 12345}', b'{"id": ""}', b'{"id": {"a": 1}}', b"not json",
     b'{"id": ' + b"[" * 200_000 + b"]" * 200_000 + b"}"],
    ids=["null", "number", "empty", "object", "not-json", "nested-200000-deep"],
)  # fmt: skip
def test_a_2xx_without_a_string_id_is_ambiguous(fake, body: bytes) -> None:
    """Resend answers a send 200 {"id": "<uuid>"} (API reference, "Send Email"): any
    other 2xx says nothing of the message, which Resend may have taken, so the retry
    must stay on it (ambiguous); never a receipt with "None" or "12345" for an id, and
    never a RecursionError from JSON nested deeper than Python parses."""
    fake.inject({"kind": "raw", "status": 200, "body_hex": body.hex()})
    with pytest.raises(TransientDeliveryError, match="unreadable success answer") as info:
        resend(fake.url).send(EMAIL, idempotency_key=KEY)
    assert info.value.ambiguous is True


def test_429_is_transient_with_retry_after(fake) -> None:
    fake.inject({"kind": "429", "retry_after": 2})
    with pytest.raises(TransientDeliveryError) as info:
        resend(fake.url).send(EMAIL, idempotency_key=KEY)
    assert info.value.retry_after_s == 2.0
    assert info.value.ambiguous is False


def test_500_is_transient_not_ambiguous(fake) -> None:
    fake.inject({"kind": "500"})
    with pytest.raises(TransientDeliveryError, match="HTTP 500") as info:
        resend(fake.url).send(EMAIL, idempotency_key=KEY)
    assert info.value.ambiguous is False


def test_400_is_permanent(fake) -> None:
    fake.inject({"kind": "400"})
    with pytest.raises(PermanentDeliveryError, match="HTTP 400"):
        resend(fake.url).send(EMAIL, idempotency_key=KEY)


def test_dropped_connection_after_the_request_is_ambiguous(fake) -> None:
    fake.inject({"kind": "drop"})
    with pytest.raises(TransientDeliveryError) as info:
        resend(fake.url).send(EMAIL, idempotency_key=KEY)
    assert info.value.ambiguous is True


def test_read_timeout_is_ambiguous(fake) -> None:
    fake.inject({"kind": "timeout", "seconds": 0.5})
    with pytest.raises(TransientDeliveryError) as info:
        resend(fake.url, read_timeout_s=0.2).send(EMAIL, idempotency_key=KEY)
    assert info.value.ambiguous is True
    # The server did take it, late: the retry must carry the same key (docs/design.md,
    # "Provider failover").
    deadline = time.monotonic() + 2
    while not fake.state.accepted and time.monotonic() < deadline:
        time.sleep(0.05)
    assert list(fake.state.accepted) == [KEY]
    time.sleep(0.05)  # let its late answer hit the closed socket while output is captured


def test_connection_refused_is_transient_not_ambiguous() -> None:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))  # bound, never listening: connections are refused
        url = f"http://127.0.0.1:{s.getsockname()[1]}"
        with pytest.raises(TransientDeliveryError, match="cannot connect") as info:
            resend(url).send(EMAIL, idempotency_key=KEY)
    assert info.value.ambiguous is False
