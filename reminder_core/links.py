"""Signed links in emails: "remind me later", "tomorrow", "stop this reminder" (issue 17;
docs/design.md, "Links in emails").

A link is a JWT (RFC 7519, HS256 by PyJWT) in the URL path `/v1/links/{token}`: claims
`act` (the action), `rid` (the reminder), `occ` (the occurrence it came with, RFC 3339
UTC), `sub` (the user), `aud` ("reminders:email-link": never accepted as a bearer token,
nor a bearer token as a link), `iat` and `exp`. Any change to the token breaks its HMAC;
a link is bound to one occurrence, and what it does is idempotent on that occurrence
(reminder_core.services.links), so using it twice does nothing the second time.

Every render of one occurrence's email carries the same links (`issued_at`): a provider
that deduplicates by the idempotency key compares the payload too, and Resend answers a
repeat with another payload 409 `invalid_idempotent_request` instead of the first
answer, so links signed at each attempt's clock made a crash's repeat, or a retry after
a timeout, fail where it should have found the email already sent.
"""

from __future__ import annotations

import hashlib
import hmac
import uuid
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from enum import StrEnum

import jwt

from reminder_core.settings import Settings

AUDIENCE = "reminders:email-link"
ALGORITHM = "HS256"
PATH = "/v1/links"
#: What the key of links is derived from the JWT key with (never the JWT key itself: a
#: link signature must not be a bearer token signature).
_DERIVATION = b"reminders email links v1"
#: How long Resend keeps an Idempotency-Key (and so compares a repeat's payload):
#: 24 hours (resend.com/docs/dashboard/emails/idempotency-keys).
IDEMPOTENCY_WINDOW = timedelta(hours=24)


class LinkAction(StrEnum):
    """What a link does."""

    SNOOZE = "snooze"  # one more occurrence SNOOZE_DELAY_S after it is used
    TOMORROW = "tomorrow"  # one more occurrence at SNOOZE_TOMORROW_AT the next local day
    STOP = "stop"  # cancel the reminder (RFC 8058 one-click unsubscribe)


class LinkError(Exception):
    """A link that is not ours, altered, malformed or expired: nothing may be done.

    Attributes:
        expired: True when the link was valid but is past its expiry (answered 410).
    """

    def __init__(self, message: str, *, expired: bool = False) -> None:
        super().__init__(message)
        self.expired = expired


@dataclass(frozen=True, slots=True)
class LinkClaims:
    """A verified link: `action` on occurrence `occurrence` (aware UTC) of reminder
    `reminder_id` of user `user_id`; `expires_at` aware UTC."""

    action: LinkAction
    reminder_id: uuid.UUID
    occurrence: datetime
    user_id: str
    expires_at: datetime


def link_key(settings: Settings) -> bytes:
    """The HMAC key of links: LINK_SECRET, else HMAC-SHA256(JWT key, a fixed label).

    Raises:
        ConfigurationError: neither LINK_SECRET nor a JWT key is available.
    """
    if settings.link_secret is not None:
        return settings.link_secret.get_secret_value().encode()
    return hmac.new(settings.jwt_key().encode(), _DERIVATION, hashlib.sha256).digest()


def issued_at(occurrence: datetime, now: datetime) -> datetime:
    """When the links of `occurrence`'s email are issued (their `iat`; they expire
    LINK_TTL_S after it): the occurrence itself, so every attempt at that email, on any
    sender, signs the same links and sends the same payload under its idempotency key;
    `now` once the occurrence is more than IDEMPOTENCY_WINDOW old (a replay days later:
    no provider still holds the key, and links from the occurrence would expire early).

    Args:
        occurrence: aware; the occurrence the email is about (it may be a little after
            `now` when it was claimed ahead).
        now: aware; the attempt's clock.

    Returns:
        An aware datetime: `occurrence` or `now`.
    """
    return now if now - occurrence > IDEMPOTENCY_WINDOW else occurrence


def sign_link(
    key: bytes,
    action: LinkAction,
    *,
    reminder_id: uuid.UUID,
    occurrence: datetime,
    user_id: str,
    now: datetime,
    ttl_s: float,
) -> str:
    """The token of one link (URL-safe: base64url parts and dots).

    Args:
        occurrence: aware; the occurrence the email is about.
        now: aware; when the link is issued (`iat`; `issued_at` for an email's): it
            expires `ttl_s` seconds after it.
    """
    claims = {
        "act": action.value,
        "rid": str(reminder_id),
        "occ": occurrence.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%SZ"),
        "sub": user_id,
        "aud": AUDIENCE,
        "iat": int(now.timestamp()),
        "exp": int((now + timedelta(seconds=ttl_s)).timestamp()),
    }
    return jwt.encode(claims, key, algorithm=ALGORITHM)


def verify_link(key: bytes, token: str, *, now: datetime) -> LinkClaims:
    """The claims of a link token, verified.

    Args:
        now: aware; a link whose `exp` is not after it is expired.

    Raises:
        LinkError: bad signature, altered, not a link, malformed claims (`expired`
            False), or expired (`expired` True).
    """
    try:
        claims = jwt.decode(
            token,
            key,
            algorithms=[ALGORITHM],
            audience=AUDIENCE,
            # Expiry is checked below against `now`; `iat` is informational and may be a
            # few seconds ahead of a click on an email claimed ahead (`issued_at`).
            options={
                "require": ["act", "rid", "occ", "sub", "aud", "exp"],
                "verify_exp": False,
                "verify_iat": False,
            },
        )
    except jwt.InvalidTokenError as exc:
        raise LinkError(f"not a valid link ({type(exc).__name__})") from None
    try:
        action = LinkAction(claims["act"])
        reminder_id = uuid.UUID(str(claims["rid"]))
        occurrence = datetime.strptime(str(claims["occ"]), "%Y-%m-%dT%H:%M:%SZ").replace(tzinfo=UTC)
        user_id = claims["sub"]
        expires_at = datetime.fromtimestamp(int(claims["exp"]), UTC)
    except (ValueError, TypeError, OverflowError, OSError) as exc:
        raise LinkError(f"not a valid link ({exc})") from None
    if not isinstance(user_id, str) or not user_id:
        raise LinkError("not a valid link (no user)")
    if expires_at <= now:
        raise LinkError(f"this link expired at {expires_at:%Y-%m-%d %H:%M} UTC", expired=True)
    return LinkClaims(action, reminder_id, occurrence, user_id, expires_at)


def delay_text(seconds: float) -> str:
    """The snooze delay in words: '1 hour', '90 minutes', '30 seconds'."""
    if seconds >= 3600 and seconds % 3600 == 0:
        n = int(seconds // 3600)
        return f"{n} hour{'s' if n != 1 else ''}"
    if seconds >= 60 and seconds % 60 == 0:
        n = int(seconds // 60)
        return f"{n} minute{'s' if n != 1 else ''}"
    return f"{seconds:g} seconds"


def link_url(base_url: str, token: str) -> str:
    """The URL of a link under the API's public base URL."""
    return f"{base_url.rstrip('/')}{PATH}/{token}"


@dataclass(frozen=True, slots=True)
class LinkSigner:
    """Makes the links of one email (the sender, at render time).

    Attributes:
        base_url: PUBLIC_BASE_URL.
        key: `link_key(settings)`.
        ttl_s: LINK_TTL_S.
    """

    base_url: str
    key: bytes
    ttl_s: float

    @classmethod
    def from_settings(cls, settings: Settings) -> LinkSigner | None:
        """The signer PUBLIC_BASE_URL asks for; None when it is unset (emails carry no
        links).

        Raises:
            ConfigurationError: PUBLIC_BASE_URL is set but no key is available.
        """
        if not settings.public_base_url:
            return None
        return cls(settings.public_base_url, link_key(settings), settings.link_ttl_s)

    def links(
        self, *, reminder_id: uuid.UUID, occurrence: datetime, user_id: str, now: datetime
    ) -> dict[str, str]:
        """The URL of each action, by its LinkAction value, for occurrence `occurrence`
        (aware) of a reminder."""
        return {
            action.value: link_url(
                self.base_url,
                sign_link(
                    self.key,
                    action,
                    reminder_id=reminder_id,
                    occurrence=occurrence,
                    user_id=user_id,
                    now=now,
                    ttl_s=self.ttl_s,
                ),
            )
            for action in LinkAction
        }

    def _token(
        self, action: LinkAction, reminder_id: uuid.UUID, occurrence: datetime, user_id: str,
        now: datetime,
    ) -> str:  # fmt: skip
        return sign_link(
            self.key, action, reminder_id=reminder_id, occurrence=occurrence, user_id=user_id,
            now=now, ttl_s=self.ttl_s,
        )  # fmt: skip
