"""Local wall-clock time → UTC instants, with the DST policies of docs/design.md,
"DST policies".

Pure functions, no I/O. A local time is a naive `datetime` meaning "this reading of the
clock on the wall in `zone`"; an instant is an aware UTC `datetime`.
"""

from __future__ import annotations

import re
from datetime import UTC, datetime
from functools import cache
from typing import Literal
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError, available_timezones

from reminder_core.errors import InvalidSchedule

Nonexistent = Literal["shift", "skip"]
Ambiguous = Literal["first", "last", "both"]

_LOCAL_RE = re.compile(r"^\d{4}-\d{2}-\d{2}T\d{2}:\d{2}(:\d{2})?$", re.ASCII)
_ZONE_RE = re.compile(r"^[A-Za-z0-9_+\-]+(/[A-Za-z0-9_+\-]+)*$", re.ASCII)
MAX_ZONE_NAME = 64
# Local readings outside these years are refused: instants near datetime's year 1 and
# 9999 overflow when converted, and no reminder needs them.
MIN_YEAR, MAX_YEAR = 1900, 2999


def parse_start_local(value: str, field: str = "start_local") -> datetime:
    """Parse an ISO 8601 local date-time without offset, to the minute or second.

    Args:
        value: e.g. "2026-03-08T02:30" or "2026-03-08T02:30:15".
        field: the request field named in the error.

    Returns:
        A naive datetime (wall-clock reading, no zone), seconds precision.

    Raises:
        InvalidSchedule: not of that form (an offset such as "Z" or "+01:00", fractional
            seconds, a date that does not exist such as February 30).
    """
    if not isinstance(value, str) or not _LOCAL_RE.match(value):
        raise InvalidSchedule(
            field,
            "must be a local date-time without offset, 'YYYY-MM-DDTHH:MM' or "
            f"'YYYY-MM-DDTHH:MM:SS' (the zone goes in 'timezone'); got {value!r}",
        )
    try:
        parsed = datetime.fromisoformat(value)
    except ValueError as exc:
        raise InvalidSchedule(field, f"is not a real date-time: {exc}") from None
    if not MIN_YEAR <= parsed.year <= MAX_YEAR:
        raise InvalidSchedule(field, f"must be within the years {MIN_YEAR} to {MAX_YEAR}")
    return parsed


def load_zone(name: str, field: str = "timezone") -> ZoneInfo:
    """Return the IANA zone `name`.

    Raises:
        InvalidSchedule: the name is not a known IANA zone (or is not a zone name at all).
    """
    if (
        not isinstance(name, str)
        or len(name) > MAX_ZONE_NAME
        or not _ZONE_RE.match(name)
        or name.lower() in {"localtime", "posixrules"}
    ):
        raise InvalidSchedule(field, f"{name!r} is not an IANA time zone name")
    if name not in _canonical_zones():
        raise InvalidSchedule(field, f"unknown IANA time zone {name!r}")
    try:
        return ZoneInfo(name)
    except (ZoneInfoNotFoundError, ValueError, OSError):
        raise InvalidSchedule(field, f"unknown IANA time zone {name!r}") from None


@cache
def _canonical_zones() -> frozenset[str]:
    # IANA names known to this host's tz database (tzdata as fallback); excludes the
    # right/ and posix/ copies, and the placeholder "Factory".
    return frozenset(available_timezones()) - {"Factory", "localtime"}


def readings(
    local: datetime,
    zone: ZoneInfo,
    nonexistent: Nonexistent = "shift",
    ambiguous: Ambiguous = "first",
) -> tuple[list[datetime], bool]:
    """The UTC instants a local wall-clock reading stands for, and whether it exists.

    Rules (docs/design.md, "DST policies"):
    - A time in the spring-forward gap does not exist. `shift` reads it with the offset in
      force before the gap (RFC 5545 §3.3.5: 02:30 on 2007-03-11 in America/New_York is
      07:30Z, i.e. 03:30 EDT); `skip` drops it (RFC 5545 §3.3.10: such an instance is
      ignored and not counted).
    - A time in the fall-back overlap occurs twice. `first` takes the earlier instant (the
      offset before the transition, RFC 5545 §3.3.5), `last` the later, `both` both.

    Args:
        local: naive datetime with fold 0 (a wall-clock reading).
        zone: the zone the reading belongs to.

    Returns:
        (instants, exists): 0, 1 or 2 aware UTC datetimes ascending (0 only for `skip`, 2
        only for `both`), and False when the reading falls in a gap.
    """
    # PEP 495: fold=0 gives the offset before a transition, fold=1 the one after. They
    # differ only at a transition: after > before is a gap, after < before an overlap.
    before = zone.utcoffset(local)
    after = zone.utcoffset(local.replace(fold=1))
    if before is None or after is None:  # pragma: no cover - zoneinfo always answers
        raise ValueError(f"zone {zone} has no offset for {local}")
    if before == after:
        return [(local - before).replace(tzinfo=UTC)], True
    if before < after:
        if nonexistent == "skip":
            return [], False
        return [(local - before).replace(tzinfo=UTC)], False
    first = (local - before).replace(tzinfo=UTC)
    second = (local - after).replace(tzinfo=UTC)
    if ambiguous == "first":
        return [first], True
    if ambiguous == "last":
        return [second], True
    return [first, second], True


def local_to_utc(
    local: datetime,
    zone: ZoneInfo,
    nonexistent: Nonexistent = "shift",
    ambiguous: Ambiguous = "first",
) -> list[datetime]:
    """The UTC instants (0, 1 or 2, ascending) of a naive local reading; see `readings`."""
    if local.tzinfo is not None:
        raise ValueError("local must be naive")
    return readings(local.replace(fold=0), zone, nonexistent, ambiguous)[0]


def exists(local: datetime, zone: ZoneInfo) -> bool:
    """True when the naive reading `local` occurs on the clocks of `zone` (not in a gap)."""
    return readings(local.replace(fold=0), zone)[1]


#: The message tag every provider call carries the key in (SES EmailTags, Resend tags);
#: providers publish it back with their events, so a webhook finds the occurrence.
KEY_TAG = "idempotency_key"
#: The message tag naming the sender's cell (with CELLS): a provider webhook is applied
#: in that cell (webhooks.cells; docs/design.md, "Cells").
CELL_TAG = "cell"
#: The header every email carries the key in (SES and SMTP), for tracing.
KEY_HEADER = "X-Entity-Ref-ID"


def idempotency_key(reminder_id: object, run_time_utc: datetime) -> str:
    """Provider idempotency key of one occurrence: "<reminder_id>-<YYYYMMDDTHHMMSSZ>".

    The same occurrence always yields the same key, on every attempt and every worker
    (docs/design.md, "Exactly once per occurrence"). It is safe as a file name and an
    RFC 5322 Message-ID local part. Made from `isoformat()` ("YYYY-MM-DDTHH:MM:SS...",
    always a four-digit year) by slicing: a third of the cost of strftime, on every
    occurrence sent.
    """
    instant = run_time_utc if run_time_utc.tzinfo is UTC else run_time_utc.astimezone(UTC)
    at = instant.isoformat()
    return f"{reminder_id}-{at[:4]}{at[5:7]}{at[8:10]}T{at[11:13]}{at[14:16]}{at[17:19]}Z"


_KEY = re.compile(
    r"(?P<id>[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12})"
    r"-(?P<at>\d{8}T\d{6}Z)"
)


def parse_idempotency_key(key: str) -> tuple[str, datetime] | None:
    """The occurrence an `idempotency_key` names: (reminder id as a lower-case UUID
    string, run time as an aware UTC datetime truncated to the second, as in the key), or
    None when `key` is not one of ours (a provider event about an email we did not send,
    or a tag altered on the way).

    The run time has the key's one-second resolution: match a delivery on
    `run_time_utc >= at AND run_time_utc < at + 1 s`.
    """
    match = _KEY.fullmatch(key.strip())
    if match is None:
        return None
    try:
        at = datetime.strptime(match["at"], "%Y%m%dT%H%M%SZ").replace(tzinfo=UTC)
    except ValueError:  # 20261399T..., digits that are no date
        return None
    return match["id"].lower(), at
