"""`build_mime` against the RFCs it follows (issue 15 rebuilt it on the compat32 API for
speed): header fields ASCII with RFC 2047 encoded words (RFC 5322 §2.2), no line past
998 characters (RFC 5322 §2.1.1), bodies 7bit when they are US-ASCII and otherwise
quoted-printable (RFC 2045 §6.7), multipart/alternative with the preferred HTML part last
(RFC 2046 §5.1.4); what a reader parses back is what was rendered."""

from __future__ import annotations

import email
import email.policy
import re
from datetime import UTC, datetime

import pytest

from sender.providers.base import OutgoingEmail
from sender.providers.mime import MIME_POLICY, build_mime
from sender.providers.smtp import SMTP_POLICY

KEY = "0190b3c2-7d1e-7a1b-9c3d-1234567890ab-20300101T120000Z"
NOW = datetime(2030, 1, 1, 12, 0, 5, tzinfo=UTC)


def wire(mail: OutgoingEmail, policy: email.policy.Policy = MIME_POLICY) -> bytes:
    return build_mime(mail, idempotency_key=KEY, now=NOW, domain="example.com").as_bytes(
        policy=policy
    )


def parsed(raw: bytes) -> email.message.EmailMessage:
    return email.message_from_bytes(raw, policy=email.policy.default)  # type: ignore[return-value]


ASCII = OutgoingEmail(
    to="Alice <alice@example.org>",
    sender="Reminders <reminders@example.com>",
    subject="Reminder: Water the plants",
    text="Water the plants\n\nDue 2030-01-01 07:00 EST\n",
    html="<p>Water the plants</p>\n",
)
UNICODE = OutgoingEmail(
    to="Zoë Müller <zoe@example.org>",
    sender="Rappels Café <reminders@example.com>",
    subject="Rappel : réunion — café ☕",
    text="Réunion au café à 9 h ☕\n",
    html="<p>Réunion au café à 9 h ☕</p>\n",
)


@pytest.mark.parametrize("policy", [MIME_POLICY, SMTP_POLICY], ids=["file", "smtp"])
@pytest.mark.parametrize("mail", [ASCII, UNICODE], ids=["ascii", "unicode"])
def test_what_is_read_back_is_what_was_rendered(mail: OutgoingEmail, policy) -> None:  # type: ignore[no-untyped-def]
    raw = wire(mail, policy)
    head = raw.split(b"\r\n\r\n" if policy is SMTP_POLICY else b"\n\n", 1)[0]
    assert head.isascii()  # RFC 5322 §2.2: header fields are US-ASCII
    msg = parsed(raw)
    assert msg["Subject"] == mail.subject
    assert str(msg["To"]) == mail.to
    assert str(msg["From"]) == mail.sender
    assert msg["Message-ID"] == f"<{KEY}@example.com>"  # not folded: no leading space
    assert msg["X-Entity-Ref-ID"] == KEY
    assert msg["Date"].datetime == NOW.replace(microsecond=0)
    assert msg.get_content_type() == "multipart/alternative"
    assert [p.get_content_type() for p in msg.iter_parts()] == ["text/plain", "text/html"]
    eol = "\r\n" if policy is SMTP_POLICY else "\n"
    assert msg.get_body(("plain",)).get_content() == mail.text.replace("\n", eol)  # type: ignore[union-attr]
    assert msg.get_body(("html",)).get_content() == mail.html.replace("\n", eol)  # type: ignore[union-attr]


def test_bodies_are_7bit_when_ascii_and_quoted_printable_otherwise() -> None:
    ascii_parts = [p["Content-Transfer-Encoding"] for p in parsed(wire(ASCII)).iter_parts()]
    unicode_parts = [p["Content-Transfer-Encoding"] for p in parsed(wire(UNICODE)).iter_parts()]
    assert ascii_parts == ["7bit", "7bit"]
    assert unicode_parts == ["quoted-printable", "quoted-printable"]
    assert parsed(wire(UNICODE)).get_body(("plain",))["Content-Type"].params["charset"] == "utf-8"  # type: ignore[index]


def test_no_line_exceeds_998_characters_even_for_a_long_ascii_line() -> None:
    long = OutgoingEmail(
        to=ASCII.to, sender=ASCII.sender, subject="x" * 300, text="y" * 2500 + "\n",
        html="<p>" + "z" * 2500 + "</p>\n",
    )  # fmt: skip
    raw = wire(long, SMTP_POLICY)
    assert max(len(line) for line in raw.split(b"\r\n")) <= 998  # RFC 5322 §2.1.1
    msg = parsed(raw)
    assert msg["Subject"] == "x" * 300
    assert msg.get_body(("plain",)).get_content() == "y" * 2500 + "\r\n"  # type: ignore[union-attr]


def test_a_long_non_ascii_subject_is_encoded_words_of_at_most_75_characters() -> None:
    subject = "Rappel : réunion — café ☕ " * 8
    long = OutgoingEmail(to=ASCII.to, sender=ASCII.sender, subject=subject, text="x\n", html="x\n")
    raw = wire(long, SMTP_POLICY)
    head = raw.split(b"\r\n\r\n", 1)[0].decode("ascii")
    words = re.findall(r"=\?[^?]+\?[bBqQ]\?[^?]*\?=", head)
    assert len(words) > 1
    assert max(len(w) for w in words) <= 75  # RFC 2047 §2
    field = re.search(r"^Subject:.*?(?=\r\n\S)", head, re.S | re.M)
    assert field is not None
    assert max(len(line) for line in field.group(0).split("\r\n")) <= 78  # RFC 5322 §2.1.1
    assert parsed(raw)["Subject"] == subject


def test_the_boundary_comes_from_the_key_so_each_copy_is_the_same_bytes() -> None:
    # RFC 2046 §5.1.1: a boundary of at most 70 bchars that occurs in no encapsulated part.
    msg = parsed(wire(UNICODE))
    assert msg.get_boundary() == f"=_{KEY}"
    assert len(msg.get_boundary()) <= 70  # type: ignore[arg-type]
    assert wire(UNICODE) == wire(UNICODE)
    assert wire(ASCII) == wire(ASCII)


@pytest.mark.parametrize("where", ["text", "html"])
def test_a_body_that_holds_the_boundary_gets_another_one(where: str) -> None:
    line = f"--=_{KEY}"
    mail = OutgoingEmail(
        to=ASCII.to, sender=ASCII.sender, subject=ASCII.subject,
        text=f"before\n{line}\nafter\n" if where == "text" else ASCII.text,
        html=f"<p>{line}--</p>\n{line}\n" if where == "html" else ASCII.html,
    )  # fmt: skip
    msg = parsed(wire(mail))
    assert msg.get_boundary() != f"=_{KEY}"
    assert msg.get_body(("plain",)).get_content() == mail.text  # type: ignore[union-attr]
    assert msg.get_body(("html",)).get_content() == mail.html  # type: ignore[union-attr]


def test_a_key_that_cannot_be_a_boundary_gets_a_random_one() -> None:
    key = 'a "quoted" key; with specials'
    raw = build_mime(ASCII, idempotency_key=key, now=NOW).as_bytes(policy=MIME_POLICY)
    msg = parsed(raw)
    assert key not in (msg.get_boundary() or "")
    assert [p.get_content_type() for p in msg.iter_parts()] == ["text/plain", "text/html"]
    assert msg.get_body(("plain",)).get_content() == ASCII.text  # type: ignore[union-attr]
