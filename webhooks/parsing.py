"""Small pure helpers shared by the provider parsers: JSON bodies, instants, reasons, and
text PostgreSQL can store."""

from __future__ import annotations

import json
from datetime import UTC, datetime

from reminder_core.errors import MalformedBody
from reminder_core.text import storable, storable_message_id

__all__ = [
    "MAX_ADDRESS", "MAX_EVENT_ID", "MAX_REASON", "address", "instant", "parse_json_object",
    "reason", "storable", "storable_message_id",
]  # fmt: skip

#: Longest reason kept from a provider (bounce diagnostics can be long SMTP transcripts).
MAX_REASON = 1000
#: Longest event id stored. It is a key of a unique btree index, whose entries PostgreSQL
#: limits to about 2.7 kB: a longer id would fail the INSERT, and every retry, with 503.
MAX_EVENT_ID = 255
#: Longest recipient address accepted (RFC 5321 §4.5.3.1.3: a path is at most 256
#: octets, its angle brackets included); the suppression list keys on it, as above.
MAX_ADDRESS = 254


def parse_json_object(body: bytes | str) -> dict[str, object]:
    """Parse a request body that must be one JSON object (RFC 8259; bytes in UTF-8/16/32).

    Integers stay exact Python ints, however large. NaN and Infinity (not JSON) are refused.

    Raises:
        MalformedBody: not JSON, nested too deep, or not an object.
    """
    try:
        document = json.loads(body, parse_constant=_refuse_constant)
    except (ValueError, RecursionError) as exc:  # JSONDecodeError, UnicodeDecodeError
        raise MalformedBody("the request body is not valid JSON") from exc
    if not isinstance(document, dict):
        raise MalformedBody("the request body is not a JSON object")
    return document


def _refuse_constant(name: str) -> object:
    raise ValueError(f"{name} is not JSON")


def instant(value: object) -> datetime | None:
    """An ISO 8601 instant with an offset as aware UTC; None when absent, unreadable or
    without offset (a provider's timestamp is informative, never a reason to refuse)."""
    if not isinstance(value, str):
        return None
    try:
        parsed = datetime.fromisoformat(value)
        return parsed.astimezone(UTC) if parsed.tzinfo is not None else None
    except (ValueError, OverflowError):  # OverflowError: "0001-01-01T00:00+01:00" in UTC
        return None


def address(value: object, what: str) -> str:
    """`value` as a recipient address: a string holding "@", at most MAX_ADDRESS
    characters, surrounding white space removed.

    Raises:
        MalformedBody: anything else (`what` names the field in the message).
    """
    if not isinstance(value, str) or "@" not in value:
        raise MalformedBody(f"{what} is not an email address")
    if len(value.strip()) > MAX_ADDRESS:
        raise MalformedBody(f"{what} is longer than {MAX_ADDRESS} characters")
    return value.strip()


def reason(text: str) -> str:
    """`text` cut to MAX_REASON characters."""
    return text[:MAX_REASON]
