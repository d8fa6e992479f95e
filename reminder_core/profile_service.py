"""HTTP client of the user profile service: the production `ProfileSource`
(docs/design.md, "Profile service").

Wire contract (docs/configuration.md, "Profile service"):

    GET {PROFILE_SERVICE_URL}/users/{user_id}
        Accept: application/json
        Authorization: Bearer {PROFILE_SERVICE_TOKEN}        (only when the token is set)

    `user_id` (the JWT `sub`) is percent-encoded as ONE path segment (RFC 3986 §2.1,
    §3.3): every byte outside the unreserved set is escaped, "/" as %2F and "?" as %3F,
    and a whole segment "." or ".." as %2E / %2E%2E (RFC 3986 §5.2.4 would otherwise
    remove it), so no user id can reach another path or add a query.

    200 {"email": "<address>", "timezone": "<IANA zone>" | null, "quiet_hours": [...]?, ...}
        → Profile. Other members are ignored; a missing or null timezone means UTC, a
        missing or null quiet_hours none (as in the local profiles file).
    404 → None: no such user. The API refuses the request (422); the sender fails that
        occurrence permanently.
    408, 425, 429, 5xx, connection refused/reset/dropped, connect or read timeout
        → transient: retried with exponential backoff and full jitter, then
        InfrastructureError (the API answers 503; the sender retries the message later).
    any other status (400, 401, 403, 3xx, ...), or a 200 whose body is not that object
    (not JSON, over 64 KiB, email missing or with control characters, unknown zone)
        → InfrastructureError at once, not retried in-process and not cached: the
        operator must fix a token, a URL or the service's data; a malformed profile never
        reads as "unknown user" (that would fail occurrences for good) and never crashes.

A small TTL cache (cachetools) keeps answers per process: profiles found for
`cache_ttl_s`, 404s for the shorter `not_found_ttl_s` (so a user whose profile is created
right after a miss waits at most that long). Errors are never cached.
"""

from __future__ import annotations

import json
import logging
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Literal
from urllib.parse import quote

import httpx
from cachetools import TTLCache
from tenacity import (
    RetryCallState,
    Retrying,
    retry_if_exception_type,
    stop_after_attempt,
    stop_before_delay,
    wait_random_exponential,
)

from reminder_core.errors import InfrastructureError
from reminder_core.profiles import (
    LocalProfileSource,
    Profile,
    ProfileSource,
    profile_quiet_hours,
    profile_zone,
    usable_email,
)
from reminder_core.settings import Settings

log = logging.getLogger(__name__)

#: Largest response body read; a larger one is malformed (a profile is a few hundred bytes).
MAX_BODY_BYTES = 64 * 1024

StatusClass = Literal["ok", "not_found", "transient", "fatal"]


def classify_status(status: int) -> StatusClass:
    """What a profile service status means (module docstring): 200 ok, 404 not_found,
    408/425/429/5xx transient (RFC 9110 §15.5.9, §15.6; RFC 6585 §4), the rest fatal."""
    if status == 200:
        return "ok"
    if status == 404:
        return "not_found"
    if status in (408, 425, 429) or 500 <= status <= 599:
        return "transient"
    return "fatal"


def user_path(user_id: str) -> str | None:
    """The request path `/users/{segment}` for `user_id`, or None for an id no service can
    hold (empty, or not encodable as UTF-8, e.g. a lone surrogate from a JSON `sub`).

    Every reserved character is escaped (RFC 3986 §2.1): "../admin" → "/users/..%2Fadmin",
    "a/b?x=1" → "/users/a%2Fb%3Fx%3D1", ".." → "/users/%2E%2E".
    """
    if not user_id:
        return None
    try:
        segment = quote(user_id.encode("utf-8"), safe="")
    except UnicodeEncodeError:
        return None
    if segment in (".", ".."):
        segment = segment.replace(".", "%2E")
    return "/users/" + segment


def parse_profile(user_id: str, body: bytes) -> Profile:
    """Read a 200 body (UTF-8 JSON object, see the module docstring) as a Profile.

    Raises:
        InfrastructureError: the body is not JSON, not an object, or has no usable
            `email` (a non-empty string with an "@" and no control characters).
        ProfileDataError: (an InfrastructureError) a `timezone` that is neither null nor
            a known IANA zone name, or `quiet_hours` not of the documented shape.
    """
    try:
        data = json.loads(body)
    except (ValueError, RecursionError) as exc:
        raise InfrastructureError(f"profile of {user_id!r}: body is not JSON") from exc
    if not isinstance(data, dict):
        raise InfrastructureError(f"profile of {user_id!r}: body is not a JSON object")
    email = data.get("email")
    if not usable_email(email):
        raise InfrastructureError(f"profile of {user_id!r}: missing or unusable email")
    assert isinstance(email, str)
    return Profile(
        user_id=user_id,
        email=email,
        timezone=profile_zone(user_id, data.get("timezone")),
        quiet_hours=profile_quiet_hours(user_id, data.get("quiet_hours")),
    )


@dataclass(frozen=True, slots=True)
class ProfileServiceConfig:
    """How the client talks to the profile service (one row each in docs/configuration.md's table).

    Attributes:
        base_url: e.g. "https://profiles.internal/api"; requests go to base_url/users/{id}.
        token: bearer token, or None for no Authorization header.
        connect_timeout_s / read_timeout_s: per attempt (read: per socket read), each
            capped by what remains of `budget_s`.
        attempts: calls per lookup (>= 1) when failures are transient.
        retry_base_s: first backoff ceiling; doubles per attempt, full jitter (uniform in
            [0, ceiling]; AWS Architecture Blog "Exponential Backoff and Jitter").
        budget_s: no attempt starts, and no backoff ends, later than this after the first.
        cache_ttl_s / not_found_ttl_s: how long a profile / a 404 is reused (0: never).
        cache_size: entries per cache (least recently used go first when full).
    """

    base_url: str
    token: str | None = None
    connect_timeout_s: float = 1.0
    read_timeout_s: float = 2.0
    attempts: int = 3
    retry_base_s: float = 0.1
    budget_s: float = 5.0
    cache_ttl_s: float = 60.0
    not_found_ttl_s: float = 5.0
    cache_size: int = 10_000

    @classmethod
    def from_settings(cls, settings: Settings, base_url: str) -> ProfileServiceConfig:
        """The PROFILE_SERVICE_* and PROFILE_CACHE_* settings, for `base_url`."""
        return cls(
            base_url=base_url,
            token=settings.profile_service_token,
            connect_timeout_s=settings.profile_service_connect_timeout_s,
            read_timeout_s=settings.profile_service_read_timeout_s,
            attempts=settings.profile_service_attempts,
            retry_base_s=settings.profile_service_retry_base_s,
            budget_s=settings.profile_service_budget_s,
            cache_ttl_s=settings.profile_cache_ttl_s,
            not_found_ttl_s=settings.profile_cache_not_found_ttl_s,
            cache_size=settings.profile_cache_size,
        )


class _Transient(Exception):
    """One attempt failed in a way that may pass (retried inside `get`)."""


class HttpProfileSource:
    """ProfileSource over HTTP; see the module docstring for the contract. Thread-safe.

    Args:
        config: URL, credentials, timeouts, retry and cache bounds.
        client: the httpx.Client to use (its pool is shared by every thread); None builds
            one from `config`, owned and closed by `close()`.
        timer: monotonic seconds for the cache's expiry (tests pass a settable one).
        sleep: how backoff waits (seconds); tests may pass a recorder.
    """

    def __init__(
        self,
        config: ProfileServiceConfig,
        *,
        client: httpx.Client | None = None,
        timer: Callable[[], float] = time.monotonic,
        sleep: Callable[[float], None] = time.sleep,
    ) -> None:
        self.config = config
        self._base = config.base_url.rstrip("/")
        self._owns_client = client is None
        self._client = client or httpx.Client(
            timeout=httpx.Timeout(config.read_timeout_s, connect=config.connect_timeout_s),
            headers=self._headers(config),
        )
        self._sleep = sleep
        self._lock = threading.Lock()
        self._found: TTLCache[str, Profile] | None = None
        self._missing: TTLCache[str, bool] | None = None
        if config.cache_ttl_s > 0:
            self._found = TTLCache(config.cache_size, config.cache_ttl_s, timer=timer)
        if config.not_found_ttl_s > 0:
            self._missing = TTLCache(config.cache_size, config.not_found_ttl_s, timer=timer)

    @staticmethod
    def _headers(config: ProfileServiceConfig) -> dict[str, str]:
        headers = {"Accept": "application/json"}
        if config.token:
            headers["Authorization"] = f"Bearer {config.token}"
        return headers

    def get(self, user_id: str) -> Profile | None:
        """The user's profile, from the cache or `GET /users/{user_id}`; None on a 404.

        Blocks for at most about `budget_s` (plus one read timeout when a server stalls
        between the bytes of its headers). Side effects: HTTP requests; cache entries.

        Raises:
            InfrastructureError: transient failures outlasted the attempts or the budget,
                or the service answered another status or a malformed body (module
                docstring). The caller retries later (sender) or answers 503 (API).
        """
        with self._lock:
            if self._found is not None and (hit := self._found.get(user_id)) is not None:
                return hit
            if self._missing is not None and user_id in self._missing:
                return None
        path = user_path(user_id)
        profile = self._lookup(user_id, path) if path is not None else None
        with self._lock:
            if profile is not None:
                if self._found is not None:
                    self._found[user_id] = profile
                if self._missing is not None:
                    self._missing.pop(user_id, None)
            elif self._missing is not None:
                self._missing[user_id] = True
        return profile

    def close(self) -> None:
        """Close the HTTP client if this source built it."""
        if self._owns_client:
            self._client.close()

    def _lookup(self, user_id: str, path: str) -> Profile | None:
        cfg = self.config
        started = time.monotonic()
        retrying = Retrying(
            stop=stop_after_attempt(cfg.attempts) | stop_before_delay(cfg.budget_s),
            wait=wait_random_exponential(multiplier=cfg.retry_base_s, max=cfg.budget_s),
            retry=retry_if_exception_type(_Transient),
            sleep=self._sleep,
            before_sleep=self._log_retry,
            reraise=True,
        )
        try:
            return retrying(self._attempt, user_id, path, started + cfg.budget_s)
        except _Transient as exc:
            raise InfrastructureError(f"profile service unavailable: {exc}") from exc

    def _attempt(self, user_id: str, path: str, deadline: float) -> Profile | None:
        cfg = self.config
        remaining = max(deadline - time.monotonic(), 0.001)
        timeout = httpx.Timeout(
            min(cfg.read_timeout_s, remaining), connect=min(cfg.connect_timeout_s, remaining)
        )
        try:
            with self._client.stream("GET", self._base + path, timeout=timeout) as response:
                verdict = classify_status(response.status_code)
                body = self._read_capped(response, deadline) if verdict == "ok" else b""
        except (httpx.TimeoutException, httpx.NetworkError, httpx.RemoteProtocolError) as exc:
            raise _Transient(f"{type(exc).__name__} on GET {path}: {exc}") from exc
        except httpx.HTTPError as exc:
            raise InfrastructureError(f"profile service: GET {path} failed: {exc}") from exc
        if verdict == "not_found":
            return None
        if verdict == "transient":
            raise _Transient(f"HTTP {response.status_code} on GET {path}")
        if verdict == "fatal":
            raise InfrastructureError(
                f"profile service answered HTTP {response.status_code} on GET {path}; "
                "check PROFILE_SERVICE_URL and PROFILE_SERVICE_TOKEN"
            )
        if body is None:
            raise InfrastructureError(f"profile of {user_id!r}: body over {MAX_BODY_BYTES} B")
        return parse_profile(user_id, body)

    @staticmethod
    def _read_capped(response: httpx.Response, deadline: float) -> bytes | None:
        """The body, or None when it exceeds MAX_BODY_BYTES (read no further).

        Raises:
            _Transient: the body is still arriving at the deadline (a trickling server).
        """
        chunks: list[bytes] = []
        size = 0
        for chunk in response.iter_bytes():
            if time.monotonic() > deadline:
                raise _Transient("the body was still arriving when the budget ran out")
            size += len(chunk)
            if size > MAX_BODY_BYTES:
                return None
            chunks.append(chunk)
        return b"".join(chunks)

    @staticmethod
    def _log_retry(state: RetryCallState) -> None:
        outcome = state.outcome
        exc = outcome.exception() if outcome is not None else None
        wait_s = state.upcoming_sleep
        log.info(
            "profile lookup attempt %d failed (%s); retry in %.2fs",
            state.attempt_number,
            exc,
            wait_s,
        )


def profile_source_from_settings(settings: Settings) -> ProfileSource:
    """The profile service client when PROFILE_SERVICE_URL is set, else the local file
    (PROFILES_FILE). Called from `main()` (through `open_runtime`); builds an httpx.Client
    that `HttpProfileSource.close()` releases."""
    if settings.profile_service_url:
        config = ProfileServiceConfig.from_settings(settings, settings.profile_service_url)
        return HttpProfileSource(config)
    return LocalProfileSource(settings.effective_profiles_file)
