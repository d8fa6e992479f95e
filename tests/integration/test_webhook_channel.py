"""The webhook channel (issue 17): endpoints registered over the API, reminders delivered
by the real coordinator, queue and sender as signed POSTs to a local receiver that
verifies them with the `svix` library; the SSRF guard at registration and at send time.

Refused destinations follow the IANA special-purpose address registries as Python's
`ipaddress.is_global` reads them (RFC 6890): 127.0.0.0/8 loopback, 10/8 private (RFC
1918), 169.254/16 link-local (RFC 3927; the cloud metadata address 169.254.169.254),
::1, and IPv4-mapped forms of those (RFC 4291 §2.5.5.2).
"""

from __future__ import annotations

import base64
import json
import re
import socket
import time
import uuid
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta

import pytest
from fastapi.testclient import TestClient
from sqlalchemy import Engine, text

from coordinator.service import Coordinator
from reminder_core.clock import utcnow
from reminder_core.destinations import DestinationPolicy, parse_networks
from reminder_core.queue import PostgresQueue
from reminder_core.settings import Settings
from reminder_core.store import webhook_endpoints
from sender.providers.webhook import WebhookChannel
from tests.integration.api_support import URL, Clock, TokenFor, bearer, build_app
from tests.integration.test_api import assert_problem
from tests.support.sending import CountingProvider, make_sender
from tests.support.webhook_receiver import Receiver, running_receiver

LOCAL = DestinationPolicy(allow_http=True, allow_networks=parse_networks(["127.0.0.1/32"]))


@pytest.fixture
def local_settings(settings: Settings) -> Settings:
    """A test receiver on 127.0.0.1 over http: allowed explicitly, as an operator would."""
    return settings.model_copy(
        update={"webhook_channel_allow_http": True,
                "webhook_channel_allow_networks": ("127.0.0.1/32",)}
    )  # fmt: skip


@pytest.fixture
def now_clock() -> Clock:
    # Real time: the receiver checks webhook-timestamp within svix's 5-minute tolerance.
    return Clock(utcnow())


@pytest.fixture
def api(db: Engine, local_settings: Settings, now_clock: Clock) -> Iterator[TestClient]:
    with TestClient(build_app(local_settings, db, now_clock)) as c:
        yield c


def register(api: TestClient, headers: dict[str, str], url: str) -> dict[str, str]:
    resp = api.post("/v1/webhook-endpoints", json={"url": url}, headers=headers)
    assert resp.status_code == 201, resp.text
    body: dict[str, str] = resp.json()
    return body


def deliver(db: Engine, queue: PostgresQueue, settings: Settings, at: datetime,
            channel: WebhookChannel) -> dict[str, int]:  # fmt: skip
    Coordinator(db, queue, lookahead_s=0, batch_size=100, worker_id="c").run_once(at)
    sender = make_sender(
        db, queue, settings, CountingProvider(settings.effective_mail_dir), utcnow,
        webhooks=channel,
    )  # fmt: skip
    try:
        return sender.run_once(at).counts
    finally:
        sender.close()


def webhook_reminder(api: TestClient, headers: dict[str, str], endpoint_id: str, due: datetime,
                     title: str = "Water the plants") -> str:  # fmt: skip
    resp = api.post(
        URL,
        json={"title": title, "start_local": f"{due:%Y-%m-%dT%H:%M:%S}", "timezone": "UTC",
              "webhook_endpoint_id": endpoint_id},
        headers=headers,
    )  # fmt: skip
    assert resp.status_code == 201, resp.text
    assert resp.json()["webhook_endpoint_id"] == endpoint_id
    return str(resp.json()["id"])


def test_a_webhook_reminder_is_posted_once_signed_and_verified(
    api: TestClient, db: Engine, queue: PostgresQueue, local_settings: Settings,
    now_clock: Clock, token_for: TokenFor,
) -> None:  # fmt: skip
    headers = bearer(token_for("alice"))
    due = (now_clock.now + timedelta(seconds=2)).replace(microsecond=0)
    with running_receiver("whsec_" + base64.b64encode(b"x" * 32).decode()) as placeholder:
        endpoint = register(api, headers, placeholder.url)
    assert re.fullmatch(r"whsec_[A-Za-z0-9+/]+={0,2}", endpoint["secret"])
    with running_receiver(endpoint["secret"]) as receiver:
        with db.begin() as conn:  # the receiver's port, under the same endpoint id
            conn.execute(text("UPDATE webhook_endpoints SET url = :u WHERE id = :i"),
                         {"u": receiver.url, "i": endpoint["id"]})  # fmt: skip
        rid = webhook_reminder(api, headers, endpoint["id"], due)
        channel = WebhookChannel(LOCAL)
        try:
            assert deliver(db, queue, local_settings, due + timedelta(seconds=1), channel) == {
                "sent": 1
            }
        finally:
            channel.close()
        got = receiver.received
    key = f"{rid}-{due:%Y%m%dT%H%M%SZ}"
    assert [(h["webhook-id"], ok) for h, _, ok in got.requests] == [(key, True)]
    event = got.accepted[key]
    assert event["type"] == "reminder.due"
    assert event["data"]["title"] == "Water the plants"
    assert event["data"]["occurrence_utc"] == f"{due:%Y-%m-%dT%H:%M:%S}Z"
    with db.connect() as conn:
        row = conn.execute(
            text("SELECT status, provider, provider_message_id, recipient FROM delivery_log")
        ).one()
    assert tuple(row) == ("sent", "webhook", key, receiver.url)


def test_retry_after_is_honoured_and_the_same_webhook_id_is_resent(
    api: TestClient, db: Engine, queue: PostgresQueue, local_settings: Settings,
    now_clock: Clock, token_for: TokenFor,
) -> None:  # fmt: skip
    headers = bearer(token_for("alice"))
    due = (now_clock.now + timedelta(seconds=2)).replace(microsecond=0)
    secret = "whsec_" + base64.b64encode(b"s" * 32).decode()
    with running_receiver(secret) as receiver:
        with db.begin() as conn:
            endpoint = webhook_endpoints.insert(
                conn, user_id="alice", url=receiver.url, secret=secret, now=now_clock.now,
                max_per_user=20,
            )  # fmt: skip
        assert endpoint is not None
        webhook_reminder(api, headers, str(endpoint.id), due)
        receiver.script = [(503, {"Retry-After": "7"})]
        channel = WebhookChannel(LOCAL)
        try:
            before = utcnow()
            first = deliver(db, queue, local_settings, due + timedelta(seconds=1), channel)
            assert first == {"retry": 1}
            with db.connect() as conn:
                visible_at = conn.execute(
                    text("SELECT visible_at FROM queue_messages")
                ).scalar_one()
            assert visible_at >= before + timedelta(seconds=7)  # Retry-After: 7 s
            assert deliver(db, queue, local_settings, visible_at, channel) == {"sent": 1}
        finally:
            channel.close()
        ids = [h["webhook-id"] for h, _, _ in receiver.received.requests]
    assert len(ids) == 2
    assert ids[0] == ids[1]  # the receiver deduplicates on it
    assert len(receiver.received.accepted) == 1


@pytest.mark.parametrize(
    "url",
    [
        "https://127.0.0.1/hook",
        "https://169.254.169.254/latest/meta-data/",
        "https://10.0.0.5/hook",
        "https://[::1]/hook",
        "https://[::ffff:127.0.0.1]/hook",
        "https://localhost/hook",  # a name that resolves to a loopback address
        "http://93.184.215.14/hook",  # plain http, not allowed by default
        "https://user:pw@93.184.215.14/hook",
        "ftp://93.184.215.14/hook",
        "https://",
    ],
)
def test_registration_refuses_ssrf_destinations(
    client: TestClient, db: Engine, token_for: TokenFor, url: str
) -> None:
    resp = client.post("/v1/webhook-endpoints", json={"url": url},
                       headers=bearer(token_for("alice")))  # fmt: skip
    assert_problem(resp, 422, "url")
    with db.connect() as conn:
        assert conn.execute(text("SELECT count(*) FROM webhook_endpoints")).scalar_one() == 0


def test_a_reminder_may_only_name_its_own_endpoint(
    client: TestClient, db: Engine, token_for: TokenFor
) -> None:
    with db.begin() as conn:
        bobs = webhook_endpoints.insert(
            conn, user_id="bob", url="https://93.184.215.14/h", secret="whsec_AAAA",
            now=datetime.now(UTC), max_per_user=20,
        )  # fmt: skip
    assert bobs is not None
    for endpoint_id in (str(bobs.id), str(uuid.uuid4())):
        resp = client.post(
            URL,
            json={"title": "x", "start_local": "2030-07-01T09:00", "timezone": "UTC",
                  "webhook_endpoint_id": endpoint_id},
            headers=bearer(token_for("alice")),
        )  # fmt: skip
        assert_problem(resp, 422, "webhook_endpoint_id")
    with db.connect() as conn:
        assert conn.execute(text("SELECT count(*) FROM reminders")).scalar_one() == 0


def test_send_time_recheck_after_dns_and_no_redirects(
    api: TestClient, db: Engine, queue: PostgresQueue, local_settings: Settings,
    now_clock: Clock, token_for: TokenFor,
) -> None:  # fmt: skip
    headers = bearer(token_for("alice"))
    secret = "whsec_" + base64.b64encode(b"r" * 32).decode()
    with running_receiver(secret) as receiver:
        port = receiver.server_address[1]
        with db.begin() as conn:
            rebinding = webhook_endpoints.insert(
                conn, user_id="alice", url=f"http://hooks.example.test:{port}/h", secret=secret,
                now=now_clock.now, max_per_user=20,
            )  # fmt: skip
            redirecting = webhook_endpoints.insert(
                conn, user_id="alice", url=receiver.url, secret=secret, now=now_clock.now,
                max_per_user=20,
            )  # fmt: skip
        assert rebinding is not None
        assert redirecting is not None
        due = (now_clock.now + timedelta(seconds=2)).replace(microsecond=0)
        webhook_reminder(api, headers, str(rebinding.id), due, title="Rebound")
        webhook_reminder(api, headers, str(redirecting.id), due, title="Redirected")
        receiver.script = [(302, {"Location": "http://169.254.169.254/latest/meta-data/"})]
        # The name now resolves to the metadata address (a DNS rebinding after
        # registration): refused at send time, nothing sent there.
        channel = WebhookChannel(LOCAL, resolve=lambda _host, _port: ["169.254.169.254"])
        try:
            counts = deliver(db, queue, local_settings, due + timedelta(seconds=1), channel)
        finally:
            channel.close()
        requests = receiver.received.requests
    assert counts == {"failed": 2}
    assert len(requests) == 1  # the redirect's; not followed anywhere
    with db.connect() as conn:
        errors = dict(
            conn.execute(
                text("SELECT r.title, d.error FROM delivery_log d JOIN reminders r"
                     " ON r.id = d.reminder_id")
            ).all()
        )  # fmt: skip
    assert "resolves to 169.254.169.254" in errors["Rebound"]
    assert "redirect 302 refused" in errors["Redirected"]


def test_endpoints_list_and_delete(api: TestClient, token_for: TokenFor) -> None:
    headers = bearer(token_for("alice"))
    made = register(api, headers, "http://127.0.0.1:9/h")
    listed = api.get("/v1/webhook-endpoints", headers=headers)
    assert [e["id"] for e in listed.json()] == [made["id"]]
    assert api.get("/v1/webhook-endpoints", headers=bearer(token_for("bob"))).json() == []
    assert api.delete(f"/v1/webhook-endpoints/{made['id']}",
                      headers=bearer(token_for("bob"))).status_code == 404  # fmt: skip
    assert api.delete(f"/v1/webhook-endpoints/{made['id']}", headers=headers).status_code == 204
    assert api.get("/v1/webhook-endpoints", headers=headers).json() == []


def test_receiver_rejects_a_bad_signature(now_clock: Clock) -> None:
    # The receiver itself can fail: a request signed with another secret is refused.
    import httpx

    good = "whsec_" + base64.b64encode(b"g" * 32).decode()
    with running_receiver(good) as receiver:
        resp = httpx.post(
            receiver.url, content=b"{}", trust_env=False,
            headers={"webhook-id": "x", "webhook-timestamp": str(int(now_clock.now.timestamp())),
                     "webhook-signature": "v1,AAAA"},
        )  # fmt: skip
    assert resp.status_code == 401
    assert receiver.received.requests[0][2] is False


_ = Receiver  # re-exported type for readers of this module


def test_a_failing_host_opens_its_own_breaker_only(now_clock: Clock) -> None:
    from reminder_core.errors import TransientDeliveryError
    from sender.providers.webhook import WebhookDelivery

    secret = "whsec_" + base64.b64encode(b"b" * 32).decode()
    with running_receiver(secret) as receiver:
        port = receiver.server_address[1]
        receiver.script = [(503, {}), (503, {})]
        # Two names for the receiver: one breaker each (pybreaker, fail_max 2).
        channel = WebhookChannel(LOCAL, fail_max=2, reset_timeout_s=60,
                                 resolve=lambda _host, _port: ["127.0.0.1"])  # fmt: skip
        failing = WebhookDelivery(f"http://bad.example.test:{port}/h", secret, {"n": 1})
        healthy = WebhookDelivery(f"http://good.example.test:{port}/h", secret, {"n": 2})
        try:
            for n in range(3):
                with pytest.raises(TransientDeliveryError) as raised:
                    channel.send(failing, idempotency_key=f"k{n}", now=now_clock.now)
            assert "breaker of bad.example.test is open" in str(raised.value)
            assert raised.value.retry_after_s == 60
            assert len(receiver.received.requests) == 2  # the third was not sent
            receipt = channel.send(healthy, idempotency_key="k-good", now=now_clock.now)
        finally:
            channel.close()
    assert receipt.provider_message_id == "k-good"
    assert receiver.received.requests[-1][0]["host"] == f"good.example.test:{port}"


def test_the_receiver_counts_a_request_cut_off_mid_body_apart_from_bad_signatures() -> None:
    """The chaos test's receiver (tests/support/webhook_receiver.py): a sender killed -9
    between writing a POST's headers and its body (httpcore writes them separately) leaves
    a request shorter than its Content-Length (RFC 9112 §6.3: incomplete). That is not a
    signature failure and must not be recorded as one."""
    secret = "whsec_" + base64.b64encode(b"receiver-self-test-secret-32byte").decode()
    with running_receiver(secret) as receiver:
        host, port = receiver.server_address[:2]
        with socket.create_connection((str(host), int(port))) as sock:
            sock.sendall(
                b"POST /hooks/reminders HTTP/1.1\r\nHost: x\r\nContent-Type: application/json"
                b'\r\nContent-Length: 100\r\n\r\n{"type":'
            )
            sock.shutdown(socket.SHUT_WR)
            sock.recv(1)  # the receiver closes without an answer
        deadline = datetime.now(UTC) + timedelta(seconds=5)
        while receiver.received.aborted == 0 and datetime.now(UTC) < deadline:
            time.sleep(0.01)
        assert receiver.received.aborted == 1
        assert receiver.received.requests == []


def test_a_suppressed_email_address_does_not_stop_its_users_webhook_reminder(
    api: TestClient, db: Engine, queue: PostgresQueue, local_settings: Settings,
    now_clock: Clock, token_for: TokenFor,
) -> None:  # fmt: skip
    """The suppression list is of email addresses (docs/design.md, "Suppression list"):
    in one batch, alice's email reminder is refused and her webhook reminder posted."""
    headers = bearer(token_for("alice"))
    address = json.loads(local_settings.effective_profiles_file.read_text())["alice"]["email"]
    with db.begin() as conn:
        conn.execute(
            text(
                "INSERT INTO suppressions (email, reason, created_at) VALUES (:e, 'bounce', now())"
            ),
            {"e": address.strip().casefold()},
        )
    due = (now_clock.now + timedelta(seconds=2)).replace(microsecond=0)
    with running_receiver("whsec_" + base64.b64encode(b"y" * 32).decode()) as placeholder:
        endpoint = register(api, headers, placeholder.url)
    with running_receiver(endpoint["secret"]) as receiver:
        with db.begin() as conn:
            conn.execute(text("UPDATE webhook_endpoints SET url = :u WHERE id = :i"),
                         {"u": receiver.url, "i": endpoint["id"]})  # fmt: skip
        hooked = webhook_reminder(api, headers, endpoint["id"], due)
        resp = api.post(
            URL, json={"title": "By email", "start_local": f"{due:%Y-%m-%dT%H:%M:%S}",
                       "timezone": "UTC"}, headers=headers,
        )  # fmt: skip
        assert resp.status_code == 201, resp.text
        channel = WebhookChannel(LOCAL)
        try:
            counts = deliver(db, queue, local_settings, due + timedelta(seconds=1), channel)
        finally:
            channel.close()
        got = receiver.received
    assert counts == {"sent": 1, "suppressed": 1}
    assert list(got.accepted) == [f"{hooked}-{due:%Y%m%dT%H%M%SZ}"]
    with db.connect() as conn:
        refused = conn.execute(
            text("SELECT status, error FROM delivery_log WHERE reminder_id = :r"),
            {"r": resp.json()["id"]},
        ).one()
    assert refused.status == "suppressed"
    assert f"{address.strip().casefold()} is on the suppression list" in refused.error
