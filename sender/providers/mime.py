"""RFC 5322 messages built from a rendered email, shared by the file sink and SMTP."""

from __future__ import annotations

from datetime import UTC, datetime
from email.message import EmailMessage
from email.utils import format_datetime, parseaddr

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


def build_mime(
    email: OutgoingEmail,
    *,
    idempotency_key: str,
    now: datetime,
    domain: str = DEFAULT_MESSAGE_ID_DOMAIN,
) -> EmailMessage:
    """Build the RFC 5322 message: multipart/alternative, text then HTML (RFC 2046
    §5.1.4: the last part is the preferred one), Message-ID from the key.

    Args:
        email: the rendered email (sender, to, subject, text, html).
        idempotency_key: becomes the Message-ID's left part and `X-Entity-Ref-ID`.
        now: aware instant for the Date header (written in UTC).
        domain: right part of the Message-ID.

    Returns:
        A new EmailMessage; nothing is written anywhere.
    """
    msg = EmailMessage()
    msg["From"] = email.sender
    msg["To"] = email.to
    msg["Subject"] = email.subject
    msg["Date"] = format_datetime(now.astimezone(UTC))
    msg["Message-ID"] = message_id(idempotency_key, domain)
    msg["X-Entity-Ref-ID"] = idempotency_key
    msg.set_content(email.text)
    msg.add_alternative(email.html, subtype="html")
    return msg
