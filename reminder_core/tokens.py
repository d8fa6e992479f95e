"""Bearer tokens (JWT, PyJWT): minting for development, verification for the API."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta

import jwt

from reminder_core.clock import utcnow
from reminder_core.settings import Settings

MAX_SUBJECT_LENGTH = 200
#: The scope an operator's token carries (the console's SRE pages, `/v1/admin/*`); in the
#: JWT `scope` claim, a space-separated list (RFC 8693 §4.2, RFC 9068 §2.2.3).
ADMIN_SCOPE = "reminders:admin"


class TokenError(Exception):
    """The bearer token is missing, malformed, expired or not ours (answer 401)."""


def mint_token(
    settings: Settings,
    user_id: str,
    *,
    ttl_s: float = 30 * 86400,
    now: datetime | None = None,
    scopes: Sequence[str] = (),
) -> str:
    """Return a signed JWT for `user_id` (claims sub, iat, exp, and iss/aud when configured).

    Args:
        ttl_s: lifetime in seconds (default 30 days; a development token).
        scopes: put in the `scope` claim, space-separated (e.g. ADMIN_SCOPE); none: no
            claim.

    Raises:
        ConfigurationError: no signing key is configured or stored (see Settings.jwt_key).
    """
    issued = now or utcnow()
    claims: dict[str, object] = {
        "sub": user_id,
        "iat": int(issued.timestamp()),
        "exp": int((issued + timedelta(seconds=ttl_s)).timestamp()),
    }
    if settings.jwt_issuer:
        claims["iss"] = settings.jwt_issuer
    if settings.jwt_audience:
        claims["aud"] = settings.jwt_audience
    if scopes:
        claims["scope"] = " ".join(scopes)
    return jwt.encode(claims, settings.jwt_key(), algorithm=settings.jwt_algorithm)


def verify_token(token: str, *, key: str, settings: Settings) -> str:
    """Verify `token` and return its subject (the user id) (`verify_principal`'s subject)."""
    return verify_principal(token, key=key, settings=settings).subject


@dataclass(frozen=True, slots=True)
class Principal:
    """Who a verified token speaks for: `subject` (the user id), the `scopes` of its
    `scope` claim, and `expires_at` (its `exp`, Unix seconds)."""

    subject: str
    scopes: frozenset[str]
    expires_at: float

    @property
    def admin(self) -> bool:
        """The token carries ADMIN_SCOPE."""
        return ADMIN_SCOPE in self.scopes


def verify_principal(token: str, *, key: str, settings: Settings) -> Principal:
    """Verify `token` and return its subject, scopes and expiry.

    The algorithm is pinned to `settings.jwt_algorithm` (a token signed otherwise, or with
    "none", is refused); `exp` and `sub` are required; `iss` and `aud` are required and
    checked when configured (RFC 7519 §4.1).

    Raises:
        TokenError: with a short reason safe to show the client.
    """
    required = ["exp", "sub"]
    if settings.jwt_issuer:
        required.append("iss")
    if settings.jwt_audience:
        required.append("aud")
    try:
        claims = jwt.decode(
            token,
            key,
            algorithms=[settings.jwt_algorithm],
            issuer=settings.jwt_issuer,
            audience=settings.jwt_audience,
            options={"require": required, "verify_aud": bool(settings.jwt_audience)},
        )
    except jwt.ExpiredSignatureError:
        raise TokenError("token has expired") from None
    except jwt.PyJWTError as exc:
        raise TokenError(f"invalid token: {exc}") from None
    subject = claims.get("sub")
    if not isinstance(subject, str) or not subject or len(subject) > MAX_SUBJECT_LENGTH:
        raise TokenError("invalid token: 'sub' must be a non-empty string")
    if "\x00" in subject:
        raise TokenError("invalid token: 'sub' holds a NUL character")
    scope = claims.get("scope", "")
    if not isinstance(scope, str):
        raise TokenError("invalid token: 'scope' must be a space-separated string")
    return Principal(subject, frozenset(scope.split()), float(claims["exp"]))
