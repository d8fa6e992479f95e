"""The one place that reads the wall clock; everything else takes `now` as an argument."""

from __future__ import annotations

from datetime import UTC, datetime


def utcnow() -> datetime:
    """Return the current instant as an aware UTC datetime."""
    return datetime.now(UTC)


def require_aware_utc(value: datetime, name: str = "value") -> datetime:
    """Return `value` converted to UTC, refusing naive datetimes.

    Raises:
        ValueError: `value` has no tzinfo (a naive datetime is a bug at a call site).
    """
    if value.tzinfo is None or value.utcoffset() is None:
        raise ValueError(f"{name} must be an aware datetime, got naive {value!r}")
    return value.astimezone(UTC)
