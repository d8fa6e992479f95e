"""End to end on the production adapters (issue 5): every workload in its own process,
Amazon SQS as the queue (a local moto server speaking the SQS protocol, provisioned with
`reminders queue create`) and SMTP as the provider (a local aiosmtpd server). A created
reminder arrives at the SMTP server once, with the Message-ID derived from its
idempotency key (RFC 5322 §3.6.4; docs/design.md, "Providers": `smtp`, `X-Entity-Ref-ID`
and a Message-ID from the key).
"""

from __future__ import annotations

import email
import email.policy
import os
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import boto3
import httpx
import pytest
from aiosmtpd.controller import Controller
from sqlalchemy import Engine, text

from reminder_core.settings import Settings
from reminder_core.tokens import mint_token
from tests.e2e.test_dev import free_port
from tests.e2e.test_workloads import Processes, _ready, e2e_db, wait_for
from tests.support.moto import CREDENTIALS, REGION, moto_server

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(180)]

__all__ = ["e2e_db"]  # the database fixture, shared with test_workloads

SECRET = "e2e-" + "s" * 48


class Inbox:
    """aiosmtpd handler: keeps every message it accepts."""

    def __init__(self) -> None:
        self.messages: list[tuple[str, list[str], bytes]] = []
        self._lock = threading.Lock()

    async def handle_DATA(self, _server: Any, _session: Any, envelope: Any) -> str:
        with self._lock:
            self.messages.append((envelope.mail_from, list(envelope.rcpt_tos), envelope.content))
        return "250 Message accepted for delivery"


@pytest.fixture
def smtp() -> Iterator[tuple[Inbox, int]]:
    inbox = Inbox()
    port = free_port()
    controller = Controller(inbox, hostname="127.0.0.1", port=port)
    controller.start()
    yield inbox, port
    controller.stop()


@pytest.fixture
def sqs_endpoint() -> Iterator[str]:
    with moto_server() as endpoint:
        yield endpoint


def test_a_reminder_travels_through_sqs_and_arrives_at_the_smtp_server_once(
    tmp_path: Path, e2e_db: tuple[str, Engine], smtp: tuple[Inbox, int], sqs_endpoint: str
) -> None:
    url, engine = e2e_db
    inbox, smtp_port = smtp
    (tmp_path / "profiles.json").write_text(
        '{"dana": {"email": "dana@example.com", "timezone": "Europe/Paris"}}'
    )
    settings_vars = {name.upper() for name in Settings.model_fields}
    env = {k: v for k, v in os.environ.items() if k.upper() not in settings_vars}
    env.update(
        DATABASE_URL=url,
        JWT_SECRET=SECRET,
        STATE_DIR=str(tmp_path / "state"),
        PROFILES_FILE=str(tmp_path / "profiles.json"),
        QUEUE_URL="sqs://reminders-e2e",
        SQS_ENDPOINT_URL=sqs_endpoint,
        SQS_WAIT_TIME_S="1",
        AWS_REGION=REGION,
        AWS_ACCESS_KEY_ID=CREDENTIALS["aws_access_key_id"],
        AWS_SECRET_ACCESS_KEY=CREDENTIALS["aws_secret_access_key"],
        EMAIL_PROVIDER="smtp",
        SMTP_HOST="127.0.0.1",
        SMTP_PORT=str(smtp_port),
        SMTP_STARTTLS="off",
        MAIL_FROM="Reminders <reminders@example.com>",
        COORDINATOR_POLL_INTERVAL_S="0.2",
        SENDER_POLL_INTERVAL_S="0.2",
        SWEEPER_POLL_INTERVAL_S="1",
    )
    for args in (["migrate"], ["queue", "create"]):
        done = subprocess.run(
            [sys.executable, "-m", "reminders", *args], env=env, timeout=120, capture_output=True
        )
        assert done.returncode == 0, done.stderr.decode()[-2000:]
    procs = Processes(env, tmp_path)
    try:
        port = free_port()
        procs.start("api", "api", "--port", str(port))
        for name in ("coordinator", "sweeper", "sender", "maintenance"):
            procs.start(name, name)
        base = f"http://127.0.0.1:{port}"
        wait_for(lambda: _ready(base), 60, "the API")

        due = (datetime.now(UTC) + timedelta(seconds=3)).replace(microsecond=0)
        created = httpx.post(
            f"{base}/v1/reminders",
            headers={"Authorization": f"Bearer {mint_token(Settings(jwt_secret=SECRET), 'dana')}"},
            json={
                "title": "Water the plants",
                "start_local": due.replace(tzinfo=None).isoformat(),
                "timezone": "UTC",
            },
            timeout=10,
        )
        assert created.status_code == 201, created.text
        rid = created.json()["id"]

        wait_for(lambda: len(inbox.messages) >= 1, 60, "the email at the SMTP server")
        time.sleep(3)  # a duplicate would arrive within a few polls
        assert len(inbox.messages) == 1
        mail_from, rcpt_tos, content = inbox.messages[0]
        assert mail_from == "reminders@example.com"
        assert rcpt_tos == ["dana@example.com"]
        message = email.message_from_bytes(content, policy=email.policy.default)
        key = f"{rid}-{due:%Y%m%dT%H%M%SZ}"
        assert message["Message-ID"] == f"<{key}@example.com>"
        assert message["X-Entity-Ref-ID"] == key
        assert "Water the plants" in message["Subject"]
        assert {part.get_content_type() for part in message.walk()} >= {
            "text/plain",
            "text/html",
        }

        with engine.connect() as conn:
            row = conn.execute(
                text(
                    "SELECT d.status, d.provider, d.provider_message_id, r.status AS r_status"
                    " FROM delivery_log d JOIN reminders r ON r.id = d.reminder_id"
                    " WHERE d.reminder_id = :r"
                ),
                {"r": rid},
            ).one()
        assert (row.status, row.provider, row.r_status) == ("sent", "smtp", "completed")
        assert row.provider_message_id == f"<{key}@example.com>"

        # The message went through SQS (not the table queue) and was deleted there.
        with engine.connect() as conn:
            assert conn.execute(text("SELECT count(*) FROM queue_messages")).scalar_one() == 0
        sqs = boto3.client("sqs", endpoint_url=sqs_endpoint, region_name=REGION, **CREDENTIALS)
        queue_url = sqs.get_queue_url(QueueName="reminders-e2e")["QueueUrl"]
        attributes = sqs.get_queue_attributes(
            QueueUrl=queue_url, AttributeNames=["ApproximateNumberOfMessages"]
        )["Attributes"]
        assert attributes["ApproximateNumberOfMessages"] == "0"

        for name in ("api", "coordinator", "sweeper", "sender", "maintenance"):
            assert procs.stop(name) == 0, (tmp_path / f"{name}.log").read_text()[-2000:]
    finally:
        procs.kill_all()
