"""Postmark webhooks: HTTP basic auth checked in constant time, and Bounce /
SpamComplaint records parsed into `WebhookEvent`s.

Sources:
- Postmark developer docs, "Webhooks overview" (secure a webhook URL with HTTP basic
  auth credentials in the URL), "Bounce webhook" and "Spam complaint webhook" (payload:
  `RecordType`, `ID` (a number), `Type`, `MessageID` (a GUID string), `Email`,
  `BouncedAt`, `Description`, `Details`), and the Bounce API's list of bounce types.
- RFC 7617 (the "Basic" scheme: base64 of "user-id:password", UTF-8).
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import hmac

from reminder_core.errors import MalformedBody, Unauthenticated
from webhooks.events import EventKind, WebhookEvent
from webhooks.parsing import MAX_EVENT_ID, address, instant, parse_json_object, reason

PROVIDER = "postmark"
CHALLENGE = 'Basic realm="postmark-webhooks", charset="UTF-8"'  # RFC 7617 §2, §2.1

#: Postmark bounce types (Bounce API, "Bounce types") that prove the address is dead.
HARD_TYPES = frozenset({"HardBounce", "BadEmailAddress"})
#: Bounce types that are a failure of this delivery only: recorded, never suppressed.
SOFT_TYPES = frozenset(
    {
        "Transient",
        "SoftBounce",
        "DnsError",
        "Unknown",
        "SpamNotification",
        "Blocked",
        "SMTPApiError",
        "DMARCPolicy",
    }
)
# Every other type (AutoResponder, AddressChange, Subscribe, Unsubscribe, OpenRelayTest,
# ChallengeVerification, VirusNotification, ManuallyDeactivated, Unconfirmed,
# InboundError, TemplateRenderingFailed) is not feedback on a delivery: no event.


def check_basic_auth(authorization: str | None, *, user: str, password: str) -> None:
    """Check an `Authorization: Basic ...` header against the configured credentials.

    Both the user and the password are compared with `hmac.compare_digest`, on SHA-256
    digests of their UTF-8 bytes (so not even their lengths show), and both comparisons
    always run: the time taken does not tell which one, or how much of either, matched.

    Raises:
        Unauthenticated: header missing, not Basic, not base64, without ":", or wrong
            credentials; it carries the Basic challenge for WWW-Authenticate.
    """
    scheme, _, token = (authorization or "").strip().partition(" ")
    if scheme.lower() != "basic" or not token.strip():
        raise Unauthenticated("Basic credentials required", challenge=CHALLENGE)
    try:
        decoded = base64.b64decode(token.strip(), validate=True)
    except (binascii.Error, ValueError) as exc:
        raise Unauthenticated("malformed Basic credentials", challenge=CHALLENGE) from exc
    given_user, colon, given_password = decoded.partition(b":")
    user_ok = hmac.compare_digest(_digest(given_user), _digest(user.encode("utf-8")))
    password_ok = hmac.compare_digest(_digest(given_password), _digest(password.encode("utf-8")))
    if not (colon and user_ok and password_ok):
        raise Unauthenticated("wrong Basic credentials", challenge=CHALLENGE)


def _digest(value: bytes) -> bytes:
    return hashlib.sha256(value).digest()


def parse_postmark_events(body: bytes) -> list[WebhookEvent]:
    """The bounce or complaint event of one Postmark webhook (one record per request).

    - RecordType "SpamComplaint" (or Type "SpamComplaint"): a COMPLAINT.
    - RecordType "Bounce": Type in HARD_TYPES → HARD_BOUNCE, in SOFT_TYPES → SOFT_BOUNCE,
      any other type → no event.
    - Other record types (Delivery, Open, Click, SubscriptionChange): no event.

    event_id is `ID` as decimal text: it must be a JSON integer, kept exact however large
    (Postmark's documented example is 4323372036854775807, beyond 2**53, which a float
    would round); a float, string or boolean `ID` is refused rather than guessed at.
    provider_message_id is `MessageID` (a GUID string); recipient `Email`; reason
    "<Type>: <Description> <Details>"; occurred_at `BouncedAt`.

    Raises:
        MalformedBody: not a JSON object, or a bounce/complaint without an integer ID
            (of at most 255 digits), a MessageID or an Email (of at most 254 characters).
    """
    document = parse_json_object(body)
    record_type = document.get("RecordType")
    bounce_type = document.get("Type")
    if not isinstance(bounce_type, str):
        bounce_type = None  # only text can name a documented type (and hash in a set)
    if record_type == "SpamComplaint" or (
        record_type == "Bounce" and bounce_type == "SpamComplaint"
    ):
        kind = EventKind.COMPLAINT
    elif record_type == "Bounce" and bounce_type in HARD_TYPES:
        kind = EventKind.HARD_BOUNCE
    elif record_type == "Bounce" and bounce_type in SOFT_TYPES:
        kind = EventKind.SOFT_BOUNCE
    else:
        return []
    record_id = document.get("ID")
    if not isinstance(record_id, int) or isinstance(record_id, bool):
        raise MalformedBody("Postmark ID must be a JSON integer")
    event_id = str(record_id)
    if len(event_id) > MAX_EVENT_ID:
        raise MalformedBody(f"Postmark ID longer than {MAX_EVENT_ID} digits")
    message_id = document.get("MessageID")
    if not isinstance(message_id, str) or not message_id:
        raise MalformedBody("Postmark record without a MessageID")
    email = address(document.get("Email"), "Postmark Email")
    words = [w for w in (document.get("Description"), document.get("Details")) if w]
    text = f"{bounce_type}: " + " ".join(str(w) for w in words) if words else str(bounce_type)
    return [
        WebhookEvent(
            provider=PROVIDER,
            event_id=event_id,
            kind=kind,
            provider_message_id=message_id,
            recipient=email,
            reason=reason(text),
            occurred_at=instant(document.get("BouncedAt")),
        )
    ]
