"""SMTP provider (stdlib smtplib): one connection per email, STARTTLS and AUTH as configured.

The message is `build_mime`'s multipart/alternative (text, then HTML) with
`Message-ID: <idempotency_key@sender-domain>` and `X-Entity-Ref-ID: idempotency_key`, so
every resend of one occurrence carries the same Message-ID. SMTP has no idempotency key: a
resend after an ambiguous failure can deliver twice, and receivers that deduplicate on
Message-ID show one email.

Transaction (RFC 5321 §3.3): greeting 220, EHLO, STARTTLS (RFC 3207) then EHLO again,
AUTH (RFC 4954) when credentials are set, MAIL FROM, RCPT TO, DATA (354), the dot-stuffed
message ending in CRLF.CRLF (§4.5.2), 250: only that last reply means the server took
responsibility for the message (§4.1.1.4). Errors:

- 4yz (transient negative completion, §4.2.1; 421: service closing, §3.8) → transient.
- 530/534/535/538 (authentication or encryption required / refused, RFC 4954 §6,
  RFC 3207 §4) and any 5yz before MAIL (greeting, EHLO, STARTTLS, AUTH) → transient: the
  server refuses this client's session, not the message; the operator must fix the
  configuration, and meanwhile the breaker can fail over to a backup.
- 5yz to MAIL FROM → transient for the same reason (the From address is configuration),
  except 552/555 (message size or parameters, RFC 1870 §6, RFC 5321 §4.1.1.11) → permanent.
- 5yz to RCPT TO, DATA or the end of data → permanent (permanent negative completion).
- Connection refused, timeouts, disconnects → transient; ambiguous only once the final
  CRLF.CRLF was written and no reply came (the server may have taken the message, the
  duplicate problem of RFC 1047). A connection lost while the message was still being
  written is not ambiguous: a server never delivers a transaction whose data did not end.
"""

from __future__ import annotations

import re
import smtplib
import socket
import ssl
from collections.abc import Callable
from datetime import UTC, datetime
from email.utils import parseaddr
from typing import Literal

from reminder_core.errors import (
    DeliveryError,
    PermanentDeliveryError,
    TransientDeliveryError,
)
from reminder_core.settings import Settings
from sender.providers.base import OutgoingEmail, SendReceipt
from sender.providers.mime import (
    DEFAULT_MESSAGE_ID_DOMAIN,
    MIME_POLICY,
    address_domain,
    build_mime,
)

#: CRLF line ends (RFC 5321 §2.3.8); headers folded at RFC 5322 §2.1.1's 78 characters,
#: but the Message-ID (key + domain, often past 78) is written whole (see MIME_POLICY).
SMTP_POLICY = MIME_POLICY.clone(linesep="\r\n")

StartTls = Literal["required", "opportunistic", "off"]
#: Where in the transaction a reply or failure happened (see `classify_smtp_reply`).
Stage = Literal["connect", "ehlo", "starttls", "auth", "mail", "rcpt", "data", "message"]

#: Authentication or encryption required / refused (RFC 4954 §6, RFC 3207 §4).
AUTH_OR_TLS_CODES = frozenset({530, 534, 535, 538})
#: 5yz replies to MAIL FROM that are the message's fault: size exceeded (RFC 1870 §6),
#: parameters not recognised (RFC 5321 §4.1.1.11).
MAIL_MESSAGE_CODES = frozenset({552, 555})
_SESSION_STAGES = frozenset({"connect", "ehlo", "starttls", "auth"})
_LEADING_DOT = re.compile(rb"^\.", re.MULTILINE)


def classify_smtp_reply(stage: Stage, code: int, text: str) -> DeliveryError:
    """The delivery error for an unexpected SMTP reply (pure; the caller raises it).

    Args:
        stage: the command the reply answers ("message" = the end of data).
        code: the three-digit reply code (-1 when unreadable).
        text: the reply text, kept in the exception message.

    Returns:
        See the module docstring for the table. An unreadable or unexpected code is
        transient, and ambiguous at the end of data (the server's decision is unknown).
    """
    detail = f"smtp: {stage}: {code} {text}".strip()
    if (
        400 <= code < 500
        or code in AUTH_OR_TLS_CODES
        or (500 <= code < 600 and stage in _SESSION_STAGES)
    ):
        return TransientDeliveryError(detail)
    if 500 <= code < 600:
        if stage == "mail" and code not in MAIL_MESSAGE_CODES:
            return TransientDeliveryError(detail)
        return PermanentDeliveryError(detail)
    return TransientDeliveryError(detail, ambiguous=stage == "message")


def dot_stuff(message: bytes) -> bytes:
    """The DATA payload: lines starting with "." doubled, CRLF endings, terminated by
    CRLF.CRLF (RFC 5321 §4.5.2, §4.1.1.4). `message` must already use CRLF."""
    data = _LEADING_DOT.sub(b"..", message)
    if not data.endswith(b"\r\n"):
        data += b"\r\n"
    return data + b".\r\n"


class _Session:
    """One send's SMTP connection and the step under way (a failure's classification)."""

    def __init__(self) -> None:
        self.stage: Stage = "connect"
        self.smtp: smtplib.SMTP | None = None


class _Reply(Exception):
    def __init__(self, stage: Stage, code: int, text: bytes | str) -> None:
        super().__init__(stage, code)
        self.stage: Stage = stage
        self.code = code
        self.text = text.decode("utf-8", "replace") if isinstance(text, bytes) else text


class SmtpProvider:
    """Sends through an SMTP server (a relay such as Postfix, or a provider's submission
    endpoint on port 587).

    Args:
        host, port: the server.
        username, password: AUTH credentials; both or neither. Never sent without TLS
            unless `starttls="off"` says the link is trusted.
        starttls: "required" (fail unless the server offers STARTTLS), "opportunistic"
            (use it when offered, plain otherwise), "off" (never). When used, the
            certificate is verified against `ssl_context` either way.
        ssl_context: verification context; None: the system's CAs
            (`ssl.create_default_context()`).
        connect_timeout_s: seconds to open the TCP connection and get the greeting.
        timeout_s: seconds to wait for each reply, and per socket write.
        local_hostname: EHLO name; None: `socket.getfqdn()`, looked up once here.
        name: provider name recorded on delivery rows.
        clock: aware UTC now, for the Date header.
    """

    def __init__(
        self,
        host: str,
        port: int = 587,
        *,
        username: str | None = None,
        password: str | None = None,
        starttls: StartTls = "required",
        ssl_context: ssl.SSLContext | None = None,
        connect_timeout_s: float = 5.0,
        timeout_s: float = 30.0,
        local_hostname: str | None = None,
        name: str = "smtp",
        clock: Callable[[], datetime] = lambda: datetime.now(UTC),
    ) -> None:
        if (username is None) != (password is None):
            raise ValueError("SMTP username and password go together")
        self._host = host
        self._port = port
        self._credentials = (username, password) if username and password else None
        self._starttls = starttls
        self._ssl_context = ssl_context or ssl.create_default_context()
        self._connect_timeout_s = connect_timeout_s
        self._timeout_s = timeout_s
        self._local_hostname = local_hostname or socket.getfqdn()
        self._clock = clock
        self.name = name

    @classmethod
    def from_settings(cls, settings: Settings) -> SmtpProvider:
        """An SMTP provider from SMTP_HOST, SMTP_PORT, SMTP_USERNAME / SMTP_PASSWORD,
        SMTP_STARTTLS, SMTP_CA_FILE, SMTP_TIMEOUT_S and PROVIDER_CONNECT_TIMEOUT_S.

        Raises:
            ValueError: SMTP_HOST unset, or only one of username and password set.
        """
        if not settings.smtp_host:
            raise ValueError("EMAIL_PROVIDER=smtp needs SMTP_HOST")
        ca_file = settings.smtp_ca_file
        return cls(
            settings.smtp_host,
            settings.smtp_port,
            username=settings.smtp_username,
            password=settings.smtp_password,
            starttls=settings.smtp_starttls,
            ssl_context=ssl.create_default_context(cafile=ca_file) if ca_file else None,
            connect_timeout_s=settings.provider_connect_timeout_s,
            timeout_s=settings.smtp_timeout_s,
        )

    def send(self, email: OutgoingEmail, *, idempotency_key: str) -> SendReceipt:
        """Deliver `email` in one SMTP transaction on a new connection, then QUIT.

        Returns:
            A receipt whose provider_message_id is the Message-ID, "<key@domain>", with
            the domain of the From address.

        Raises:
            TransientDeliveryError: 4yz, session refusals, connection failures and timeouts;
                `ambiguous` when the end of data was sent and no reply came.
            PermanentDeliveryError: 5yz to RCPT TO, DATA or the end of data; an unusable
                recipient address.
        """
        mail_from = parseaddr(email.sender)[1]
        rcpt_to = parseaddr(email.to)[1]
        if not rcpt_to:
            raise PermanentDeliveryError(f"{self.name}: no address in {email.to!r}")
        if not mail_from:
            raise TransientDeliveryError(f"{self.name}: no address in MAIL_FROM {email.sender!r}")
        domain = address_domain(email.sender) or DEFAULT_MESSAGE_ID_DOMAIN
        mime = build_mime(email, idempotency_key=idempotency_key, now=self._clock(), domain=domain)
        message_id = str(mime["Message-ID"])
        payload = dot_stuff(mime.as_bytes(policy=SMTP_POLICY))
        session = _Session()
        try:
            self._transact(session, mail_from, rcpt_to, payload)
        except _Reply as exc:
            raise classify_smtp_reply(exc.stage, exc.code, exc.text) from exc
        except smtplib.SMTPResponseException as exc:  # greeting, EHLO, STARTTLS, AUTH refusals
            raise classify_smtp_reply(session.stage, exc.smtp_code, _text(exc.smtp_error)) from exc
        except (smtplib.SMTPServerDisconnected, OSError) as exc:  # incl. timeouts and TLS
            if session.stage == "message":
                raise TransientDeliveryError(
                    f"{self.name}: no reply after the end of data: {exc}", ambiguous=True
                ) from exc
            raise TransientDeliveryError(f"{self.name}: {session.stage}: {exc!r}") from exc
        except smtplib.SMTPException as exc:  # no STARTTLS / AUTH offered
            raise TransientDeliveryError(f"{self.name}: {session.stage}: {exc}") from exc
        finally:
            if session.smtp is not None:
                _quit(session.smtp)
        return SendReceipt(provider=self.name, provider_message_id=message_id)

    def _transact(self, session: _Session, mail_from: str, rcpt_to: str, payload: bytes) -> None:
        """One SMTP transaction on a new connection, `session.stage` naming the step
        under way (what a failure is classified by).

        Raises:
            _Reply: an unexpected reply to MAIL, RCPT, DATA or the end of data.
            smtplib.SMTPException / OSError: as smtplib raises them.
        """
        # Connects and reads the greeting (SMTPConnectError unless 220); the host given
        # here is also the name STARTTLS verifies the certificate against.
        smtp = session.smtp = smtplib.SMTP(
            self._host,
            self._port,
            local_hostname=self._local_hostname,
            timeout=self._connect_timeout_s,
        )
        assert smtp.sock is not None
        smtp.sock.settimeout(self._timeout_s)
        session.stage = "ehlo"
        smtp.ehlo_or_helo_if_needed()
        session.stage = "starttls"
        tls = self._start_tls(smtp)
        session.stage = "auth"
        self._login(smtp, tls=tls)
        session.stage = "mail"
        options = ["SMTPUTF8"] if not (mail_from + rcpt_to).isascii() else []
        code, text = smtp.mail(mail_from, options)
        if code != 250:
            raise _Reply("mail", code, text)
        session.stage = "rcpt"
        code, text = smtp.rcpt(rcpt_to)
        if code not in (250, 251):
            raise _Reply("rcpt", code, text)
        session.stage = "data"
        smtp.putcmd("data")
        code, text = smtp.getreply()
        if code != 354:
            raise _Reply("data", code, text)
        smtp.send(payload)
        session.stage = "message"  # from here on the server may have the whole message
        code, text = smtp.getreply()
        if code != 250:
            raise _Reply("message", code, text)

    def _start_tls(self, smtp: smtplib.SMTP) -> bool:
        if self._starttls == "off":
            return False
        if not smtp.has_extn("starttls"):
            if self._starttls == "required":
                raise smtplib.SMTPNotSupportedError(
                    "server does not offer STARTTLS (SMTP_STARTTLS=required)"
                )
            return False
        smtp.starttls(context=self._ssl_context)
        smtp.ehlo()  # RFC 3207 §4.2: forget what was learnt before TLS, ask again
        return True

    def _login(self, smtp: smtplib.SMTP, *, tls: bool) -> None:
        if self._credentials is None:
            return
        if not tls and self._starttls != "off":
            raise smtplib.SMTPNotSupportedError(
                "refusing to send SMTP credentials without TLS (server offers no STARTTLS)"
            )
        smtp.login(*self._credentials)


def _text(value: bytes | str) -> str:
    return value.decode("utf-8", "replace") if isinstance(value, bytes) else value


def _quit(smtp: smtplib.SMTP) -> None:
    """QUIT politely when still connected; close in any case (the outcome is decided)."""
    try:
        if smtp.sock is not None:
            smtp.sock.settimeout(min(smtp.timeout, 5.0))
            smtp.quit()
    except (smtplib.SMTPException, OSError):
        pass
    finally:
        smtp.close()


__all__ = ["SmtpProvider", "StartTls", "classify_smtp_reply", "dot_stuff"]
