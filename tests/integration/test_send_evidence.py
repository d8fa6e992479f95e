"""Sends recovered from the provider's own feedback (issue 12): a provider that keeps no
idempotency key (SES, SMTP; the fake in its no-dedupe mode) delivers a second email when
a sender dies after the provider accepted its call and another sender takes the delivery
over. The provider reports each accepted email in a webhook that names our key (Resend
`email.sent`, SES `Send`); written on the delivery row while it is still `sending`, it
lets the sender that takes the row over record it `sent` without calling the provider.

Real components: PostgreSQL, the fake provider (a local HTTP server speaking Resend's
API, no-dedupe mode), the Resend adapter, the API's webhook endpoint with a Svix
signature made in the test, the sender and the maintenance workload's reaper. A dead
sender is what it leaves behind: its `sending` row under a lease that ended, and its
provider call, accepted by the provider (made here with the same adapter, the answer
dropped as the dying process drops it). The kill -9 storm is tests/e2e/
test_crash_duplicates.py. Expected values: the provider message id and acceptance time
are those the provider's answer and event give; "sent without a second call" is the
issue's requirement.
"""

from __future__ import annotations

import base64
import hashlib
import json
import os
import uuid
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from fastapi.testclient import TestClient
from prometheus_client import REGISTRY
from pydantic import SecretStr
from sqlalchemy import Engine, text
from svix.webhooks import Webhook

from coordinator.maintenance.delivery_rescuer import DeliveryRescuer
from reminder_core.domain.localtime import idempotency_key
from reminder_core.domain.retry import RetryPolicy
from reminder_core.errors import TransientDeliveryError
from reminder_core.queue import PostgresQueue
from reminder_core.settings import Settings
from sender.providers.base import OutgoingEmail, SendReceipt
from sender.service import Outcome, Sender
from tests.integration.api_support import Clock as ApiClock
from tests.integration.api_support import build_app
from tests.integration.helpers import insert_due_reminders, insert_sending_rows
from tests.integration.test_sender import claim, one, receive_one
from tests.support.fake_provider import FakeProvider
from tests.support.providers import resend_provider
from tests.support.sending import NOW, Clock, make_sender
from tests.support.webhook_payloads import RESEND_SENT

SECRET = "whsec_" + base64.b64encode(os.urandom(24)).decode()
LATER = NOW + timedelta(seconds=61)  # make_sender's lease_s = 60 has passed
ACCEPTED_AT = NOW + timedelta(milliseconds=40)  # when the fake "says" it took the email


@pytest.fixture
def fake() -> Iterator[FakeProvider]:
    server = FakeProvider().start()
    with server.state.lock:
        server.state.dedupe = False  # like SES or SMTP: every call is a new email
    try:
        yield server
    finally:
        server.stop()


@pytest.fixture
def api(db: Engine, settings: Settings) -> Iterator[TestClient]:
    configured = settings.model_copy(update={"webhook_resend_secret": SecretStr(SECRET)})
    with TestClient(build_app(configured, db, ApiClock(NOW + timedelta(seconds=2)))) as client:
        yield client


def sample(name: str, provider: str = "resend") -> float:
    return REGISTRY.get_sample_value(name, {"provider": provider}) or 0.0


def dead_sender_sent(db: Engine, queue: PostgresQueue, fake: FakeProvider) -> tuple[Any, str, str]:
    """A one-time reminder due at NOW, claimed; a sender began it (its `sending` row,
    leased at NOW) and called the provider, which accepted the email, then died before
    it recorded the answer. Returns (the message, back in the queue, the key, the
    provider's message id)."""
    insert_due_reminders(db, 1, next_run_utc=NOW)
    claim(db, queue)
    msg = receive_one(queue)
    key = idempotency_key(msg.body["reminder_id"], NOW)
    insert_sending_rows(db, NOW, {"Due 1": NOW})
    email = OutgoingEmail(
        sender="Reminders <reminders@example.com>",
        to="alice@example.com",
        subject="Due 1",
        text="Due 1",
        html="<p>Due 1</p>",
    )
    receipt = resend_provider(fake.url).send(email, idempotency_key=key)
    return msg, key, receipt.provider_message_id


def email_sent(api: TestClient, key: str, message_id: str) -> None:
    """Resend's documented email.sent event for `message_id`, tagged with `key` (as the
    fake's own request shows the adapter tags it), signed and posted to the API."""
    document = json.loads(json.dumps(RESEND_SENT).replace("<key>", key))
    document["created_at"] = (ACCEPTED_AT + timedelta(seconds=1)).isoformat()  # the event's
    document["data"].update(
        email_id=message_id, to=["alice@example.com"], created_at=ACCEPTED_AT.isoformat()
    )
    body = json.dumps(document).encode()
    msg_id = f"msg_{uuid.uuid4().hex}"
    headers = {
        "svix-id": msg_id,
        "svix-timestamp": str(int(datetime.now(UTC).timestamp())),
        "svix-signature": Webhook(SECRET).sign(msg_id, datetime.now(UTC), body.decode()),
    }
    resp = api.post("/v1/webhooks/resend", content=body, headers=headers)
    assert resp.status_code == 200, resp.text
    assert resp.json()["events"] == 1


def test_a_send_the_provider_reported_is_recorded_without_a_second_email(
    db: Engine, queue: PostgresQueue, settings: Settings, fake: FakeProvider, api: TestClient
) -> None:
    _, key, message_id = dead_sender_sent(db, queue, fake)
    # The adapter tags the email with its key: what Resend publishes back in its events.
    assert fake.state.accepted[key]["tags"] == {"idempotency_key": key}
    email_sent(api, key, message_id)
    recovered, duplicates = (
        sample("reminders_sends_recovered_total"),
        sample("reminders_possible_duplicates_total"),
    )

    provider = resend_provider(fake.url)
    sender = make_sender(db, queue, settings, provider, Clock(LATER))  # type: ignore[arg-type]
    assert sender.handle(receive_one(queue, LATER), LATER) == Outcome.SENT

    assert len(fake.state.requests) == 1  # the dead sender's call only
    assert fake.state.duplicates == 0
    row = one(
        db,
        "SELECT status, provider, provider_message_id, sent_at, recipient, attempt_count,"
        " lease_token FROM delivery_log",
    )
    assert tuple(row) == ("sent", "resend", message_id, ACCEPTED_AT, "alice@example.com", 0, None)
    assert one(db, "SELECT status FROM reminders").status == "completed"
    assert sample("reminders_sends_recovered_total") == recovered + 1
    assert sample("reminders_possible_duplicates_total") == duplicates  # not a duplicate


def test_without_the_providers_report_the_takeover_sends_a_second_email(
    db: Engine, queue: PostgresQueue, settings: Settings, fake: FakeProvider
) -> None:
    # The same crash with no webhook: what the test above shows is avoided.
    _, key, _ = dead_sender_sent(db, queue, fake)
    duplicates = sample("reminders_possible_duplicates_total")

    provider = resend_provider(fake.url)
    sender = make_sender(db, queue, settings, provider, Clock(LATER))  # type: ignore[arg-type]
    assert sender.handle(receive_one(queue, LATER), LATER) == Outcome.SENT

    assert [r["key"] for r in fake.state.requests] == [key, key]
    assert fake.state.duplicates == 1  # a second email at a provider that keeps no key
    assert sample("reminders_possible_duplicates_total") == duplicates + 1


class _AcceptedThenLost:
    """A provider call that the provider accepts (its webhook arrives meanwhile) but
    whose answer is lost: a read timeout after the request went out (`ambiguous`)."""

    name = "resend"

    def __init__(self, api: TestClient, message_id: str) -> None:
        self.api = api
        self.message_id = message_id
        self.calls: list[str] = []

    def send(self, email: OutgoingEmail, *, idempotency_key: str) -> SendReceipt:
        del email
        self.calls.append(idempotency_key)
        email_sent(self.api, idempotency_key, self.message_id)
        raise TransientDeliveryError("resend: no answer after sending", ambiguous=True)


def claimed_with_lost_answers(
    db: Engine,
    queue: PostgresQueue,
    settings: Settings,
    api: TestClient,
    message_id: str,
    retry: RetryPolicy | None = None,
) -> tuple[_AcceptedThenLost, Sender]:
    """A one-time reminder due at NOW, claimed, and a sender whose provider accepts each
    call (its webhook reaches the API) but loses the answer; returns (provider, sender)."""
    insert_due_reminders(db, 1, next_run_utc=NOW)
    claim(db, queue)
    provider = _AcceptedThenLost(api, message_id)
    return provider, make_sender(db, queue, settings, provider, retry=retry)  # type: ignore[arg-type]


def test_a_released_row_keeps_the_evidence_and_the_retry_records_it(
    db: Engine, queue: PostgresQueue, settings: Settings, api: TestClient
) -> None:
    provider, sender = claimed_with_lost_answers(db, queue, settings, api, "re-0001")
    assert sender.run_once(NOW).counts == {"retry": 1}
    row = one(db, "SELECT status, provider_message_id, lease_token FROM delivery_log")
    # Released (no lease) with the provider's evidence kept for the retry.
    assert tuple(row) == ("sending", "re-0001", None)

    retried_at = NOW + timedelta(seconds=30)  # past the retry's backoff
    sender = make_sender(  # a leased retry: the row it takes over carries the evidence
        db,
        queue,
        settings,
        provider,
        Clock(retried_at),
        leaseless_first_send=False,  # type: ignore[arg-type]
    )
    assert sender.run_once(retried_at).counts == {"sent": 1}
    assert len(provider.calls) == 1  # the retry made no second call
    row = one(db, "SELECT status, provider_message_id, sent_at FROM delivery_log")
    assert tuple(row) == ("sent", "re-0001", ACCEPTED_AT)


def test_the_reaper_records_an_abandoned_row_with_evidence_as_sent(
    db: Engine, queue: PostgresQueue, fake: FakeProvider, api: TestClient
) -> None:
    _, key, message_id = dead_sender_sent(db, queue, fake)
    email_sent(api, key, message_id)
    with db.begin() as conn:  # the user cancels: nobody will take the row over
        conn.execute(
            text(
                "UPDATE reminders SET status = 'cancelled', next_run_utc = NULL,"
                " claimed_by = NULL, claimed_at = NULL"
            )
        )
        conn.execute(text("UPDATE delivery_log SET updated_at = :t"), {"t": NOW})
    rescuer = DeliveryRescuer(db, abandon_after_s=60, batch_size=500, interval_s=0)
    assert rescuer.run_once(NOW + timedelta(seconds=120)).counts == {"abandoned": 1}
    row = one(db, "SELECT status, provider_message_id, error FROM delivery_log")
    assert tuple(row) == ("sent", message_id, None)


def test_the_same_senders_retry_of_an_ambiguous_failure_records_the_evidence(
    db: Engine, queue: PostgresQueue, settings: Settings, api: TestClient
) -> None:
    # A timeout after the request went out; the provider's webhook came during the
    # backoff: the retry records it instead of sending a second email.
    retry = RetryPolicy(attempts=3, base_s=0.01, max_wait_s=0.01)
    provider, sender = claimed_with_lost_answers(db, queue, settings, api, "re-0002", retry)
    assert sender.run_once(NOW).counts == {"sent": 1}
    assert len(provider.calls) == 1
    row = one(db, "SELECT status, provider_message_id, sent_at, attempt_count FROM delivery_log")
    assert tuple(row) == ("sent", "re-0002", ACCEPTED_AT, 1)


@pytest.mark.parametrize(
    ("change", "reminder_status"),
    [
        ("UPDATE reminders SET status = 'cancelled', next_run_utc = NULL", "cancelled"),
        (
            "UPDATE reminders SET status = 'pending',"
            " next_run_utc = next_run_utc + interval '5 hours'",
            "pending",
        ),
        ("UPDATE reminders SET status = 'paused'", "paused"),
    ],
    ids=["cancelled", "rescheduled", "paused"],
)
def test_a_reported_send_is_recorded_sent_whatever_the_reminder_became(
    db: Engine,
    queue: PostgresQueue,
    settings: Settings,
    fake: FakeProvider,
    api: TestClient,
    change: str,
    reminder_status: str,
) -> None:
    # The user changed the reminder after the dead sender's email went out: the email
    # was delivered, so the occurrence is `sent`, not `cancelled` or left `sending`.
    _, key, message_id = dead_sender_sent(db, queue, fake)
    email_sent(api, key, message_id)
    with db.begin() as conn:
        conn.execute(text(change + ", claimed_by = NULL, claimed_at = NULL"))
    sender = make_sender(db, queue, settings, resend_provider(fake.url), Clock(LATER))  # type: ignore[arg-type]
    assert sender.handle(receive_one(queue, LATER), LATER) == Outcome.SENT
    assert len(fake.state.requests) == 1
    row = one(db, "SELECT status, provider_message_id, lease_token FROM delivery_log")
    assert tuple(row) == ("sent", message_id, None)
    assert one(db, "SELECT status FROM reminders").status == reminder_status


LONG_ID = "r" + uuid.uuid4().hex * 20  # 641 characters


@pytest.mark.parametrize(
    ("answered", "stored"),
    [
        ("  pad-id\t", "  pad-id\t"),  # kept exactly: the sender records it so
        (LONG_ID, LONG_ID[:440] + "~sha256:" + hashlib.sha256(LONG_ID.encode()).hexdigest()),
    ],
    ids=["padded", "641-characters"],
)
def test_the_evidence_of_an_odd_id_is_stored_as_the_sender_records_its_answer(
    db: Engine,
    queue: PostgresQueue,
    settings: Settings,
    fake: FakeProvider,
    api: TestClient,
    answered: str,
    stored: str,
) -> None:
    # docs/design.md, "Provider text": the evidence event's id is stored and looked up as
    # the sender stores the id of its own answer (an id over 512 characters as its
    # prefix and SHA-256), so a later event with the same id finds the same row.
    fake.inject({"kind": "message_id", "id": answered})
    _, key, message_id = dead_sender_sent(db, queue, fake)
    assert message_id == answered
    email_sent(api, key, message_id)
    provider = resend_provider(fake.url)
    sender = make_sender(db, queue, settings, provider, Clock(LATER))  # type: ignore[arg-type]
    assert sender.handle(receive_one(queue, LATER), LATER) == Outcome.SENT
    assert len(fake.state.requests) == 1  # recorded from the evidence, not sent again
    row = one(db, "SELECT status, provider_message_id FROM delivery_log")
    assert tuple(row) == ("sent", stored)
