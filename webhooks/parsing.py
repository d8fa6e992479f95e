"""Small pure helpers shared by the provider parsers: JSON bodies, instants, reasons."""

from __future__ import annotations

import json
from datetime import UTC, datetime

from reminder_core.errors import MalformedBody

#: Longest reason kept from a provider (bounce diagnostics can be long SMTP transcripts).
MAX_REASON = 1000


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
    except ValueError:
        return None
    return parsed.astimezone(UTC) if parsed.tzinfo is not None else None


def reason(text: str) -> str:
    """`text` cut to MAX_REASON characters."""
    return text[:MAX_REASON]
