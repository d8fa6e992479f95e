"""The SES provider against a real local server speaking the SES API v2 protocol.

Happy path and MessageRejected: moto in server mode (ThreadedMotoServer on a free port);
the request is checked as it goes on the wire (botocore's `before-send` event, the signed
HTTP request) and as moto's SES backend recorded it. Error classes moto cannot produce
(throttling, 5xx, account problems, timeouts, dropped connections) come from a small
local HTTP server answering as the AWS REST-JSON protocol does: the status code, the
error code in the `x-amzn-ErrorType` header and {"message": ...} in the body.

Expected values are from the SES API v2 reference (SendEmail: `POST
/v2/email/outbound-emails`, request members, errors and their HTTP statuses) and
docs/design.md, "Retries and the dead-letter queue" and "Provider failover" (transient vs
permanent; ambiguous only when the request may have been taken).
"""

from __future__ import annotations

import functools
import json
import socket
import threading
import time
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import boto3
import pytest
from botocore.config import Config
from moto.core import DEFAULT_ACCOUNT_ID
from moto.server import ThreadedMotoServer
from moto.ses.models import ses_backends

from reminder_core.errors import PermanentDeliveryError, TransientDeliveryError
from reminder_core.settings import Settings
from sender.main import build_provider
from sender.providers.base import OutgoingEmail
from sender.providers.ses import SesProvider
from tests.support.emails import EMAIL, KEY

REGION = "eu-west-3"  # a region no other test uses, so moto's shared state stays apart
SENDER = "reminders@example.com"


@functools.cache
def _session() -> boto3.session.Session:
    return boto3.session.Session()  # loading the service model once keeps the tests fast


def ses_client(endpoint_url: str, *, read_timeout_s: float = 5.0) -> Any:
    return _session().client(
        "sesv2",
        region_name=REGION,
        endpoint_url=endpoint_url,
        aws_access_key_id="testing",
        aws_secret_access_key="testing",
        config=Config(
            connect_timeout=1,
            read_timeout=read_timeout_s,
            retries={"total_max_attempts": 1, "mode": "standard"},
        ),
    )


@pytest.fixture(scope="module")
def moto_url() -> Iterator[str]:
    server = ThreadedMotoServer(ip_address="127.0.0.1", port=0, verbose=False)
    server.start()
    host, port = server.get_host_and_port()
    url = f"http://{host}:{port}"
    client = ses_client(url)
    client.create_email_identity(EmailIdentity=SENDER)  # SES sends only from verified ones
    yield url
    server.stop()


def sent_messages() -> list[Any]:
    return list(ses_backends[DEFAULT_ACCOUNT_ID][REGION].sent_messages)


class WireLog:
    """The SendEmail requests botocore puts on the wire (after signing)."""

    def __init__(self, client: Any) -> None:
        self.requests: list[Any] = []
        client.meta.events.register("before-send.sesv2.SendEmail", self._record)

    def _record(self, request: Any, **_: Any) -> None:
        self.requests.append(request)


def test_send_puts_both_parts_the_key_and_the_recipient_on_the_wire(moto_url) -> None:
    client = ses_client(moto_url)
    wire = WireLog(client)
    receipt = SesProvider(client, configuration_set=None).send(EMAIL, idempotency_key=KEY)

    assert receipt.provider == "ses"
    (request,) = wire.requests
    assert request.method == "POST"
    assert request.url == f"{moto_url}/v2/email/outbound-emails"
    body = json.loads(request.body)
    assert body["FromEmailAddress"] == f"Reminders <{SENDER}>"
    assert body["Destination"] == {"ToAddresses": ["Alice <alice@example.org>"]}
    simple = body["Content"]["Simple"]
    assert simple["Subject"] == {"Data": "Reminder: Stand-up — café", "Charset": "UTF-8"}
    assert simple["Body"]["Text"] == {"Data": EMAIL.text, "Charset": "UTF-8"}
    assert simple["Body"]["Html"] == {"Data": EMAIL.html, "Charset": "UTF-8"}
    assert simple["Headers"] == [{"Name": "X-Entity-Ref-ID", "Value": KEY}]
    assert body["EmailTags"] == [{"Name": "idempotency_key", "Value": KEY}]
    assert "ConfigurationSetName" not in body

    # What the server took: moto's SES backend keeps the subject and the HTML part.
    (message,) = [m for m in sent_messages() if m.id == receipt.provider_message_id]
    assert message.source == f"Reminders <{SENDER}>"
    assert message.destinations == {"ToAddresses": ["Alice <alice@example.org>"]}
    assert message.subject == "Reminder: Stand-up — café"
    assert message.body == EMAIL.html


def test_configuration_set_is_named_on_the_request(moto_url) -> None:
    client = ses_client(moto_url)
    wire = WireLog(client)
    client.create_configuration_set(ConfigurationSetName="reminders-events")
    SesProvider(client, configuration_set="reminders-events").send(EMAIL, idempotency_key=KEY)
    assert json.loads(wire.requests[0].body)["ConfigurationSetName"] == "reminders-events"


def test_build_provider_reads_the_ses_settings(moto_url, monkeypatch) -> None:
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "testing")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "testing")
    settings = Settings(email_provider="ses", ses_region=REGION, ses_endpoint_url=moto_url)
    provider = build_provider(settings)
    receipt = provider.send(EMAIL, idempotency_key=KEY)
    assert receipt.provider == "ses"
    assert receipt.provider_message_id in {m.id for m in sent_messages()}


def test_the_region_falls_back_to_aws_region(moto_url, monkeypatch) -> None:
    # SES_REGION's documented fallback is AWS_REGION, the setting SQS uses too (boto3
    # itself reads only AWS_DEFAULT_REGION): a deployment that sets AWS_REGION alone works.
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "testing")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "testing")
    monkeypatch.delenv("AWS_DEFAULT_REGION", raising=False)
    settings = Settings(email_provider="ses", aws_region=REGION, ses_endpoint_url=moto_url)
    receipt = build_provider(settings).send(EMAIL, idempotency_key=KEY + "-region")
    assert receipt.provider_message_id in {m.id for m in sent_messages()}


def test_an_unverified_sender_is_message_rejected_permanent(moto_url) -> None:
    # SES refuses a From address that is not a verified identity with MessageRejected
    # (HTTP 400): the message as it is can never be sent.
    before = len(sent_messages())
    email = OutgoingEmail(to="a@example.org", sender="x@unverified.example", subject="s",
                          text="t", html="<p>h</p>")  # fmt: skip
    with pytest.raises(PermanentDeliveryError, match="MessageRejected"):
        SesProvider(ses_client(moto_url)).send(email, idempotency_key=KEY)
    assert len(sent_messages()) == before


# --- error classes, from a server answering as AWS does ---------------------------------


class AwsErrorServer(ThreadingHTTPServer):
    """Answers every request with `self.answer`: (status, error code) as AWS REST-JSON
    (`x-amzn-ErrorType` header, {"message": ...} body), or "sleep" / "drop"."""

    daemon_threads = True

    def __init__(self) -> None:
        super().__init__(("127.0.0.1", 0), _AwsErrorHandler)
        self.answer: tuple[int, str] | str = (500, "InternalFailure")
        self.requests = 0

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.server_address[1]}"


class _AwsErrorHandler(BaseHTTPRequestHandler):
    server: AwsErrorServer
    protocol_version = "HTTP/1.1"

    def log_message(self, format: str, *args: Any) -> None:
        pass

    def do_POST(self) -> None:
        self.rfile.read(int(self.headers.get("Content-Length") or 0))
        self.server.requests += 1
        answer = self.server.answer
        if answer == "drop":
            self.close_connection = True
            self.connection.shutdown(socket.SHUT_RDWR)
            return
        if answer == "sleep":
            time.sleep(2)
            return
        assert isinstance(answer, tuple)
        status, code = answer
        data = json.dumps({"message": f"injected {code}"}).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("x-amzn-ErrorType", f"{code}:http://internal.amazon.com/")
        self.send_header("x-amzn-RequestId", "00000000-0000-0000-0000-000000000000")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)


@pytest.fixture(scope="module")
def aws_errors() -> Iterator[AwsErrorServer]:
    server = AwsErrorServer()
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield server
    server.shutdown()
    server.server_close()


@pytest.mark.parametrize(
    ("status", "code"),
    [
        (429, "TooManyRequestsException"),  # throttled: not taken
        (400, "LimitExceededException"),  # sending quota / rate
        (500, "InternalFailure"),
        (503, "ServiceUnavailable"),
        (400, "AccountSuspendedException"),  # operator problems: the backup can send it
        (400, "SendingPausedException"),
        (400, "MailFromDomainNotVerifiedException"),
        (404, "NotFoundException"),  # e.g. the configuration set does not exist
        (403, "AccessDeniedException"),  # credentials / IAM
    ],
)
def test_transient_answers(aws_errors, status, code) -> None:
    aws_errors.answer = (status, code)
    with pytest.raises(TransientDeliveryError, match=code) as info:
        SesProvider(ses_client(aws_errors.url)).send(EMAIL, idempotency_key=KEY)
    assert info.value.ambiguous is False  # SES answered: it did not take the message


@pytest.mark.parametrize("code", ["MessageRejected", "BadRequestException"])
def test_permanent_answers(aws_errors, code) -> None:
    aws_errors.answer = (400, code)
    with pytest.raises(PermanentDeliveryError, match=code):
        SesProvider(ses_client(aws_errors.url)).send(EMAIL, idempotency_key=KEY)


def test_one_call_per_send_botocore_does_not_retry_behind_our_back(aws_errors, monkeypatch) -> None:
    # botocore would retry a 500 (and a read timeout: a resend) up to 3 times by default.
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "testing")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "testing")
    aws_errors.answer = (500, "InternalFailure")
    before = aws_errors.requests
    with pytest.raises(TransientDeliveryError):
        SesProvider.from_settings(
            Settings(email_provider="ses", ses_region=REGION, ses_endpoint_url=aws_errors.url)
        ).send(EMAIL, idempotency_key=KEY)
    assert aws_errors.requests == before + 1


def test_read_timeout_after_the_request_was_sent_is_ambiguous(aws_errors) -> None:
    aws_errors.answer = "sleep"
    with pytest.raises(TransientDeliveryError) as info:
        SesProvider(ses_client(aws_errors.url, read_timeout_s=0.3)).send(EMAIL, idempotency_key=KEY)
    assert info.value.ambiguous is True


def test_connection_closed_before_the_answer_is_ambiguous(aws_errors) -> None:
    aws_errors.answer = "drop"
    with pytest.raises(TransientDeliveryError) as info:
        SesProvider(ses_client(aws_errors.url)).send(EMAIL, idempotency_key=KEY)
    assert info.value.ambiguous is True


def test_connection_refused_is_transient_and_not_ambiguous() -> None:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]  # bound, never listening: connections are refused
        with pytest.raises(TransientDeliveryError, match="cannot connect") as info:
            SesProvider(ses_client(f"http://127.0.0.1:{port}")).send(EMAIL, idempotency_key=KEY)
    assert info.value.ambiguous is False
