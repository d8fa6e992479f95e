"""Shared circuit breakers as Redis holds them (docs/design.md, "Provider failover"):
pybreaker's keys (`<ns>:<provider>:pybreaker:state|opened_at`) and ours
(`<ns>:<provider>:not_closed_since`), read without writing. The senders' breakers write
them (`sender.providers.failover`); `reminders status` and the API's admin overview
read them."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, datetime

import pybreaker
from redis import Redis

#: Breaker states as pybreaker names them (and as the metrics label them).
STATE_CLOSED = pybreaker.STATE_CLOSED
STATE_OPEN = pybreaker.STATE_OPEN
STATE_HALF_OPEN = pybreaker.STATE_HALF_OPEN

#: Prefix of the Redis keys of shared breakers (`<ns>:<provider>:pybreaker:<key>`).
REDIS_NAMESPACE = "reminders:breaker"


@dataclass(frozen=True, slots=True)
class BreakerReading:
    """A shared breaker as Redis holds it.

    Attributes:
        state: "closed" | "open" | "half-open" ("closed" when no sender has stored a
            state yet, as pybreaker starts).
        opened_at: when it last opened, or a failed probe reopened it (aware UTC, whole
            seconds; None when it never did).
        not_closed_since: when it last left the closed state (aware UTC; None while
            closed, or when no sender recorded it, e.g. one older than this key).
    """

    state: str
    opened_at: datetime | None
    not_closed_since: datetime | None


def not_closed_since_key(provider_name: str, namespace: str = REDIS_NAMESPACE) -> str:
    """The Redis key holding when `provider_name`'s breaker left the closed state."""
    return f"{namespace}:{provider_name}:not_closed_since"


def read_shared_breaker(
    redis: Redis, provider_name: str, namespace: str = REDIS_NAMESPACE
) -> BreakerReading:
    """The state of `provider_name`'s Redis-shared breaker, read without writing
    anything (pybreaker's own storage re-creates missing keys on read): one MGET.

    Raises:
        redis.exceptions.RedisError: Redis cannot be read.
    """
    prefix = f"{namespace}:{provider_name}:pybreaker"
    state, opened_at, since = redis.mget(
        [f"{prefix}:state", f"{prefix}:opened_at", not_closed_since_key(provider_name, namespace)]
    )
    return BreakerReading(
        state=state.decode() if isinstance(state, bytes) else STATE_CLOSED,
        opened_at=datetime.fromtimestamp(int(opened_at), UTC) if opened_at else None,
        not_closed_since=redis_instant(since),
    )


def redis_instant(raw: object) -> datetime | None:
    """Unix seconds as Redis returns them (bytes), as aware UTC; None if absent or not
    a number."""
    if not isinstance(raw, bytes | str):
        return None
    try:
        return datetime.fromtimestamp(float(raw), UTC)
    except (ValueError, OverflowError, OSError):
        return None
