"""Pure parts of the SES and SMTP providers: error classification, dot-stuffing, tags.

Sources: RFC 5321 §4.2.1 (2yz/3yz/4yz/5yz reply classes), §4.5.2 (transparency), §3.8
(421), RFC 4954 §6 (530, 534, 535, 538), RFC 1870 §6 (552 on MAIL for SIZE); the SES API
v2 reference (SendEmail errors and their HTTP statuses; MessageTag value characters).
"""

from __future__ import annotations

import pytest

from reminder_core.errors import PermanentDeliveryError, TransientDeliveryError
from sender.providers.mime import address_domain, message_id
from sender.providers.ses import classify_ses_error, tag_value
from sender.providers.smtp import classify_smtp_reply, dot_stuff


@pytest.mark.parametrize(
    ("stage", "code", "expected"),
    [
        ("connect", 421, TransientDeliveryError),  # service not available, closing (§3.8)
        ("connect", 554, TransientDeliveryError),  # no SMTP service here: the session's fault
        ("ehlo", 550, TransientDeliveryError),
        ("starttls", 454, TransientDeliveryError),  # TLS temporarily unavailable (RFC 3207)
        ("auth", 535, TransientDeliveryError),  # credentials invalid: operator
        ("mail", 530, TransientDeliveryError),  # authentication required: operator
        ("mail", 451, TransientDeliveryError),
        ("mail", 550, TransientDeliveryError),  # sender refused: the From is configuration
        ("mail", 552, PermanentDeliveryError),  # message too big (RFC 1870 §6)
        ("mail", 555, PermanentDeliveryError),  # MAIL parameters not recognised
        ("rcpt", 450, TransientDeliveryError),
        ("rcpt", 550, PermanentDeliveryError),  # mailbox unavailable
        ("rcpt", 538, TransientDeliveryError),  # encryption required: operator
        ("data", 554, PermanentDeliveryError),
        ("message", 451, TransientDeliveryError),
        ("message", 552, PermanentDeliveryError),
        ("message", 554, PermanentDeliveryError),
    ],
)
def test_smtp_reply_classes(stage, code, expected) -> None:
    error = classify_smtp_reply(stage, code, "text")
    assert type(error) is expected
    if isinstance(error, TransientDeliveryError):
        assert error.ambiguous is False  # a reply is the server's decision: not taken


def test_an_unreadable_reply_to_the_end_of_data_is_ambiguous() -> None:
    error = classify_smtp_reply("message", -1, "garbage")
    assert isinstance(error, TransientDeliveryError)
    assert error.ambiguous is True
    assert classify_smtp_reply("rcpt", -1, "garbage").ambiguous is False  # type: ignore[attr-defined]


def test_dot_stuffing_doubles_leading_dots_and_terminates() -> None:
    # RFC 5321 §4.5.2: a line beginning with "." gets one more; the data ends CRLF.CRLF.
    assert dot_stuff(b"a\r\n.b\r\n..c\r\n") == b"a\r\n..b\r\n...c\r\n.\r\n"
    assert dot_stuff(b".\r\nx") == b"..\r\nx\r\n.\r\n"


@pytest.mark.parametrize(
    ("code", "status", "expected"),
    [
        ("TooManyRequestsException", 429, TransientDeliveryError),
        ("Throttling", 400, TransientDeliveryError),  # SES v1 query API's name
        ("LimitExceededException", 400, TransientDeliveryError),
        ("AccountSuspendedException", 400, TransientDeliveryError),
        ("SendingPausedException", 400, TransientDeliveryError),
        ("MailFromDomainNotVerifiedException", 400, TransientDeliveryError),
        ("NotFoundException", 404, TransientDeliveryError),
        ("UnrecognizedClientException", 403, TransientDeliveryError),
        ("InternalFailure", 500, TransientDeliveryError),
        ("ServiceUnavailable", 503, TransientDeliveryError),
        ("MessageRejected", 400, PermanentDeliveryError),
        ("BadRequestException", 400, PermanentDeliveryError),
        ("SomeFutureValidationError", 400, PermanentDeliveryError),
    ],
)
def test_ses_error_classes(code, status, expected) -> None:
    error = classify_ses_error(code, status, "msg")
    assert type(error) is expected
    assert code in str(error)
    if isinstance(error, TransientDeliveryError):
        assert error.ambiguous is False


def test_ses_throttling_honours_a_retry_after_header_when_present() -> None:
    error = classify_ses_error("TooManyRequestsException", 429, "slow down", retry_after="3")
    assert isinstance(error, TransientDeliveryError)
    assert error.retry_after_s == 3.0


def test_tag_values_keep_only_the_characters_ses_accepts() -> None:
    assert tag_value("0b5c9f2e-7d1a-20261201T073000Z") == "0b5c9f2e-7d1a-20261201T073000Z"
    assert tag_value("a:b+c@d") == "a_b_c_d"
    assert len(tag_value("x" * 300)) == 256


def test_message_id_from_the_key_and_the_sender_domain() -> None:
    assert address_domain("Reminders <reminders@Example.COM>") == "example.com"
    assert address_domain("no-domain") is None
    assert message_id("k-1", "example.com") == "<k-1@example.com>"
    assert message_id("k-1") == "<k-1@reminders>"
