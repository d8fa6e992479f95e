"""Primary ⇄ backup provider failover, each provider behind a pybreaker circuit breaker.

The rules (docs/design.md, "Provider failover"; issue 5):

- Providers are tried in order (primary first). A provider whose breaker is open is
  skipped until its `reset_timeout_s` has passed; then one call per process goes through
  as the half-open probe: a success closes the breaker and traffic returns to it, a
  failure opens it again for another `reset_timeout_s`.
- A call moves on to the next provider ONLY on an error that proves the provider did not
  take the message: its breaker is open, or it raised `TransientDeliveryError` with
  `ambiguous=False` (connection refused, 429, 5xx answered before acceptance, 401/403).
- An ambiguous failure (`TransientDeliveryError(ambiguous=True)`: a timeout or a broken
  answer after the request was sent) is raised to the caller, whose retry loop calls again
  with the same idempotency key. That key is pinned to the provider that may hold the
  message: every later attempt for it goes there, never to another provider, because the
  backup cannot deduplicate against the primary. The pin lasts `pin_ttl_s` (default 24 h,
  Resend's idempotency window) in a bounded TTL cache, and is dropped once that provider
  answers (sent, or a permanent refusal).
- A `PermanentDeliveryError` (the message or address is wrong) is raised at once: no
  failover, and it does not count as a breaker failure (pybreaker `exclude`); the provider
  answered, so for the breaker it is a success.

Failover decisions are logged with `provider` (the provider concerned) and
`idempotency_key` as fields; called from the sender, each record also carries the
occurrence's `reminder_id`, `run_time_utc` and `attempt` (bound by `Sender._send`).

Sends run concurrently: the breaker is entered with `CircuitBreaker.calling()`, which
takes pybreaker's lock only to check and update the state, not around the send (its
`call()` would hold the lock for the whole send and serialise every thread).

Breaker state lives in memory, or in Redis (pybreaker `CircuitRedisStorage`) so that
every sender pod shares one breaker per provider. Redis stores the opened-at instant in
whole seconds, so a shared breaker stays open between `reset_timeout_s - 1` and
`reset_timeout_s` seconds.

pybreaker's opened-at moves at every failed half-open probe, so it cannot tell how long a
provider has been down. A listener therefore records when a breaker LEFT the closed state
and forgets it when it closes again: `<ns>:<provider>:not_closed_since` (Unix seconds; SET
NX on any change to open or half-open, DEL on closing) next to pybreaker's keys in Redis,
or in the process. `reminders status` and the metric
`reminders_provider_breaker_not_closed_since_timestamp_seconds` read it.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime

import pybreaker
from cachetools import TTLCache
from redis import Redis
from redis.exceptions import RedisError

# The shared breaker's storage layout and its reader live in the kernel (`reminders status`
# and the API's admin overview read it too); re-exported here for the sender's code.
from reminder_core.breakers import (
    REDIS_NAMESPACE,
    STATE_CLOSED,
    STATE_HALF_OPEN,
    STATE_OPEN,
    BreakerReading,
    not_closed_since_key,
    read_shared_breaker,
    redis_instant,
)
from reminder_core.errors import PermanentDeliveryError, TransientDeliveryError
from reminder_core.metrics import BREAKER_NOT_CLOSED_SINCE, BREAKER_STATE
from reminder_core.settings import Settings
from sender.providers.base import (
    OutgoingEmail,
    Provider,
    SendReceipt,
    close_provider,
    deduplicates_keys,
)

log = logging.getLogger(__name__)

__all__ = [
    "REDIS_NAMESPACE",
    "STATE_CLOSED",
    "STATE_HALF_OPEN",
    "STATE_OPEN",
    "BreakerReading",
    "FailoverProvider",
    "not_closed_since_key",
    "read_shared_breaker",
]


class _NotClosedSince:
    """When one provider's breaker left the closed state: in Redis when the breaker is
    shared (`<ns>:<provider>:not_closed_since`, Unix seconds), else in this process.

    Redis errors are logged and ignored: this is for reporting, and must never fail a
    send (pybreaker calls listeners inside the call that changes the state).
    """

    def __init__(self, provider: str, redis: Redis | None, namespace: str) -> None:
        self._provider = provider
        self._redis = redis
        self._key = not_closed_since_key(provider, namespace)
        self._local: float | None = None

    def left_closed(self, now_s: float) -> None:
        """Record `now_s` (Unix seconds) unless a time is already recorded (SET NX)."""
        if self._redis is None:
            if self._local is None:
                self._local = now_s
            return
        try:
            self._redis.set(self._key, repr(now_s), nx=True)
        except RedisError:
            log.warning("provider %s: cannot record %s in Redis", self._provider, self._key)

    def closed(self) -> None:
        """Forget the recorded time (DEL)."""
        self._local = None
        if self._redis is None:
            return
        try:
            self._redis.delete(self._key)
        except RedisError:
            log.warning("provider %s: cannot delete %s in Redis", self._provider, self._key)

    def read(self) -> float | None:
        """The recorded time, Unix seconds, or None (closed, or Redis unreadable)."""
        if self._redis is None:
            return self._local
        try:
            instant = redis_instant(self._redis.get(self._key))
        except RedisError:
            return None
        return instant.timestamp() if instant is not None else None


class _StateMetrics(pybreaker.CircuitBreakerListener):
    """Logs each breaker state change, sets the breaker-state metrics and records when
    the breaker left the closed state."""

    def __init__(self, provider: str, since: _NotClosedSince) -> None:
        self._provider = provider
        self._since = since

    def state_change(
        self,
        cb: pybreaker.CircuitBreaker,  # noqa: ARG002 (pybreaker's listener signature)
        old_state: pybreaker.CircuitBreakerState | None,
        new_state: pybreaker.CircuitBreakerState,
    ) -> None:
        # Also called when this process notices a change another process made (Redis):
        # SET NX and DEL make the repeat harmless. A state change to open or half-open
        # records the time only if none is recorded, so failed probes do not move it.
        if new_state.name == STATE_CLOSED:
            self._since.closed()
        else:
            self._since.left_closed(time.time())
        BREAKER_STATE.labels(provider=self._provider).state(new_state.name)
        BREAKER_NOT_CLOSED_SINCE.labels(provider=self._provider).set(self._since.read() or 0)
        log.warning(
            "provider %s: circuit breaker %s -> %s",
            self._provider,
            old_state.name if old_state is not None else "?",
            new_state.name,
            extra={"provider": self._provider, "breaker_state": new_state.name},
        )


@dataclass(slots=True)
class _Member:
    """One provider, its breaker, the breaker's storage and the local probe gate."""

    provider: Provider
    breaker: pybreaker.CircuitBreaker
    storage: pybreaker.CircuitBreakerStorage
    reset_timeout_s: float
    not_closed_since: _NotClosedSince
    probe_lock: threading.Lock = field(default_factory=threading.Lock)

    @property
    def name(self) -> str:
        return self.provider.name

    def open_for_s(self, now: datetime) -> float:
        """Seconds until this breaker lets a probe through; 0.0 when it is not open or
        the probe is due."""
        if self.storage.state != STATE_OPEN:
            return 0.0
        opened_at = self.storage.opened_at
        if opened_at is None:
            return 0.0
        return max(0.0, self.reset_timeout_s - (now - opened_at).total_seconds())


class FailoverProvider:
    """A `Provider` over an ordered list of providers (primary first), each behind a
    circuit breaker; the rules are in the module docstring. Thread-safe: `send` may be
    called from many threads at once, and sends through one breaker run in parallel.

    Args:
        providers: two or more providers, primary first; their `name`s must differ (each
            names a breaker, a Redis namespace and the receipts it returns).
        fail_max: consecutive failures (transient errors, ambiguous or not) that open a
            provider's breaker (pybreaker `fail_max`, >= 1).
        reset_timeout_s: seconds a breaker stays open before a half-open probe (> 0).
        redis: a Redis client (bytes responses, i.e. `decode_responses=False`) to share
            breaker state across processes; None keeps it in this process. A Redis that
            cannot be reached when the provider is built falls back to in-process state
            (logged); later Redis errors make pybreaker read the breaker as closed.
        redis_namespace: prefix of the Redis keys (`<ns>:<provider>:pybreaker:state`, ...).
        pin_ttl_s: seconds a key stays pinned to the provider of an ambiguous attempt.
        pin_max_keys: bound on pinned keys (least recently used dropped beyond it).
        name: this provider's own name (metric labels of the caller); the receipts name
            the provider that actually sent.

    Raises:
        ValueError: fewer than two providers, or two with the same name.
    """

    def __init__(
        self,
        providers: Sequence[Provider],
        *,
        fail_max: int = 5,
        reset_timeout_s: float = 30.0,
        redis: Redis | None = None,
        redis_namespace: str = REDIS_NAMESPACE,
        pin_ttl_s: float = 24 * 3600.0,
        pin_max_keys: int = 100_000,
        name: str = "failover",
    ) -> None:
        names = [p.name for p in providers]
        if len(names) < 2:
            raise ValueError("FailoverProvider needs a primary and at least one backup")
        if len(set(names)) != len(names):
            raise ValueError(f"provider names must differ, got {names}")
        if fail_max < 1 or reset_timeout_s <= 0:
            raise ValueError("fail_max must be >= 1 and reset_timeout_s > 0")
        self.name = name
        # A key may reach any member (the failover), so it is delivered at most once only
        # when each member deduplicates it (providers.base.deduplicates_keys).
        self.deduplicates_keys = all(deduplicates_keys(p) for p in providers)
        self._members = [
            self._member(p, fail_max, reset_timeout_s, redis, redis_namespace) for p in providers
        ]
        self._pins: TTLCache[str, str] = TTLCache(maxsize=pin_max_keys, ttl=pin_ttl_s)
        self._pins_lock = threading.Lock()
        for member in self._members:
            state = member.storage.state
            if state != STATE_CLOSED:
                # Already open when this process starts (shared state): record a time if
                # no one has (a sender older than the key), the best known being opened_at.
                opened_at = member.storage.opened_at
                member.not_closed_since.left_closed(
                    opened_at.timestamp() if opened_at else time.time()
                )
            self._refresh_metrics(member, state)

    @classmethod
    def from_settings(cls, providers: Sequence[Provider], settings: Settings) -> FailoverProvider:
        """A FailoverProvider over `providers` (primary first) configured by
        BREAKER_FAIL_MAX, BREAKER_RESET_TIMEOUT_S and BREAKER_REDIS_URL. Side effect: with
        a Redis URL, opens a Redis client (0.5 s socket timeouts, so a slow Redis cannot
        stall sends) and initialises the breaker keys.

        Raises:
            ValueError: as the constructor.
        """
        redis = None
        if settings.breaker_redis_url:
            redis = Redis.from_url(
                settings.breaker_redis_url, socket_timeout=0.5, socket_connect_timeout=0.5
            )
        return cls(
            providers,
            fail_max=settings.breaker_fail_max,
            reset_timeout_s=settings.breaker_reset_timeout_s,
            redis=redis,
        )

    @staticmethod
    def _member(
        provider: Provider,
        fail_max: int,
        reset_timeout_s: float,
        redis: Redis | None,
        namespace: str,
    ) -> _Member:
        storage: pybreaker.CircuitBreakerStorage = pybreaker.CircuitMemoryStorage(STATE_CLOSED)
        shared = None
        if redis is not None:
            try:
                storage = pybreaker.CircuitRedisStorage(
                    STATE_CLOSED, redis, namespace=f"{namespace}:{provider.name}"
                )
                shared = redis
            except RedisError:
                log.exception(
                    "provider %s: Redis unreachable, breaker state kept in this process",
                    provider.name,
                )
        since = _NotClosedSince(provider.name, shared, namespace)
        breaker = pybreaker.CircuitBreaker(
            fail_max=fail_max,
            reset_timeout=reset_timeout_s,
            exclude=[PermanentDeliveryError],
            listeners=[_StateMetrics(provider.name, since)],
            state_storage=storage,
            name=provider.name,
            # Re-raise the provider's own error when it trips the breaker, so the
            # ambiguous flag and retry_after_s survive; CircuitBreakerError then only
            # means "refused without calling".
            throw_new_error_on_trip=False,
        )
        return _Member(provider, breaker, storage, reset_timeout_s, since)

    # --- sending ---

    def send(self, email: OutgoingEmail, *, idempotency_key: str) -> SendReceipt:
        """Send through the first provider that takes the message (module docstring).

        Returns:
            the receipt of the provider that sent; `receipt.provider` names it.

        Raises:
            TransientDeliveryError: retry later with the same key. `ambiguous=True`: the
                key is now pinned to a provider that may hold the message (see
                `pinned_provider`), and the next attempt goes there only. Otherwise every
                provider refused or failed before taking it; `retry_after_s` is the
                shortest wait any of them asked for, or the time until the first breaker
                lets a probe through, or None when one gave no hint.
            PermanentDeliveryError: the provider refused the message; not retried, not
                failed over.
        """
        pinned = self._pinned_member(idempotency_key)
        if pinned is not None:
            return self._send_pinned(pinned, email, idempotency_key)
        failures: list[str] = []
        waits: list[float | None] = []
        last: BaseException | None = None
        for member in self._members:
            try:
                return self._attempt(member, email, idempotency_key)
            except pybreaker.CircuitBreakerError as exc:
                failures.append(f"{member.name}: circuit breaker open")
                waits.append(member.open_for_s(datetime.now(UTC)))
                last = exc
            except TransientDeliveryError as exc:
                if exc.ambiguous:
                    self.pin(idempotency_key, member.name)
                    log.warning(
                        "ambiguous failure of %s for %s: retry there only: %s",
                        member.name,
                        idempotency_key,
                        exc,
                        extra={"provider": member.name, "idempotency_key": idempotency_key},
                    )
                    raise
                failures.append(str(exc))
                waits.append(exc.retry_after_s)
                last = exc
            log.info(
                "provider %s did not take %s: %s",
                member.name,
                idempotency_key,
                last,
                extra={"provider": member.name, "idempotency_key": idempotency_key},
            )
        known = [w for w in waits if w is not None]
        retry_after = min(known) if len(known) == len(waits) else None
        raise TransientDeliveryError(
            "no provider took the message: " + "; ".join(failures), retry_after_s=retry_after
        ) from last

    def _pinned_member(self, key: str) -> _Member | None:
        """The member `key` is pinned to; a pin to a provider not configured (any more) is
        dropped with a warning."""
        pinned = self.pinned_provider(key)
        if pinned is None:
            return None
        member = next((m for m in self._members if m.name == pinned), None)
        if member is None:
            log.warning(
                "key %s pinned to unknown provider %s; ignored",
                key,
                pinned,
                extra={"provider": pinned, "idempotency_key": key},
            )
            self.unpin(key)
        return member

    def _send_pinned(self, member: _Member, email: OutgoingEmail, key: str) -> SendReceipt:
        """Retry `key` on the provider that may already hold it; never fail over. Any
        transient answer keeps the pin (the first attempt may still have been taken)."""
        try:
            receipt = self._attempt(member, email, key)
        except pybreaker.CircuitBreakerError as exc:
            raise TransientDeliveryError(
                f"{member.name}: circuit breaker open; {key} waits for it (pinned after an "
                "ambiguous failure)",
                retry_after_s=member.open_for_s(datetime.now(UTC)),
                ambiguous=True,
            ) from exc
        except TransientDeliveryError as exc:
            raise TransientDeliveryError(
                f"{exc} ({key} pinned to {member.name} after an ambiguous failure)",
                retry_after_s=exc.retry_after_s,
                ambiguous=True,
            ) from exc
        except PermanentDeliveryError:
            self.unpin(key)
            raise
        self.unpin(key)
        return receipt

    def _attempt(self, member: _Member, email: OutgoingEmail, key: str) -> SendReceipt:
        """One call through `member`'s breaker.

        Raises:
            pybreaker.CircuitBreakerError: refused without calling the provider (open, or
                another thread of this process holds the half-open probe).
            DeliveryError: the provider's own error.
        """
        probing = member.storage.state != STATE_CLOSED
        if probing and not member.probe_lock.acquire(blocking=False):
            raise pybreaker.CircuitBreakerError(f"{member.name}: half-open probe in flight")
        try:
            with member.breaker.calling():
                return member.provider.send(email, idempotency_key=key)
        finally:
            if probing:
                member.probe_lock.release()

    # --- pins ---

    def pinned_provider(self, idempotency_key: str) -> str | None:
        """The provider `idempotency_key` is pinned to after an ambiguous attempt, or None.

        The sender may store it (e.g. on the delivery row) so that another process taking
        the occurrence over can `pin` it there too.
        """
        with self._pins_lock:
            return self._pins.get(idempotency_key)

    def pin(self, idempotency_key: str, provider_name: str) -> None:
        """Send every later attempt for `idempotency_key` to `provider_name` only (for
        `pin_ttl_s`). Side effect: this process's pin table only."""
        with self._pins_lock:
            self._pins[idempotency_key] = provider_name

    def unpin(self, idempotency_key: str) -> None:
        """Forget the pin of `idempotency_key` (no-op when there is none)."""
        with self._pins_lock:
            self._pins.pop(idempotency_key, None)

    # --- readiness and metrics ---

    def ready(self) -> bool:
        """Whether a send may succeed now: False while EVERY provider's breaker is open
        and none is due for its half-open probe (reset_timeout_s not yet passed).

        Contract for the sender: check it before each receive and do not receive while it
        is False (each receive counts toward the queue's maximum receive count, so
        polling through an outage would dead-letter healthy messages); wait
        `seconds_until_ready()` and check again. It turns True by itself when a probe is
        due. Reads the wall clock and, with Redis, the shared breaker state (two GETs per
        provider); no other side effect.
        """
        return self.seconds_until_ready() == 0.0

    def seconds_until_ready(self) -> float:
        """Seconds until `ready()` turns True: 0.0 when it is True now, else the time
        until the first open breaker lets its half-open probe through."""
        now = datetime.now(UTC)
        return min(member.open_for_s(now) for member in self._members)

    def close(self) -> None:
        """Close every provider (`close_provider`), primary first."""
        for member in self._members:
            close_provider(member.provider)

    def breaker_states(self) -> dict[str, str]:
        """Each provider's breaker state, primary first: {name: "closed" | "open" |
        "half-open"} as stored (an open breaker whose probe is due still reads "open"
        until a call passes). Side effect: refreshes the metrics
        `reminders_provider_breaker_state` and
        `reminders_provider_breaker_not_closed_since_timestamp_seconds` with what it read
        (with Redis: one more GET per provider)."""
        states = {}
        for member in self._members:
            state = member.storage.state
            self._refresh_metrics(member, state)
            states[member.name] = state
        return states

    def not_closed_since(self) -> dict[str, datetime | None]:
        """When each provider's breaker left the closed state, primary first (aware UTC;
        None while closed). Failed half-open probes do not move it, unlike pybreaker's
        opened_at."""
        return {
            member.name: (
                datetime.fromtimestamp(since, UTC)
                if (since := member.not_closed_since.read()) is not None
                else None
            )
            for member in self._members
        }

    @staticmethod
    def _refresh_metrics(member: _Member, state: str) -> None:
        BREAKER_STATE.labels(provider=member.name).state(state)
        since = member.not_closed_since.read() if state != STATE_CLOSED else None
        BREAKER_NOT_CLOSED_SINCE.labels(provider=member.name).set(since or 0)

    @property
    def providers(self) -> tuple[Provider, ...]:
        """The wrapped providers, primary first."""
        return tuple(member.provider for member in self._members)
