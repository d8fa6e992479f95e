"""RFC 5322 messages built from a rendered email, shared by the file sink and SMTP."""

from __future__ import annotations

import re
from datetime import UTC, datetime
from email.charset import QP, Charset
from email.header import Header
from email.message import Message
from email.mime.multipart import MIMEMultipart
from email.mime.text import MIMEText
from email.policy import compat32
from email.utils import format_datetime, formataddr, parseaddr

from sender.providers.base import OutgoingEmail

#: Right-hand side of Message-IDs when the sender address gives no domain.
DEFAULT_MESSAGE_ID_DOMAIN = "reminders"


def address_domain(address: str) -> str | None:
    """Domain of an address or header value ("Name <a@example.com>" -> "example.com");
    None when there is none."""
    _, addr = parseaddr(address)
    _, at, domain = addr.rpartition("@")
    return domain.lower() if at and domain else None


def message_id(idempotency_key: str, domain: str = DEFAULT_MESSAGE_ID_DOMAIN) -> str:
    """The Message-ID of an occurrence: "<idempotency_key@domain>" (RFC 5322 §3.6.4
    msg-id: id-left "@" id-right in angle brackets).

    Deterministic, so every resend of one occurrence carries the same Message-ID and
    receivers that deduplicate on it show one email.
    """
    return f"<{idempotency_key}@{domain}>"


#: Bodies that are not 7-bit safe: UTF-8, quoted-printable (stays readable, and breaks
#: lines past RFC 5322 §2.1.1's 998 characters with soft line breaks, RFC 2045 §6.7).
_UTF8_QP = Charset("utf-8")
_UTF8_QP.body_encoding = QP


class _MimePolicy(type(compat32)):  # type: ignore[misc]
    """compat32 (what `email.mime` messages are made for; RFC 2047 encoded words folded
    to 78 characters), except that an ASCII value without white space is written whole
    on its line: compat32 would fold it before the value ("Message-ID:" CRLF " <...>"),
    which parsers (Python's email package among them) read back with a leading space.
    Such a line (a Message-ID of key + domain) may pass 78 characters, the SHOULD of RFC
    5322 §2.1.1, and stays below its MUST of 998 (the longest such value here is a
    Message-ID of ~100)."""

    def fold(self, name: str, value: str) -> str:
        if _whole(name, value):
            return f"{name}: {value}{self.linesep}"
        return str(super().fold(name, value))

    def fold_binary(self, name: str, value: str) -> bytes:
        if _whole(name, value):
            return f"{name}: {value}{self.linesep}".encode("ascii")
        return bytes(super().fold_binary(name, value))


def _whole(name: str, value: object) -> bool:
    return (
        isinstance(value, str)
        and value.isascii()
        and not any(c in value for c in " \t\r\n")
        and len(name) + 2 + len(value) <= 998
    )


#: Serialise `build_mime`'s messages with this policy or a clone (`clone(linesep="\r\n")`
#: for SMTP): their headers are compat32's (str, and `Header` for encoded words).
#: Lines folded at 76: Python's folder then keeps each encoded word within RFC 2047 §2's
#: 75 characters (at 78 it writes words of 76, as the default policy does too).
MIME_POLICY = _MimePolicy(max_line_length=76)


def build_mime(
    email: OutgoingEmail,
    *,
    idempotency_key: str,
    now: datetime,
    domain: str = DEFAULT_MESSAGE_ID_DOMAIN,
) -> Message:
    """Build the RFC 5322 message: multipart/alternative, text then HTML (RFC 2046
    §5.1.4: the last part is the preferred one), Message-ID from the key.

    Built with the email package's `email.mime` classes (the compat32 API): ~0.3 ms per
    message against ~1.0 ms for `EmailMessage` with the default policy, whose header
    objects parse every value set (issue 15: it was most of the file sink's CPU, and the
    file sink is most of `reminders dev`'s). Header fields are ASCII (RFC 5322 §2.2):
    a non-ASCII subject or display name is an RFC 2047 encoded word; a body is 7bit
    US-ASCII when it is, else quoted-printable UTF-8 (RFC 2045 §6.7).

    Args:
        email: the rendered email (sender, to, subject, text, html).
        idempotency_key: becomes the Message-ID's left part and `X-Entity-Ref-ID`.
        now: aware instant for the Date header (written in UTC).
        domain: right part of the Message-ID.

    Returns:
        A new message (serialise it with MIME_POLICY or a clone); nothing is written.
    """
    parts = [_text(email.text, "plain"), _text(email.html, "html")]
    msg = MIMEMultipart("alternative", boundary=_boundary(idempotency_key, parts))
    msg["From"] = _address(email.sender)
    msg["To"] = _address(email.to)
    subject: str | Header = email.subject
    if not email.subject.isascii():  # RFC 2047 encoded words
        subject = Header(email.subject, "utf-8", header_name="Subject")
    msg["Subject"] = subject  # type: ignore[assignment]  # compat32 takes a Header
    msg["Date"] = format_datetime(now.astimezone(UTC))
    msg["Message-ID"] = message_id(idempotency_key, domain)
    msg["X-Entity-Ref-ID"] = idempotency_key
    for name, value in email.headers:
        msg[name] = value
    for part in parts:
        msg.attach(part)
    return msg


#: What an idempotency key may hold to make a boundary: RFC 2046 §5.1.1 bchars, less
#: those that need quoting in a Content-Type parameter (RFC 2045 §5.1 tspecials).
_BOUNDARY_SAFE = re.compile(r"[0-9A-Za-z_.-]{1,60}")


def _boundary(idempotency_key: str, parts: list[MIMEText]) -> str | None:
    """The multipart boundary: "=_<idempotency_key>" (the same for every copy of one
    occurrence's email), or None to let the email package draw a random one.

    Given no boundary, the email package draws one and compiles a regular expression of
    it to check that no line of the parts is it: ~0.3 ms a message, a third of the file
    sink's CPU. The boundary only has to occur in no part (RFC 2046 §5.1.1), which a
    substring test of each part's encoded body checks (their headers are ours and cannot
    hold it); a body that holds it (a user may write anything) gets a random one.
    """
    if _BOUNDARY_SAFE.fullmatch(idempotency_key) is None:
        return None
    boundary = f"=_{idempotency_key}"
    for part in parts:
        payload = part.get_payload()
        if not isinstance(payload, str) or boundary in payload:
            return None
    return boundary


def _address(value: str) -> str:
    """An address header's value in ASCII: a non-ASCII display name RFC 2047-encoded."""
    if value.isascii():
        return value
    name, addr = parseaddr(value)
    return formataddr((name, addr), charset="utf-8") if addr else value


def _text(content: str, subtype: str) -> MIMEText:
    seven_bit = content.isascii() and all(len(line) <= 998 for line in content.splitlines())
    return MIMEText(content, subtype, "us-ascii" if seven_bit else _UTF8_QP)  # type: ignore[arg-type]
