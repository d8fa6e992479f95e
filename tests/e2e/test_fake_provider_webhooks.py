"""The fake provider's webhook mode (tests/support/fake_provider.py, `/_webhooks`): what
the crash-duplicates storm relies on to feed acceptances back to the API.

The fake runs in this process (`FakeProvider().start()`), the receiver is a small local
HTTP server that records every request; signatures are checked with svix's own
`Webhook.verify`, as the API's Resend endpoint does.
"""

from __future__ import annotations

import json
import socket
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import httpx
import pytest
from svix.webhooks import Webhook

from tests.support.fake_provider import FakeProvider, new_webhook_secret

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(60)]

DELAY_S = 0.2


@dataclass
class Received:
    headers: dict[str, str]
    body: bytes
    at: float

    @property
    def document(self) -> dict[str, Any]:
        document: dict[str, Any] = json.loads(self.body)
        return document


@dataclass
class Receiver:
    """A webhook endpoint: records each POST, answers the next status of `script`
    (200 once it is used up) with a JSON body {"status": "processed"}."""

    server: ThreadingHTTPServer
    received: list[Received] = field(default_factory=list)
    script: list[int] = field(default_factory=list)
    lock: threading.Lock = field(default_factory=threading.Lock)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.server.server_address[1]}/hook"

    def wait_for(self, count: int, timeout: float = 10) -> list[Received]:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            with self.lock:
                if len(self.received) >= count:
                    return list(self.received)
            time.sleep(0.02)
        raise AssertionError(f"{len(self.received)} webhooks received, expected {count}")


@pytest.fixture
def receiver() -> Iterator[Receiver]:
    holder: list[Receiver] = []

    class Handler(BaseHTTPRequestHandler):
        def log_message(self, format: str, *args: Any) -> None:
            pass

        def do_POST(self) -> None:
            body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
            rec = holder[0]
            with rec.lock:
                rec.received.append(Received(dict(self.headers.items()), body, time.time()))
                status = rec.script.pop(0) if rec.script else 200
            data = json.dumps({"status": "processed" if status == 200 else "error"}).encode()
            self.send_response(status)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    server.daemon_threads = True
    holder.append(Receiver(server))
    thread = threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.05})
    thread.start()
    yield holder[0]
    server.shutdown()
    server.server_close()
    thread.join(5)


@pytest.fixture
def fake() -> Iterator[FakeProvider]:
    provider = FakeProvider().start()
    yield provider
    provider.stop()


EMAIL = {
    "from": "Reminders <reminders@example.com>",
    "to": "alice@example.com",
    "subject": "Water the plants",
    "text": "Water the plants",
    "html": "<p>Water the plants</p>",
}


def send(fake: FakeProvider, key: str) -> str:
    """POST /emails as the Resend adapter does; the message id answered."""
    response = httpx.post(
        f"{fake.url}/emails",
        json={**EMAIL, "tags": [{"name": "idempotency_key", "value": key}]},
        headers={"Idempotency-Key": key, "Authorization": "Bearer test-key"},
        timeout=10,
    )
    response.raise_for_status()
    message_id: str = response.json()["id"]
    return message_id


def send_and_vanish(fake: FakeProvider, key: str) -> None:
    """POST /emails and close the connection at once, as a sender killed mid-call: the
    fake (with latency) accepts it after the client is gone."""
    body = json.dumps({**EMAIL, "tags": [{"name": "idempotency_key", "value": key}]}).encode()
    request = (
        f"POST /emails HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n"
        f"Idempotency-Key: {key}\r\nContent-Length: {len(body)}\r\n\r\n"
    ).encode() + body
    with socket.create_connection(fake.server.server_address[:2], timeout=5) as sock:
        sock.sendall(request)


def stats(fake: FakeProvider) -> dict[str, Any]:
    stats: dict[str, Any] = httpx.get(f"{fake.url}/_stats", timeout=10).json()
    return stats


def verified(secret: str, got: Received) -> dict[str, Any]:
    """The webhook's document once its Svix signature verifies (raises otherwise)."""
    Webhook(secret).verify(got.body, got.headers)
    assert got.headers["svix-id"].startswith("msg_")
    assert abs(int(got.headers["svix-timestamp"]) - time.time()) < 60
    return got.document


def assert_sent_event(document: dict[str, Any], message_id: str, key: str) -> None:
    assert document["type"] == "email.sent"
    assert document["created_at"].endswith("Z")
    data = document["data"]
    assert data["email_id"] == message_id
    assert data["to"] == ["alice@example.com"]
    assert data["subject"] == EMAIL["subject"]
    assert data["from"] == EMAIL["from"]
    assert data["tags"] == {"idempotency_key": key}
    assert data["created_at"].endswith("+00:00")


def test_every_accepted_message_gets_a_signed_email_sent_webhook(
    fake: FakeProvider, receiver: Receiver
) -> None:
    """One signed email.sent per accepted message, `delay_s` after acceptance: a first
    acceptance, none for a call the fake deduplicates, one per resent email without
    dedupe, and one for a call whose client was gone when it was accepted."""
    secret = new_webhook_secret()
    assert httpx.get(f"{fake.url}/_stats").json()["webhooks"]["enabled"] is False
    response = httpx.post(
        f"{fake.url}/_webhooks",
        json={"url": receiver.url, "secret": secret, "delay_s": DELAY_S},
    )
    assert response.status_code == 200, response.text
    assert response.json()["webhooks"]["secret"] == "whsec_..."  # never echoed

    first = send(fake, "key-1")
    [got] = receiver.wait_for(1)
    assert_sent_event(verified(secret, got), first, "key-1")
    accepted_at = stats(fake)["messages"][0]["at"]
    assert got.at - accepted_at >= DELAY_S

    assert send(fake, "key-1") == first  # deduplicated: no email, so no webhook
    time.sleep(DELAY_S * 3)
    assert len(receiver.received) == 1

    httpx.post(f"{fake.url}/_mode", json={"dedupe": False}).raise_for_status()
    resent = send(fake, "key-1")
    assert resent != first
    got = receiver.wait_for(2)[1]
    assert_sent_event(verified(secret, got), resent, "key-1")
    assert got.headers["svix-id"] != receiver.received[0].headers["svix-id"]

    httpx.post(f"{fake.url}/_faults", json={"latency_s": 0.3}).raise_for_status()
    send_and_vanish(fake, "key-2")
    got = receiver.wait_for(3)[2]
    document = verified(secret, got)
    [gone] = [m for m in stats(fake)["messages"] if m["key"] == "key-2"]
    assert gone["client_gone"] is True
    assert_sent_event(document, gone["id"], "key-2")

    figures = stats(fake)
    assert figures["webhooks"] == {
        "enabled": True,
        "posted": 3,
        "failed": 0,
        "pending": 0,
        "retried": 0,
        "answers": {"processed": 3},
        "last_error": None,
    }
    by_key = {(m["key"], m["id"]): m["webhooks"] for m in figures["messages"]}
    [entry] = by_key[("key-1", resent)]
    assert entry["status"] == "posted"
    assert entry["http_status"] == 200
    assert entry["answer"] == "processed"
    assert entry["attempts"] == 1
    assert entry["id"] == receiver.received[1].headers["svix-id"]


def test_failed_posts_are_retried_with_the_same_id_and_reset_turns_webhooks_off(
    fake: FakeProvider, receiver: Receiver
) -> None:
    """A 5xx answer is tried again after the backoff (same svix-id, freshly signed) until
    a 2xx; a 4xx is given up at once; a receiver that keeps failing is given up after the
    last pause; /_reset turns webhooks off."""
    secret = new_webhook_secret()
    fake.set_webhooks(receiver.url, secret, delay_s=0.05, retry_s=(0.1, 0.2))

    receiver.script = [503, 500]
    message_id = send(fake, "key-r")
    tries = receiver.wait_for(3)
    assert len({t.headers["svix-id"] for t in tries}) == 1
    for t in tries:
        assert_sent_event(verified(secret, t), message_id, "key-r")
    assert tries[1].at - tries[0].at >= 0.1
    assert tries[2].at - tries[1].at >= 0.2

    receiver.script = [400]
    send(fake, "key-4xx")
    receiver.wait_for(4)

    receiver.script = [503, 503, 503]
    send(fake, "key-down")
    receiver.wait_for(7)
    deadline = time.monotonic() + 5
    while stats(fake)["webhooks"]["pending"] and time.monotonic() < deadline:
        time.sleep(0.05)
    figures = stats(fake)["webhooks"]
    assert figures["posted"] == 1
    assert figures["failed"] == 2
    assert figures["retried"] == 4
    assert figures["pending"] == 0
    assert "HTTP 503" in figures["last_error"]
    assert len(receiver.received) == 7  # the 400 was not tried again

    httpx.post(f"{fake.url}/_reset").raise_for_status()
    send(fake, "key-after-reset")
    time.sleep(0.5)
    assert len(receiver.received) == 7
    assert stats(fake)["webhooks"]["enabled"] is False

    refused = httpx.post(f"{fake.url}/_webhooks", json={"url": receiver.url, "secret": "x"})
    assert refused.status_code == 400
