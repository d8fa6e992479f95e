"""POST /v1/webhooks/{ses,resend,postmark} through the API against the real database
(issue 6; docs/design.md, "Suppression list" and "Webhooks").

Every request is signed in the test with throwaway keys: an SNS notification with a test
RSA key and self-signed certificate, served over TLS by a local stand-in for
sns.us-east-1.amazonaws.com (tests.support.sns: the app's fetch client routes that one
host to it and refuses every other); Resend payloads with svix's `Webhook.sign` and a
test secret; Postmark with basic auth credentials from the test settings.

Payloads follow each provider's documented examples (example.com addresses): the SES
bounce and complaint examples of the SES Developer Guide, Resend's `email.bounced`, and
Postmark's bounce webhook (ID 4323372036854775807, beyond 2**53). Expected statuses come
from the issue: bad, missing, expired or malformed signatures and wrong credentials 401
with every table unchanged; a replay 2xx with every table unchanged; malformed bodies
400; bodies over the limit 413; errors as RFC 9457 problem+json.
"""

from __future__ import annotations

import base64
import hashlib
import json
import os
import socket
import uuid
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from typing import Any

import httpx
import pytest
from fastapi.testclient import TestClient
from pydantic import SecretStr
from sqlalchemy import Engine, text
from svix.webhooks import Webhook

from coordinator.service import Coordinator
from reminder_api.app import create_app
from reminder_core.profiles import LocalProfileSource
from reminder_core.queue import PostgresQueue
from reminder_core.settings import Settings
from tests.integration.api_support import Clock, build_app
from tests.integration.test_api import assert_problem
from tests.support.fake_provider import FakeProvider
from tests.support.providers import resend_provider
from tests.support.sending import Clock as SenderClock
from tests.support.sending import make_sender
from tests.support.sns import (
    CERT_PATH,
    SNS_HOST,
    TOPIC_ARN,
    FakeSnsHost,
    SnsSigner,
    fake_sns_host,
    notification,
    subscription_confirmation,
)
from tests.support.webhook_payloads import (
    POSTMARK_BOUNCE,
    RESEND_BOUNCED,
    RESEND_SENT,
    SES_BOUNCE,
    SES_COMPLAINT,
    SES_SEND,
)

SES_URL = "/v1/webhooks/ses"
RESEND_URL = "/v1/webhooks/resend"
POSTMARK_URL = "/v1/webhooks/postmark"
RESEND_SECRET = "whsec_" + base64.b64encode(os.urandom(24)).decode()
POSTMARK_USER, POSTMARK_PASSWORD = "postmark", "s3cret:with colon"
MAX_BODY = 64 * 1024

SES_MESSAGE_ID = SES_BOUNCE["mail"]["messageId"]
SES_COMPLAINT_MESSAGE_ID = SES_COMPLAINT["mail"]["messageId"]
RESEND_EMAIL_ID = RESEND_BOUNCED["data"]["email_id"]
POSTMARK_MESSAGE_ID = POSTMARK_BOUNCE["MessageID"]


@pytest.fixture(scope="module")
def signer() -> SnsSigner:
    return SnsSigner()


@pytest.fixture(scope="module")
def sns_host(signer: SnsSigner) -> Iterator[FakeSnsHost]:
    with fake_sns_host(signer.cert_pem) as host:
        yield host


@pytest.fixture
def client(
    db: Engine, settings: Settings, clock: Clock, sns_host: FakeSnsHost
) -> Iterator[TestClient]:
    configured = settings.model_copy(
        update={
            "webhook_sns_topic_arns": (TOPIC_ARN,),
            "webhook_resend_secret": SecretStr(RESEND_SECRET),
            "webhook_postmark_user": SecretStr(POSTMARK_USER),
            "webhook_postmark_password": SecretStr(POSTMARK_PASSWORD),
            "webhook_max_body_bytes": MAX_BODY,
        }
    )
    sns_host.requests.clear()
    app = create_app(
        configured,
        db,
        LocalProfileSource(configured.effective_profiles_file),
        clock=clock,
        webhook_http=sns_host.client(),
    )
    with TestClient(app) as c:
        yield c


def snapshot(engine: Engine) -> dict[str, str]:
    """An md5 of every row of every table (but alembic_version): equal snapshots mean
    nothing changed anywhere."""
    with engine.connect() as conn:
        tables = conn.execute(
            text(
                "SELECT tablename FROM pg_tables WHERE schemaname = 'public'"
                " AND tablename <> 'alembic_version' ORDER BY 1"
            )
        ).scalars()
        return {
            t: conn.execute(
                text(
                    f"SELECT md5(coalesce(string_agg(r::text, '|' ORDER BY r::text), ''))"
                    f' FROM "{t}" AS r'
                )
            ).scalar_one()
            for t in list(tables)
        }


def sent_delivery(engine: Engine, *, provider: str, message_id: str, recipient: str) -> uuid.UUID:
    """A pending reminder of alice's and one `sent` delivery of it through `provider`."""
    now = datetime.now(UTC)
    with engine.begin() as conn:
        reminder_id = conn.execute(
            text(
                "INSERT INTO reminders (user_id, title, start_local, timezone, rrule,"
                " next_run_utc, status) VALUES ('alice', 'Standup', :local, 'UTC',"
                " 'FREQ=DAILY', :next, 'pending') RETURNING id"
            ),
            {
                "local": (now - timedelta(days=1)).replace(tzinfo=None),
                "next": now + timedelta(days=1),
            },
        ).scalar_one()
        return conn.execute(
            text(
                "INSERT INTO delivery_log (reminder_id, user_id, run_time_utc, status, provider,"
                " provider_message_id, recipient, sent_at) VALUES (:r, 'alice', :run, 'sent',"
                " :provider, :mid, :recipient, :run) RETURNING id"
            ),
            {
                "r": reminder_id,
                "run": now - timedelta(days=1),
                "provider": provider,
                "mid": message_id,
                "recipient": recipient,
            },
        ).scalar_one()


def delivery_status(engine: Engine, delivery_id: uuid.UUID) -> str:
    with engine.connect() as conn:
        return conn.execute(
            text("SELECT status FROM delivery_log WHERE id = :id"), {"id": delivery_id}
        ).scalar_one()


def suppressed(engine: Engine) -> list[str]:
    with engine.connect() as conn:
        return list(conn.execute(text("SELECT email FROM suppressions ORDER BY 1")).scalars())


def stored_events(engine: Engine) -> list[tuple[str, str]]:
    with engine.connect() as conn:
        rows = conn.execute(text("SELECT provider, event_id FROM webhook_events ORDER BY 2"))
        return [(r.provider, r.event_id) for r in rows]


def raw(document: object) -> bytes:
    return json.dumps(document).encode()


# == Amazon SES through SNS ===========================================================


def ses_notification(
    signer: SnsSigner, ses: dict[str, Any], *, message_id: str = "sns-msg-1", **sign: Any
) -> bytes:
    return raw(signer.sign(notification(json.dumps(ses), message_id=message_id), **sign))


@pytest.mark.parametrize("version", ["1", "2"])
def test_ses_hard_bounce_is_applied_once(
    client: TestClient, db: Engine, signer: SnsSigner, sns_host: FakeSnsHost, version: str
) -> None:
    delivery = sent_delivery(
        db, provider="ses", message_id=SES_MESSAGE_ID, recipient="jane@example.com"
    )
    body = ses_notification(signer, SES_BOUNCE, version=version)

    resp = client.post(SES_URL, content=body, headers={"Content-Type": "text/plain"})

    assert resp.status_code == 200, resp.text
    assert resp.json() == {"status": "processed", "events": 1, "duplicates": 0}
    assert delivery_status(db, delivery) == "bounced"
    assert suppressed(db) == ["jane@example.com"]
    assert stored_events(db) == [("ses", "sns-msg-1#0")]
    assert sns_host.requests == [CERT_PATH]  # over TLS, for the pinned host name

    # SNS redelivers the same message: 2xx, nothing changes anywhere.
    before = snapshot(db)
    again = client.post(SES_URL, content=body, headers={"Content-Type": "text/plain"})
    assert again.status_code == 200, again.text
    assert again.json() == {"status": "processed", "events": 1, "duplicates": 1}
    assert snapshot(db) == before


def test_ses_complaint_is_applied(client: TestClient, db: Engine, signer: SnsSigner) -> None:
    delivery = sent_delivery(
        db, provider="ses", message_id=SES_COMPLAINT_MESSAGE_ID, recipient="richard@example.com"
    )
    resp = client.post(SES_URL, content=ses_notification(signer, SES_COMPLAINT, version="1"))
    assert resp.status_code == 200, resp.text
    assert delivery_status(db, delivery) == "complained"
    assert suppressed(db) == ["richard@example.com"]


def test_ses_unknown_message_id_is_acknowledged(
    client: TestClient, db: Engine, signer: SnsSigner
) -> None:
    resp = client.post(SES_URL, content=ses_notification(signer, SES_BOUNCE))
    assert resp.status_code == 200, resp.text
    assert stored_events(db) == [("ses", "sns-msg-1#0")]
    assert suppressed(db) == []


def flip_byte(body: bytes, marker: bytes) -> bytes:
    """`body` with one byte changed: the first byte of `marker`, XOR 1 (still JSON)."""
    index = body.index(marker)
    return body[:index] + bytes([body[index] ^ 1]) + body[index + 1 :]


@pytest.mark.parametrize(
    "forge",
    [
        "tampered",
        "unsigned",
        "signature-not-base64",
        "unknown-version",
        "look-alike-host",
        "host-in-path",
        "http",
        "userinfo",
    ],
)
def test_ses_bad_signatures_answer_401_and_change_nothing(
    client: TestClient, db: Engine, signer: SnsSigner, sns_host: FakeSnsHost, forge: str
) -> None:
    sent_delivery(db, provider="ses", message_id=SES_MESSAGE_ID, recipient="jane@example.com")
    cert_urls = {
        "look-alike-host": f"https://{SNS_HOST}.evil.com{CERT_PATH}",
        "host-in-path": f"https://evil.com/{SNS_HOST}{CERT_PATH}",
        "http": f"http://{SNS_HOST}{CERT_PATH}",
        "userinfo": f"https://{SNS_HOST}@evil.com{CERT_PATH}",
    }
    signed = signer.sign(
        notification(json.dumps(SES_BOUNCE), message_id="sns-msg-1"),
        cert_url=cert_urls.get(forge, f"https://{SNS_HOST}{CERT_PATH}"),
    )
    body = raw(signed)
    if forge == "tampered":
        body = flip_byte(body, b"jane@example.com")
    elif forge == "unsigned":
        body = raw({k: v for k, v in signed.items() if k != "Signature"})
    elif forge == "signature-not-base64":
        body = raw({**signed, "Signature": "@@not base64@@"})
    elif forge == "unknown-version":
        body = raw({**signed, "SignatureVersion": "3"})
    before = snapshot(db)

    resp = client.post(SES_URL, content=body)

    assert_problem(resp, 401)
    assert snapshot(db) == before
    if forge in cert_urls:
        assert sns_host.requests == []  # refused before any fetch


def test_ses_notification_from_another_topic_is_refused(
    client: TestClient, db: Engine, signer: SnsSigner
) -> None:
    other = "arn:aws:sns:us-east-1:210987654321:someone-else"
    body = raw(signer.sign(notification(json.dumps(SES_BOUNCE), message_id="m", topic_arn=other)))
    before = snapshot(db)
    assert_problem(client.post(SES_URL, content=body), 403)
    assert snapshot(db) == before


def test_ses_subscription_confirmation_is_confirmed(
    client: TestClient, db: Engine, signer: SnsSigner, sns_host: FakeSnsHost
) -> None:
    confirmation = subscription_confirmation()
    before = snapshot(db)
    resp = client.post(SES_URL, content=raw(signer.sign(confirmation)))
    assert resp.status_code == 200, resp.text
    assert resp.json()["status"] == "confirmed"
    assert sns_host.requests[-1] == confirmation["SubscribeURL"].removeprefix(f"https://{SNS_HOST}")
    assert snapshot(db) == before


def test_ses_subscription_of_another_topic_is_ignored(
    client: TestClient, signer: SnsSigner, sns_host: FakeSnsHost
) -> None:
    other = "arn:aws:sns:us-east-1:210987654321:someone-else"
    resp = client.post(
        SES_URL, content=raw(signer.sign(subscription_confirmation(topic_arn=other)))
    )
    assert resp.status_code == 200, resp.text
    assert resp.json()["status"] == "ignored"
    assert not any("ConfirmSubscription" in r for r in sns_host.requests)


@pytest.mark.parametrize("body", [b"{not json", b"", b"[1]", b"\xff\xfe"])
def test_ses_malformed_body_answers_400(client: TestClient, db: Engine, body: bytes) -> None:
    before = snapshot(db)
    assert_problem(client.post(SES_URL, content=body), 400)
    assert snapshot(db) == before


def test_ses_oversize_body_answers_413(client: TestClient, db: Engine, signer: SnsSigner) -> None:
    big = raw(signer.sign(notification("x" * MAX_BODY, message_id="m")))
    before = snapshot(db)
    assert_problem(client.post(SES_URL, content=big), 413)

    def chunks() -> Iterator[bytes]:  # no Content-Length: counted as it arrives
        for start in range(0, len(big), 4096):
            yield big[start : start + 4096]

    assert_problem(client.post(SES_URL, content=chunks()), 413)
    assert snapshot(db) == before


def test_the_webhook_limit_is_its_own(client: TestClient, signer: SnsSigner) -> None:
    # Over the API's 64 KiB JSON limit would not matter here: the webhook limit applies.
    body = raw(signer.sign(notification("x" * (MAX_BODY - 2000), message_id="m")))
    assert client.post(SES_URL, content=body).status_code == 200


# == Resend ===========================================================================


def resend_headers(
    body: bytes, *, msg_id: str = "msg_2KWPBgLlAfxdpx2AI54pPJ85f4W", at: datetime | None = None
) -> dict[str, str]:
    when = at or datetime.now(UTC)
    return {
        "Content-Type": "application/json",
        "svix-id": msg_id,
        "svix-timestamp": str(int(when.timestamp())),
        "svix-signature": Webhook(RESEND_SECRET).sign(msg_id, when, body.decode()),
    }


def test_resend_bounce_is_applied_once(client: TestClient, db: Engine) -> None:
    delivery = sent_delivery(
        db, provider="resend", message_id=RESEND_EMAIL_ID, recipient="delivered@example.com"
    )
    body = raw(RESEND_BOUNCED)
    headers = resend_headers(body)

    resp = client.post(RESEND_URL, content=body, headers=headers)

    assert resp.status_code == 200, resp.text
    assert resp.json() == {"status": "processed", "events": 1, "duplicates": 0}
    assert delivery_status(db, delivery) == "bounced"
    assert suppressed(db) == ["delivered@example.com"]
    assert stored_events(db) == [("resend", "msg_2KWPBgLlAfxdpx2AI54pPJ85f4W")]

    # Resend retries with the same svix-id inside the tolerance: 2xx, nothing changes.
    before = snapshot(db)
    again = client.post(RESEND_URL, content=body, headers=headers)
    assert again.status_code == 200, again.text
    assert again.json()["duplicates"] == 1
    assert snapshot(db) == before


@pytest.mark.parametrize(
    "forge",
    [
        "tampered",
        "expired",
        "future",
        "missing-headers",
        "no-comma",
        "not-base64",
        "bad-timestamp",
        "other-secret",
        "not-utf8",
    ],
)
def test_resend_bad_signatures_answer_401_and_change_nothing(
    client: TestClient, db: Engine, forge: str
) -> None:
    sent_delivery(
        db, provider="resend", message_id=RESEND_EMAIL_ID, recipient="delivered@example.com"
    )
    body = raw(RESEND_BOUNCED)
    headers = resend_headers(body)
    if forge == "tampered":
        body = flip_byte(body, b"delivered@example.com")
    elif forge == "expired":
        headers = resend_headers(body, at=datetime.now(UTC) - timedelta(minutes=6))
    elif forge == "future":
        headers = resend_headers(body, at=datetime.now(UTC) + timedelta(minutes=6))
    elif forge == "missing-headers":
        headers = {"Content-Type": "application/json"}
    elif forge == "no-comma":
        headers["svix-signature"] = "v1"
    elif forge == "not-base64":
        headers["svix-signature"] = "v1,%%%"
    elif forge == "bad-timestamp":
        headers["svix-timestamp"] = "1e999"
    elif forge == "other-secret":
        other = "whsec_" + base64.b64encode(os.urandom(24)).decode()
        when = datetime.now(UTC)
        headers["svix-signature"] = Webhook(other).sign(headers["svix-id"], when, body.decode())
    elif forge == "not-utf8":
        body = b"\xff" + body
    before = snapshot(db)

    resp = client.post(RESEND_URL, content=body, headers=headers)

    assert_problem(resp, 401)
    assert snapshot(db) == before


def test_resend_signed_malformed_json_answers_400(client: TestClient, db: Engine) -> None:
    body = b'{"type": "email.bounced", "data": '
    before = snapshot(db)
    assert_problem(client.post(RESEND_URL, content=body, headers=resend_headers(body)), 400)
    assert snapshot(db) == before


def test_resend_other_events_are_acknowledged(client: TestClient, db: Engine) -> None:
    body = raw({"type": "email.delivered", "created_at": "2024-11-22T23:41:12.126Z", "data": {}})
    before = snapshot(db)
    resp = client.post(RESEND_URL, content=body, headers=resend_headers(body))
    assert resp.status_code == 200, resp.text
    assert resp.json()["status"] == "ignored"
    assert snapshot(db) == before


def test_resend_oversize_body_answers_413(client: TestClient) -> None:
    body = raw({**RESEND_BOUNCED, "padding": "x" * MAX_BODY})
    assert_problem(client.post(RESEND_URL, content=body, headers=resend_headers(body)), 413)


# == Postmark =========================================================================


def basic(user: str = POSTMARK_USER, password: str = POSTMARK_PASSWORD) -> dict[str, str]:
    token = base64.b64encode(f"{user}:{password}".encode()).decode()
    return {"Authorization": f"Basic {token}", "Content-Type": "application/json"}


def test_postmark_bounce_with_credentials_is_applied_once(client: TestClient, db: Engine) -> None:
    delivery = sent_delivery(
        db, provider="postmark", message_id=POSTMARK_MESSAGE_ID, recipient="john@example.com"
    )
    body = raw(POSTMARK_BOUNCE)

    resp = client.post(POSTMARK_URL, content=body, headers=basic())

    assert resp.status_code == 200, resp.text
    assert delivery_status(db, delivery) == "bounced"
    assert suppressed(db) == ["john@example.com"]
    assert stored_events(db) == [("postmark", "4323372036854775807")]

    before = snapshot(db)
    again = client.post(POSTMARK_URL, content=body, headers=basic())
    assert again.status_code == 200, again.text
    assert again.json()["duplicates"] == 1
    assert snapshot(db) == before


@pytest.mark.parametrize(
    "headers",
    [
        {"Content-Type": "application/json"},
        basic(password="wrong"),
        basic(user="wrong"),
        {"Authorization": "Basic %%%", "Content-Type": "application/json"},
        {"Authorization": "Bearer x", "Content-Type": "application/json"},
    ],
    ids=["none", "wrong-password", "wrong-user", "not-base64", "bearer"],
)
def test_postmark_without_credentials_answers_401_and_changes_nothing(
    client: TestClient, db: Engine, headers: dict[str, str]
) -> None:
    sent_delivery(
        db, provider="postmark", message_id=POSTMARK_MESSAGE_ID, recipient="john@example.com"
    )
    before = snapshot(db)
    resp = client.post(POSTMARK_URL, content=raw(POSTMARK_BOUNCE), headers=headers)
    assert_problem(resp, 401)
    assert resp.headers["WWW-Authenticate"].startswith("Basic realm=")  # RFC 9110 §11.6.1
    assert snapshot(db) == before


@pytest.mark.parametrize(
    "body",
    [
        b"{",
        raw(POSTMARK_BOUNCE).replace(b"4323372036854775807", b"4.323372036854776e18"),
        raw({**POSTMARK_BOUNCE, "MessageID": None}),
    ],
    ids=["not-json", "float-id", "no-message-id"],
)
def test_postmark_malformed_body_answers_400(client: TestClient, db: Engine, body: bytes) -> None:
    before = snapshot(db)
    assert_problem(client.post(POSTMARK_URL, content=body, headers=basic()), 400)
    assert snapshot(db) == before


# == configuration ====================================================================


@pytest.mark.parametrize("url", [SES_URL, RESEND_URL, POSTMARK_URL])
def test_unconfigured_providers_answer_404(
    db: Engine, settings: Settings, clock: Clock, url: str
) -> None:
    app = create_app(
        settings, db, LocalProfileSource(settings.effective_profiles_file), clock=clock
    )
    with TestClient(app) as unconfigured:
        assert_problem(unconfigured.post(url, content=b"{}"), 404)


# == end to end =======================================================================


def test_a_sent_email_that_bounces_pauses_its_reminder_and_is_not_sent_again(
    db: Engine, settings: Settings
) -> None:
    """Issue 6, "End to end": a reminder is sent (through the Resend adapter, to a local
    server speaking Resend's API), its provider id comes back in a signed hard-bounce
    webhook, the delivery becomes `bounced`, the address is suppressed, the reminder is
    paused, and its next occurrence is not sent."""
    start = datetime(2030, 1, 1, 12, 0, tzinfo=UTC)  # daily at 12:00 UTC
    queue = PostgresQueue(db, name="reminders", max_receive_count=5)
    fake = FakeProvider().start()
    try:
        provider = resend_provider(fake.url, api_key="re_test_key")
        with db.begin() as conn:
            reminder_id = conn.execute(
                text(
                    "INSERT INTO reminders (user_id, title, start_local, timezone, rrule,"
                    " next_run_utc, status) VALUES ('alice', 'Water the plants',"
                    " '2030-01-01T12:00', 'UTC', 'FREQ=DAILY', :next, 'pending') RETURNING id"
                ),
                {"next": start},
            ).scalar_one()

        def tick(now: datetime) -> dict[str, int]:
            Coordinator(db, queue, lookahead_s=0, batch_size=10, worker_id="c").run_once(now)
            return make_sender(db, queue, settings, provider, SenderClock(now)).run_once(now).counts

        assert tick(start) == {"sent": 1}
        [message_id] = [m["id"] for m in fake.state.accepted.values()]

        bounced = json.loads(json.dumps(RESEND_BOUNCED))
        bounced["data"]["email_id"] = message_id
        bounced["data"]["to"] = ["alice@example.com"]  # alice's profile address (conftest)
        body = raw(bounced)
        configured = settings.model_copy(update={"webhook_resend_secret": SecretStr(RESEND_SECRET)})
        with TestClient(build_app(configured, db, Clock(start + timedelta(minutes=5)))) as api:
            resp = api.post(RESEND_URL, content=body, headers=resend_headers(body))
        assert resp.status_code == 200, resp.text

        with db.connect() as conn:
            deliveries = conn.execute(
                text("SELECT status FROM delivery_log WHERE reminder_id = :r"), {"r": reminder_id}
            ).scalars()
            assert list(deliveries) == ["bounced"]
            status = conn.execute(
                text("SELECT status FROM reminders WHERE id = :r"), {"r": reminder_id}
            ).scalar_one()
        assert status == "paused"
        assert suppressed(db) == ["alice@example.com"]

        tick(start + timedelta(days=1))  # the next occurrence's time
        assert len(fake.state.accepted) == 1  # not sent again
    finally:
        fake.stop()


# == text PostgreSQL cannot hold ======================================================
# A new-user trial: a verified bounce whose description held U+0000 answered 500 on
# every retry (psycopg.DataError: "PostgreSQL text fields cannot contain NUL (0x00)
# bytes"). Bounce descriptions come from remote mail servers, so such an event must be
# applied, with every U+0000 (and lone surrogate, which UTF-8 cannot encode) replaced by
# U+FFFD, the replacement character of Unicode §3.9 / §23.8.

NUL, LONE_SURROGATE, REPLACEMENT = "\x00", "\ud800", "\ufffd"


def webhook_row(engine: Engine) -> dict[str, Any]:
    with engine.connect() as conn:
        row = conn.execute(
            text(
                "SELECT event_id, provider_message_id, recipient, reason, raw_body, outcome"
                " FROM webhook_events"
            )
        ).one()
    return dict(row._mapping)


def delivery_error(engine: Engine, delivery_id: uuid.UUID) -> str:
    with engine.connect() as conn:
        return conn.execute(
            text("SELECT error FROM delivery_log WHERE id = :id"), {"id": delivery_id}
        ).scalar_one()


@pytest.mark.parametrize("bad", [NUL, LONE_SURROGATE], ids=["nul", "lone-surrogate"])
def test_postmark_description_with_unstorable_text_is_applied(
    client: TestClient, db: Engine, bad: str
) -> None:
    delivery = sent_delivery(
        db, provider="postmark", message_id=POSTMARK_MESSAGE_ID, recipient="john@example.com"
    )
    body = raw({**POSTMARK_BOUNCE, "Description": f"d{bad}", "Details": f"x{bad}y"})

    resp = client.post(POSTMARK_URL, content=body, headers=basic())

    assert resp.status_code == 200, resp.text
    assert resp.json() == {"status": "processed", "events": 1, "duplicates": 0}
    assert delivery_status(db, delivery) == "bounced"
    reason = f"HardBounce: d{REPLACEMENT} x{REPLACEMENT}y"
    assert webhook_row(db)["reason"] == reason
    assert delivery_error(db, delivery).endswith(reason)  # "hard bounce: <reason>"
    assert suppressed(db) == ["john@example.com"]
    # Postmark retries: a duplicate, nothing changes.
    before = snapshot(db)
    assert client.post(POSTMARK_URL, content=body, headers=basic()).json()["duplicates"] == 1
    assert snapshot(db) == before


def test_postmark_ids_and_address_with_nul_are_applied(client: TestClient, db: Engine) -> None:
    body = raw({**POSTMARK_BOUNCE, "MessageID": "m\x00", "Email": "x@y.z\x00"})
    resp = client.post(POSTMARK_URL, content=body, headers=basic())
    assert resp.status_code == 200, resp.text
    row = webhook_row(db)
    digest = hashlib.sha256(b"m\x00").hexdigest()  # docs/design.md, "Provider text"
    assert (row["provider_message_id"], row["recipient"]) == (
        f"m\ufffd~sha256:{digest}",
        "x@y.z\ufffd",
    )
    assert row["outcome"] == "unmatched"


def test_the_trial_postmark_repro_is_applied(client: TestClient, db: Engine) -> None:
    # The trial's own request, byte for byte.
    body = (
        b'{"RecordType":"Bounce","ID":1,"Type":"HardBounce","MessageID":"m",'
        b'"Email":"x@y.z","Description":"d\\u0000"}'
    )
    resp = client.post(POSTMARK_URL, content=body, headers=basic())
    assert resp.status_code == 200, resp.text
    row = webhook_row(db)
    assert row["reason"] == "HardBounce: d\ufffd"
    assert row["raw_body"] == body.decode()  # the escape is text, kept as received


@pytest.mark.parametrize("bad", [NUL, LONE_SURROGATE], ids=["nul", "lone-surrogate"])
def test_resend_bounce_message_with_unstorable_text_is_applied(
    client: TestClient, db: Engine, bad: str
) -> None:
    delivery = sent_delivery(
        db, provider="resend", message_id=RESEND_EMAIL_ID, recipient="delivered@example.com"
    )
    bounced = json.loads(json.dumps(RESEND_BOUNCED))
    bounced["data"]["bounce"]["message"] = f"550 bad{bad} thing"
    body = raw(bounced)

    resp = client.post(RESEND_URL, content=body, headers=resend_headers(body))

    assert resp.status_code == 200, resp.text
    assert delivery_status(db, delivery) == "bounced"
    assert webhook_row(db)["reason"] == f"Permanent/Suppressed: 550 bad{REPLACEMENT} thing"


def test_resend_email_id_with_nul_is_stored_unmatched(client: TestClient, db: Engine) -> None:
    bounced = json.loads(json.dumps(RESEND_BOUNCED))
    bounced["data"]["email_id"] = "a\x00b"
    body = raw(bounced)
    resp = client.post(RESEND_URL, content=body, headers=resend_headers(body))
    assert resp.status_code == 200, resp.text
    row = webhook_row(db)
    # Stored as docs/design.md "Provider text" says: the storable prefix, then the
    # SHA-256 of the id as sent.
    digest = hashlib.sha256(b"a\x00b").hexdigest()
    assert (row["provider_message_id"], row["outcome"]) == (
        f"a\ufffdb~sha256:{digest}",
        "unmatched",
    )


def digest_form(email_id: str) -> str:
    """An id stored as docs/design.md "Provider text" says of one PostgreSQL cannot keep
    as it is: its first 440 characters with NUL and lone surrogates as U+FFFD,
    "~sha256:", and the SHA-256 of the id as sent (UTF-8, surrogates passed through)."""
    digest = hashlib.sha256(email_id.encode("utf-8", "surrogatepass")).hexdigest()
    readable = email_id[:440].replace("\x00", REPLACEMENT).replace("\ud800", REPLACEMENT)
    return f"{readable}~sha256:{digest}"


@pytest.mark.parametrize(
    "email_id",
    [
        "m" + "0123456789abcdef" * 80,  # 1,281 characters: over a btree entry's ~2.7 kB
        "x\x00y-" + "0f" * 16,
        "k~sha256:" + "ab" * 16,
        "\ud800-" + "c" * 20,
    ],
    ids=["1281-characters", "nul", "mark", "lone-surrogate"],
)
def test_resend_bounce_with_an_odd_email_id_finds_the_send_at_once(
    client: TestClient, db: Engine, email_id: str
) -> None:
    # The sender stores such an id in its digest form; the event carries the id as sent
    # and finds that row. helper-50's trial: the webhooks applied the rule twice and
    # hashed a short digest form again, so the bounce was left unmatched.
    delivery = sent_delivery(
        db, provider="resend", message_id=digest_form(email_id), recipient="delivered@example.com"
    )
    bounced = json.loads(json.dumps(RESEND_BOUNCED))
    bounced["data"]["email_id"] = email_id
    body = raw(bounced)
    resp = client.post(RESEND_URL, content=body, headers=resend_headers(body))
    assert resp.status_code == 200, resp.text
    assert delivery_status(db, delivery) == "bounced"


@pytest.mark.parametrize("bad", [NUL, LONE_SURROGATE], ids=["nul", "lone-surrogate"])
def test_ses_diagnostic_with_unstorable_text_is_applied(
    client: TestClient, db: Engine, signer: SnsSigner, bad: str
) -> None:
    delivery = sent_delivery(
        db, provider="ses", message_id=SES_MESSAGE_ID, recipient="jane@example.com"
    )
    ses = json.loads(json.dumps(SES_BOUNCE))
    ses["bounce"]["bouncedRecipients"][0]["diagnosticCode"] = f"smtp; 550{bad}"

    resp = client.post(SES_URL, content=ses_notification(signer, ses))

    assert resp.status_code == 200, resp.text
    assert delivery_status(db, delivery) == "bounced"
    assert webhook_row(db)["reason"] == f"Permanent/General: smtp; 550{REPLACEMENT}"


@pytest.mark.parametrize(
    "change",
    [
        {"Email": os.urandom(1500).hex() + "@example.com"},
        {"ID": int("9" * 256)},
    ],
    ids=["address-over-254", "id-over-255-digits"],
)
def test_postmark_ids_and_addresses_too_long_to_index_answer_400(
    client: TestClient, db: Engine, change: dict[str, Any]
) -> None:
    # Before: the INSERT into a unique index failed ("index row size ... exceeds btree
    # maximum", an OperationalError), so Postmark got 503 and retried the event for ever.
    # RFC 5321 §4.5.3.1.3 bounds a path to 256 octets with its angle brackets.
    sent_delivery(
        db, provider="postmark", message_id=POSTMARK_MESSAGE_ID, recipient="john@example.com"
    )
    before = snapshot(db)
    resp = client.post(POSTMARK_URL, content=raw({**POSTMARK_BOUNCE, **change}), headers=basic())
    assert_problem(resp, 400)
    assert snapshot(db) == before


# == SNS certificate fetches an unauthenticated caller can cause =======================
# A new-user trial: an unsigned POST naming SigningCertURL=https://sns.<any
# string>.amazonaws.com/x.pem made the API fetch that URL on every request and answer 503
# "a dependency (database or profile service) is unavailable". A URL the caller chose is
# its own fault when it leads nowhere (401: SNS does not retry a 4xx); only a host we
# cannot reach is ours (503, naming that host, so SNS retries).


def forged_ses(signer: SnsSigner, cert_url: str) -> bytes:
    """A notification signed with our throwaway key, claiming a certificate at `cert_url`
    (anyone can write such a body: the signature is checked only with that certificate)."""
    return raw(signer.sign(notification(json.dumps(SES_BOUNCE), message_id="m"), cert_url=cert_url))


def test_the_trial_certificate_url_answers_401_without_a_fetch(
    client: TestClient, db: Engine, signer: SnsSigner, sns_host: FakeSnsHost
) -> None:
    before = snapshot(db)
    for _ in range(2):
        resp = client.post(
            SES_URL,
            content=forged_ses(signer, "https://sns.ab-any-string-you-like-9.amazonaws.com/x.pem"),
        )
        problem = assert_problem(resp, 401)
        assert "database" not in problem["detail"]
    assert sns_host.requests == []
    assert snapshot(db) == before


def test_a_certificate_url_its_host_refuses_answers_401_and_is_fetched_once(
    client: TestClient, db: Engine, signer: SnsSigner, sns_host: FakeSnsHost
) -> None:
    before = snapshot(db)
    for _ in range(3):
        body = forged_ses(signer, f"https://{SNS_HOST}/SimpleNotificationService-forged.pem")
        assert_problem(client.post(SES_URL, content=body), 401)  # the host answers 404
    assert sns_host.requests == ["/SimpleNotificationService-forged.pem"]
    assert snapshot(db) == before


def app_fetching_with(
    settings: Settings, db: Engine, clock: Clock, http: httpx.Client
) -> TestClient:
    configured = settings.model_copy(update={"webhook_sns_topic_arns": (TOPIC_ARN,)})
    app = create_app(
        configured,
        db,
        LocalProfileSource(configured.effective_profiles_file),
        clock=clock,
        webhook_http=http,
    )
    return TestClient(app)


def test_an_unreachable_certificate_host_answers_503_naming_it(
    db: Engine, settings: Settings, clock: Clock, signer: SnsSigner
) -> None:
    with fake_sns_host(signer.cert_pem) as down:
        http = down.client()
    # The server is closed: connecting to it is refused, as when our network is down.
    with app_fetching_with(settings, db, clock, http) as api:
        resp = api.post(SES_URL, content=ses_notification(signer, SES_BOUNCE))
    problem = assert_problem(resp, 503)
    assert SNS_HOST in problem["detail"], problem
    assert "database" not in problem["detail"]
    assert resp.headers["Retry-After"]


class _ToNowhere(httpx.BaseTransport):
    """Sends every request to the host name "nxdomain.invalid", which RFC 6761 §6.4
    reserves as never existing: a real DNS lookup that answers NXDOMAIN."""

    def __init__(self) -> None:
        self._inner = httpx.HTTPTransport()

    def handle_request(self, request: httpx.Request) -> httpx.Response:
        return self._inner.handle_request(
            httpx.Request(request.method, request.url.copy_with(host="nxdomain.invalid"))
        )


def test_a_certificate_host_that_does_not_exist_answers_401(
    db: Engine, settings: Settings, clock: Clock, signer: SnsSigner
) -> None:
    try:
        socket.getaddrinfo("nxdomain.invalid", 443)
    except socket.gaierror as exc:
        if exc.errno != socket.EAI_NONAME:
            pytest.skip(f"this machine's resolver does not answer NXDOMAIN: {exc}")
    else:
        pytest.skip("this machine's resolver resolves nxdomain.invalid")
    with app_fetching_with(settings, db, clock, httpx.Client(transport=_ToNowhere())) as api:
        resp = api.post(SES_URL, content=ses_notification(signer, SES_BOUNCE))
    problem = assert_problem(resp, 401)
    assert "does not exist" in problem["detail"], problem


# == evidence of an accepted send (issue 12) ==========================================
# A provider's "sent" / "delivered" event names our idempotency key in a message tag
# (Resend `data.tags`, SES `mail.tags`, or the X-Entity-Ref-ID header). While that
# occurrence's delivery row is `sending` (its sender died or lost the answer), the event
# is written on it for the sender that takes it over; otherwise nothing changes.

RUN = datetime(2030, 1, 1, 12, 0, tzinfo=UTC)


def sending_delivery(engine: Engine) -> tuple[uuid.UUID, str]:
    """A claimed one-time reminder of alice's whose delivery row a sender left `sending`
    (leased at RUN); returns the row id and the occurrence's idempotency key."""
    with engine.begin() as conn:
        reminder_id = conn.execute(
            text(
                "INSERT INTO reminders (user_id, title, start_local, timezone, next_run_utc,"
                " status, claimed_by, claimed_at) VALUES ('alice', 'Call mum', :local, 'UTC',"
                " :run, 'claimed', 'c', :run) RETURNING id"
            ),
            {"local": RUN.replace(tzinfo=None), "run": RUN},
        ).scalar_one()
        delivery_id = conn.execute(
            text(
                "INSERT INTO delivery_log (reminder_id, user_id, run_time_utc, status,"
                " locked_at, lease_token, created_at) VALUES (:r, 'alice', :run, 'sending',"
                " :run, gen_random_uuid(), :created) RETURNING id"
            ),
            # Made before the documented examples' times (2016, 2024), which the
            # provider's acceptance time must follow to be taken as the send's.
            {"r": reminder_id, "run": RUN, "created": datetime(2016, 1, 1, tzinfo=UTC)},
        ).scalar_one()
    return delivery_id, f"{reminder_id}-20300101T120000Z"


def evidence_row(engine: Engine, delivery_id: uuid.UUID) -> tuple[Any, ...]:
    with engine.connect() as conn:
        row = conn.execute(
            text(
                "SELECT status, provider, provider_message_id, sent_at, recipient, lease_token"
                " IS NOT NULL AS leased FROM delivery_log WHERE id = :id"
            ),
            {"id": delivery_id},
        ).one()
    return tuple(row)


def resend_sent(key: str, *, kind: str = "email.sent") -> bytes:
    document = json.loads(json.dumps(RESEND_SENT).replace("<key>", key))
    document["type"] = kind
    return raw(document)


def test_resend_sent_event_is_written_on_the_sending_row_once(
    client: TestClient, db: Engine
) -> None:
    delivery, key = sending_delivery(db)
    body = resend_sent(key)

    resp = client.post(RESEND_URL, content=body, headers=resend_headers(body))

    assert resp.status_code == 200, resp.text
    assert resp.json() == {"status": "processed", "events": 1, "duplicates": 0}
    # Still `sending` under its lease: the sender holding or taking it over records it.
    assert evidence_row(db, delivery) == (
        "sending",
        "resend",
        RESEND_SENT["data"]["email_id"],
        datetime(2024, 2, 22, 23, 41, 11, 894719, tzinfo=UTC),  # the email's created_at
        "delivered@example.com",
        True,
    )
    assert stored_events(db) == []  # evidence is not a stored event

    # Resend's retry, and the later email.delivered of the same email, change nothing.
    before = snapshot(db)
    for again in (body, resend_sent(key, kind="email.delivered")):
        resp = client.post(
            RESEND_URL, content=again, headers=resend_headers(again, msg_id="msg_other")
        )
        assert resp.status_code == 200, resp.text
    assert snapshot(db) == before


def test_ses_send_record_is_written_on_the_sending_row(
    client: TestClient, db: Engine, signer: SnsSigner
) -> None:
    delivery, key = sending_delivery(db)
    ses = json.loads(json.dumps(SES_SEND).replace("<key>", key))

    resp = client.post(SES_URL, content=ses_notification(signer, ses))

    assert resp.status_code == 200, resp.text
    assert resp.json()["events"] == 1
    assert evidence_row(db, delivery)[:4] == (
        "sending",
        "ses",
        SES_SEND["mail"]["messageId"],
        datetime(2016, 10, 14, 5, 2, 16, 645000, tzinfo=UTC),  # mail.timestamp
    )


def test_evidence_for_a_delivery_with_its_answer_changes_nothing(
    client: TestClient, db: Engine
) -> None:
    delivery = sent_delivery(db, provider="resend", message_id="m-1", recipient="a@example.com")
    with db.connect() as conn:
        rid, run = conn.execute(
            text("SELECT reminder_id, run_time_utc FROM delivery_log WHERE id = :id"),
            {"id": delivery},
        ).one()
    before = snapshot(db)
    # Its own key (the sender recorded it first, as usual), a key of no delivery of ours,
    # and a tag that is no key of ours at all: acknowledged, nothing changes.
    keys = (
        f"{rid}-{run.astimezone(UTC):%Y%m%dT%H%M%SZ}",
        f"{uuid.uuid4()}-20300101T120000Z",
        "not-a-key",
    )
    for key in keys:
        body = resend_sent(key)
        resp = client.post(RESEND_URL, content=body, headers=resend_headers(body))
        assert resp.status_code == 200, resp.text
    assert snapshot(db) == before
    assert delivery_status(db, delivery) == "sent"


def test_a_bounce_after_the_evidence_bounces_the_sending_row(
    client: TestClient, db: Engine
) -> None:
    # The sender died; Resend reported the send, then its bounce, before any takeover:
    # the delivery is `bounced` (not left `sending`, then recorded `suppressed`).
    delivery, key = sending_delivery(db)
    for document, msg_id in ((resend_sent(key), "msg_sent"), (None, "msg_bounced")):
        if document is None:
            bounced = json.loads(json.dumps(RESEND_BOUNCED))
            bounced["data"]["email_id"] = RESEND_SENT["data"]["email_id"]
            document = raw(bounced)
        resp = client.post(
            RESEND_URL, content=document, headers=resend_headers(document, msg_id=msg_id)
        )
        assert resp.status_code == 200, resp.text
    status, provider, message_id, _, _, leased = evidence_row(db, delivery)
    assert (status, provider, message_id, leased) == (
        "bounced",
        "resend",
        RESEND_SENT["data"]["email_id"],
        False,
    )
    assert suppressed(db) == ["delivered@example.com"]


@pytest.mark.parametrize(
    "created_at", ["9999-12-31T23:59:59Z", "1970-01-01T00:00:00Z"], ids=["future", "past"]
)
def test_an_acceptance_time_off_the_send_is_replaced_by_the_receipt_time(
    client: TestClient, db: Engine, clock: Clock, created_at: str
) -> None:
    delivery, key = sending_delivery(db)
    document = json.loads(resend_sent(key))
    document["data"]["created_at"] = created_at
    body = raw(document)
    resp = client.post(RESEND_URL, content=body, headers=resend_headers(body))
    assert resp.status_code == 200, resp.text
    assert evidence_row(db, delivery)[3] == clock()  # the API's now


# A long id is evidence like any other, stored as the sender stores the id of its answer
# (tests/integration/test_send_evidence.py, the 641-character case).
@pytest.mark.parametrize("email_id", ["   ", "", "\t\n"], ids=["blank", "empty", "white-space"])
def test_an_unusable_message_id_is_no_evidence(
    client: TestClient, db: Engine, email_id: str
) -> None:
    delivery, key = sending_delivery(db)
    document = json.loads(resend_sent(key))
    document["data"]["email_id"] = email_id
    body = raw(document)
    before = snapshot(db)
    resp = client.post(RESEND_URL, content=body, headers=resend_headers(body))
    assert resp.status_code == 200, resp.text
    assert resp.json()["status"] == "ignored"
    assert snapshot(db) == before
    assert evidence_row(db, delivery)[2] is None
