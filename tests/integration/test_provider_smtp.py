"""The SMTP provider against a real local SMTP server (aiosmtpd Controller on a free port).

Checked on the wire: the envelope (MAIL FROM, RCPT TO), the message as the server received
it (headers, both parts, Message-ID and X-Entity-Ref-ID from the idempotency key), STARTTLS
with a throwaway CA and certificate (trustme) and AUTH; then each error class.

Expected values come from the RFCs: the transaction and reply classes of RFC 5321 (§3.3,
§4.2.1: 4yz transient, 5yz permanent; §4.5.2 dot-stuffing; §4.1.1.4 the end of data is
when the server takes the message), STARTTLS in RFC 3207, AUTH in RFC 4954 (535:
credentials invalid), RFC 5322 §3.6.4 (msg-id) and RFC 2046 §5.1.4 (multipart/alternative,
preferred part last); the transient/permanent/ambiguous split from docs/design.md,
"Retries and the dead-letter queue" and "Provider failover".
"""

from __future__ import annotations

import asyncio
import email
import email.policy
import socket
import ssl
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import trustme
from aiosmtpd.controller import Controller
from aiosmtpd.smtp import SMTP, AuthResult, Envelope, LoginPassword, Session

from reminder_core.errors import PermanentDeliveryError, TransientDeliveryError
from reminder_core.settings import Settings
from sender.main import build_provider
from sender.providers.smtp import SmtpProvider
from tests.support.emails import EMAIL, KEY

USER, PASSWORD = "mailer", "s3cret"


@dataclass
class Received:
    mail_from: str
    rcpt_tos: list[str]
    content: bytes
    tls: bool
    authenticated: bool


class Handler:
    """Records what arrives; `replies` maps a command ("MAIL", "RCPT", "DATA") to the reply
    to give instead of accepting, or to "drop" (close the connection without a reply) or
    "sleep" (answer after 2 s)."""

    def __init__(self) -> None:
        self.received: list[Received] = []
        self.replies: dict[str, str] = {}
        self.logins: list[bool] = []

    async def _scripted(self, server: SMTP, command: str) -> str | None:
        reply = self.replies.get(command)
        if reply == "drop":
            assert server.transport is not None
            server.transport.abort()
            return "250 OK"  # never written: the connection is gone
        if reply == "sleep":
            await asyncio.sleep(2)
            return None
        return reply

    # aiosmtpd calls the hooks and the authenticator with positional arguments.
    async def handle_MAIL(
        self, server: SMTP, _session: Session, envelope: Envelope, address: str, options: list[str]
    ) -> str:
        reply = await self._scripted(server, "MAIL")
        if reply:
            return reply
        envelope.mail_from = address
        envelope.mail_options.extend(options)
        return "250 OK"

    async def handle_RCPT(
        self, server: SMTP, _session: Session, envelope: Envelope, address: str, _options: list[str]
    ) -> str:
        reply = await self._scripted(server, "RCPT")
        if reply:
            return reply
        envelope.rcpt_tos.append(address)
        return "250 OK"

    async def handle_DATA(self, server: SMTP, session: Session, envelope: Envelope) -> str:
        assert isinstance(envelope.content, bytes)
        self.received.append(
            Received(
                mail_from=str(envelope.mail_from),
                rcpt_tos=list(envelope.rcpt_tos),
                content=envelope.content,
                tls=session.ssl is not None,
                authenticated=bool(session.authenticated),
            )
        )
        return await self._scripted(server, "DATA") or "250 2.0.0 OK: queued"

    def authenticate(
        self, _server: SMTP, _session: Session, _envelope: Envelope, _mechanism: str, data: Any
    ) -> AuthResult:
        ok = isinstance(data, LoginPassword) and data == (USER.encode(), PASSWORD.encode())
        self.logins.append(ok)
        return AuthResult(success=ok, handled=False)  # failure: the server answers 535


@dataclass
class Server:
    handler: Handler
    port: int


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@pytest.fixture(scope="module")
def ca() -> trustme.CA:
    return trustme.CA()


@pytest.fixture(scope="module")
def server_tls(ca: trustme.CA) -> ssl.SSLContext:
    context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    ca.issue_cert("127.0.0.1", "localhost").configure_cert(context)
    return context


@pytest.fixture(scope="module")
def client_tls(ca: trustme.CA) -> ssl.SSLContext:
    context = ssl.create_default_context()
    ca.configure_trust(context)
    return context


@pytest.fixture
def start_server() -> Iterator[Callable[..., Server]]:
    controllers: list[Controller] = []

    def start(**smtp_options: Any) -> Server:
        handler = Handler()
        port = free_port()
        controller = Controller(
            handler,
            hostname="127.0.0.1",
            port=port,
            authenticator=handler.authenticate,
            **smtp_options,
        )
        controller.start()
        controllers.append(controller)
        return Server(handler, port)

    yield start
    for controller in controllers:
        controller.stop()


def provider(server: Server, **options: Any) -> SmtpProvider:
    defaults: dict[str, Any] = {
        "starttls": "off",
        "connect_timeout_s": 2.0,
        "timeout_s": 5.0,
        "local_hostname": "sender.test",
    }
    return SmtpProvider("127.0.0.1", server.port, **(defaults | options))


def parse(received: Received) -> email.message.EmailMessage:
    msg = email.message_from_bytes(received.content, policy=email.policy.default)
    assert isinstance(msg, email.message.EmailMessage)
    return msg


# --- what goes on the wire ---------------------------------------------------------------


def test_message_over_starttls_with_auth(start_server, server_tls, client_tls) -> None:
    server = start_server(tls_context=server_tls, require_starttls=True, auth_required=True)
    receipt = provider(
        server, starttls="required", ssl_context=client_tls, username=USER, password=PASSWORD
    ).send(EMAIL, idempotency_key=KEY)

    assert receipt.provider == "smtp"
    assert receipt.provider_message_id == f"<{KEY}@example.com>"
    (got,) = server.handler.received
    assert got.tls is True
    assert got.authenticated is True
    assert server.handler.logins == [True]
    # The envelope carries the bare addresses (RFC 5321 §4.1.2 Path), not the display names.
    assert got.mail_from == "reminders@example.com"
    assert got.rcpt_tos == ["alice@example.org"]

    msg = parse(got)
    # A 83-character line: folded before the msg-id, which CFWS allows (RFC 5322 §3.6.4).
    assert msg["Message-ID"].strip() == f"<{KEY}@example.com>"
    assert msg["X-Entity-Ref-ID"] == KEY
    assert msg["From"] == "Reminders <reminders@example.com>"
    assert msg["To"] == "Alice <alice@example.org>"
    assert msg["Subject"] == "Reminder: Stand-up — café"
    assert msg["Date"] is not None
    # Header fields are ASCII on the wire (RFC 5322 §2.2); the subject is an RFC 2047 word.
    head = got.content.split(b"\r\n\r\n", 1)[0]
    assert head.isascii()
    assert b"=?utf-8?" in head.lower()
    assert msg.get_content_type() == "multipart/alternative"
    parts = [p.get_content_type() for p in msg.iter_parts()]
    assert parts == ["text/plain", "text/html"]  # preferred (HTML) last, RFC 2046 §5.1.4
    # Lines end in CRLF on the wire (RFC 5321 §2.3.8), whatever the template wrote.
    text = msg.get_body(("plain",)).get_content()  # type: ignore[union-attr]
    html = msg.get_body(("html",)).get_content()  # type: ignore[union-attr]
    assert text == EMAIL.text.replace("\n", "\r\n")
    assert html == EMAIL.html.replace("\n", "\r\n")


def test_a_resend_carries_the_same_message_id(start_server) -> None:
    server = start_server()
    smtp = provider(server)
    first = smtp.send(EMAIL, idempotency_key=KEY)
    again = smtp.send(EMAIL, idempotency_key=KEY)
    other = smtp.send(EMAIL, idempotency_key=KEY.replace("T073000Z", "T083000Z"))
    ids = [parse(r)["Message-ID"].strip() for r in server.handler.received]
    # SMTP has no idempotency key: both copies arrive, recognisably the same message.
    assert ids == [f"<{KEY}@example.com>", f"<{KEY}@example.com>", other.provider_message_id]
    assert first == again
    assert other.provider_message_id != first.provider_message_id


def test_opportunistic_uses_starttls_when_offered(start_server, server_tls, client_tls) -> None:
    server = start_server(tls_context=server_tls)
    provider(server, starttls="opportunistic", ssl_context=client_tls).send(
        EMAIL, idempotency_key=KEY
    )
    assert [r.tls for r in server.handler.received] == [True]


def test_opportunistic_sends_in_clear_when_not_offered(start_server) -> None:
    server = start_server()
    provider(server, starttls="opportunistic").send(EMAIL, idempotency_key=KEY)
    assert [r.tls for r in server.handler.received] == [False]


def test_credentials_never_cross_a_link_without_tls(start_server) -> None:
    # The server offers AUTH in clear (auth_require_tls=False) but not STARTTLS.
    server = start_server(auth_require_tls=False)
    smtp = provider(server, starttls="opportunistic", username=USER, password=PASSWORD)
    with pytest.raises(TransientDeliveryError, match="without TLS") as info:
        smtp.send(EMAIL, idempotency_key=KEY)
    assert info.value.ambiguous is False
    assert server.handler.logins == []
    assert server.handler.received == []


@pytest.mark.filterwarnings("ignore:Requiring AUTH while not requiring TLS")
def test_starttls_off_authenticates_in_clear_when_told_to(start_server) -> None:
    server = start_server(auth_require_tls=False, auth_required=True)
    provider(server, starttls="off", username=USER, password=PASSWORD).send(
        EMAIL, idempotency_key=KEY
    )
    assert [(r.tls, r.authenticated) for r in server.handler.received] == [(False, True)]


def test_build_provider_reads_the_smtp_settings(
    start_server, server_tls, ca, tmp_path: Path
) -> None:
    server = start_server(tls_context=server_tls, require_starttls=True, auth_required=True)
    ca_file = tmp_path / "ca.pem"
    ca.cert_pem.write_to_path(str(ca_file))
    settings = Settings(
        email_provider="smtp",
        smtp_host="127.0.0.1",
        smtp_port=server.port,
        smtp_username=USER,
        smtp_password=PASSWORD,
        smtp_starttls="required",
        smtp_ca_file=ca_file,
        smtp_timeout_s=5,
    )
    receipt = build_provider(settings).send(EMAIL, idempotency_key=KEY)
    assert receipt.provider_message_id == f"<{KEY}@example.com>"
    assert [(r.tls, r.authenticated) for r in server.handler.received] == [(True, True)]


# --- error classes ----------------------------------------------------------------------


def test_starttls_required_but_not_offered_is_transient(start_server) -> None:
    server = start_server()
    with pytest.raises(TransientDeliveryError, match="STARTTLS") as info:
        provider(server, starttls="required").send(EMAIL, idempotency_key=KEY)
    assert info.value.ambiguous is False
    assert server.handler.received == []


def test_an_untrusted_certificate_is_transient(start_server, server_tls) -> None:
    # The system CAs do not know the throwaway CA: the handshake fails, nothing is sent.
    server = start_server(tls_context=server_tls)
    with pytest.raises(TransientDeliveryError, match="starttls") as info:
        provider(server, starttls="required").send(EMAIL, idempotency_key=KEY)
    assert info.value.ambiguous is False
    assert server.handler.received == []


def test_wrong_password_535_is_transient(start_server, server_tls, client_tls) -> None:
    # 535 (RFC 4954 §6): the operator must fix the credentials; the message is fine.
    server = start_server(tls_context=server_tls, require_starttls=True, auth_required=True)
    smtp = provider(
        server, starttls="required", ssl_context=client_tls, username=USER, password="wrong"
    )
    with pytest.raises(TransientDeliveryError, match="535"):
        smtp.send(EMAIL, idempotency_key=KEY)
    # smtplib tries each mechanism offered (PLAIN, then LOGIN): every one refused.
    assert server.handler.logins
    assert not any(server.handler.logins)
    assert server.handler.received == []


@pytest.mark.parametrize(
    ("command", "reply", "error"),
    [
        ("MAIL", "421 4.3.2 Service shutting down", TransientDeliveryError),
        ("MAIL", "451 4.3.0 Try again later", TransientDeliveryError),
        ("MAIL", "550 5.7.1 Sender not allowed", TransientDeliveryError),  # configuration
        ("MAIL", "552 5.3.4 Message size exceeds limit", PermanentDeliveryError),
        ("RCPT", "452 4.2.2 Mailbox full", TransientDeliveryError),
        ("RCPT", "550 5.1.1 No such user", PermanentDeliveryError),
        ("DATA", "451 4.3.0 Local error in processing", TransientDeliveryError),
        ("DATA", "554 5.6.0 Message rejected", PermanentDeliveryError),
    ],
)
def test_reply_classes(start_server, command, reply, error) -> None:
    server = start_server()
    server.handler.replies[command] = reply
    with pytest.raises(error, match=reply.split()[0]) as info:
        provider(server).send(EMAIL, idempotency_key=KEY)
    if isinstance(info.value, TransientDeliveryError):
        assert info.value.ambiguous is False  # the server answered: it did not take it


def test_dropped_before_data_is_transient_not_ambiguous(start_server) -> None:
    server = start_server()
    server.handler.replies["RCPT"] = "drop"
    with pytest.raises(TransientDeliveryError) as info:
        provider(server).send(EMAIL, idempotency_key=KEY)
    assert info.value.ambiguous is False
    assert server.handler.received == []


def test_dropped_after_the_end_of_data_is_ambiguous(start_server) -> None:
    server = start_server()
    server.handler.replies["DATA"] = "drop"
    with pytest.raises(TransientDeliveryError, match="end of data") as info:
        provider(server).send(EMAIL, idempotency_key=KEY)
    assert info.value.ambiguous is True
    assert len(server.handler.received) == 1  # the server did have the whole message


def test_no_reply_to_the_end_of_data_in_time_is_ambiguous(start_server) -> None:
    server = start_server()
    server.handler.replies["DATA"] = "sleep"
    with pytest.raises(TransientDeliveryError) as info:
        provider(server, timeout_s=0.3).send(EMAIL, idempotency_key=KEY)
    assert info.value.ambiguous is True


def test_connection_refused_is_transient_not_ambiguous() -> None:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))  # bound, never listening: connections are refused
        smtp = SmtpProvider(
            "127.0.0.1", s.getsockname()[1], starttls="off", local_hostname="sender.test"
        )
        with pytest.raises(TransientDeliveryError, match="connect") as info:
            smtp.send(EMAIL, idempotency_key=KEY)
    assert info.value.ambiguous is False
