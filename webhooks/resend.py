"""Resend webhooks: Standard Webhooks signatures (svix-id / svix-timestamp /
svix-signature) checked with the `svix` library, and `email.bounced` /
`email.complained` events parsed into `WebhookEvent`s.

Sources:
- Standard Webhooks specification (signature = base64 HMAC-SHA256 of
  "<id>.<timestamp>.<body>" with the secret after "whsec_"; "v1,<sig>" entries separated
  by spaces; timestamps outside a tolerance refused); svix's `Webhook.verify` implements
  it with a 5-minute tolerance on either side of the current time.
- Resend docs, "Webhooks" / "Verify webhooks requests" (Resend signs with Svix) and the
  event pages `email.bounced` and `email.complained` (payload: `type`, `created_at`,
  `data.email_id`, `data.to`, `data.bounce.{type, subType, message}`), `email.sent`
  and `email.delivered` (`data.tags`: an object name -> value on the current pages, a
  list of {name, value} on earlier ones).
"""

from __future__ import annotations

import base64
import binascii
from collections.abc import Mapping

from reminder_core.domain.localtime import CELL_TAG, KEY_TAG
from reminder_core.errors import MalformedBody, Unauthenticated
from webhooks.events import EventKind, WebhookEvent, accepted_events, with_cell
from webhooks.parsing import MAX_EVENT_ID, address, instant, parse_json_object, reason

PROVIDER = "resend"
SIGNATURE_HEADERS = ("svix-id", "svix-timestamp", "svix-signature")
# Svix ids are "msg_" + 27 characters; longer than MAX_EVENT_ID is refused.


class ResendVerifier:
    """Checks Resend's Svix signature on a raw request body.

    Args:
        secret: the endpoint's signing secret as Resend shows it ("whsec_" + base64).

    Raises:
        ValueError: the secret is empty or not base64 (a configuration error: raised when
            the app is built, not per request).
    """

    def __init__(self, secret: str) -> None:
        try:
            key = base64.b64decode(secret.removeprefix("whsec_"), validate=True)
        except (binascii.Error, ValueError) as exc:
            raise ValueError("the Resend webhook secret is not a whsec_<base64> secret") from exc
        if not key:
            raise ValueError("the Resend webhook secret is empty")
        # svix loads its whole API client (~0.5 s): only an API with Resend webhooks
        # configured pays for it.
        from svix.webhooks import Webhook

        self._webhook = Webhook(secret)

    def verify(self, body: bytes, headers: Mapping[str, str]) -> str:
        """Verify the signature of `body` and return its svix-id (the event id).

        Only the three svix-* headers are passed on (header names are matched without
        regard to case). The timestamp must lie within svix's tolerance (5 minutes) of
        the current wall-clock time; a replay inside that window verifies again and is
        deduplicated by its svix-id when applied.

        Raises:
            Unauthenticated: a header missing or malformed, a timestamp too old or too new,
                no matching "v1" signature, or a body that is not UTF-8 (it cannot have
                been signed as sent).
        """
        from svix.webhooks import WebhookVerificationError

        lowered = {k.lower(): v for k, v in headers.items()}
        picked = {name: lowered.get(name, "") for name in SIGNATURE_HEADERS}
        try:
            self._webhook.verify(body, picked)
        except (WebhookVerificationError, ValueError, TypeError, OverflowError) as exc:
            # ValueError covers a signature entry without "," (unpacking), base64 errors
            # (binascii.Error) and a body that is not UTF-8 (UnicodeDecodeError).
            raise Unauthenticated(f"Resend signature does not verify: {exc}") from exc
        return picked["svix-id"]


def parse_resend_events(event_id: str, body: bytes) -> list[WebhookEvent]:
    """The bounce and complaint events of one verified Resend webhook.

    - `email.bounced`: a HARD_BOUNCE when `data.bounce.type` is "Permanent" or absent
      (Resend: "the recipient's mail server permanently rejected the email"), a
      SOFT_BOUNCE for "Transient", "Undetermined" or any other type; reason
      "<type>/<subType>[: <message>]".
    - `email.complained`: a COMPLAINT, reason "complaint".
    - `email.sent` (Resend took the email) and `email.delivered`: one ACCEPTED event
      whose `idempotency_key` is the `idempotency_key` tag the sender set, for the first
      address of `data.to`, occurred_at `data.created_at` (when Resend took the email;
      else the event's `created_at`); none when the tag is absent (an email we did not
      send).
    - Any other type (email.opened, email.clicked, ...): no event.

    One event per address of `data.to` (a list, or a single string); event_id is the
    svix-id, with "#<i>" appended when there are several addresses. provider_message_id
    is `data.email_id`, the id Resend returned for the send; occurred_at is the top-level
    `created_at`.

    Raises:
        MalformedBody: not a JSON object, or a bounce/complaint without `data.email_id`
            or recipients, an address over 254 characters, or an event id over 255.
    """
    document = parse_json_object(body)
    kind_name = document.get("type")
    data = document.get("data")
    cell = _tag(data.get("tags"), CELL_TAG) if isinstance(data, dict) else None
    if kind_name in ("email.sent", "email.delivered"):
        return with_cell(_accepted(event_id, document), cell)
    if kind_name not in ("email.bounced", "email.complained"):
        return []
    if len(event_id) > MAX_EVENT_ID:
        raise MalformedBody(f"svix-id longer than {MAX_EVENT_ID} characters")
    if not isinstance(data, dict):
        raise MalformedBody(f"Resend {kind_name} without a data object")
    email_id = data.get("email_id")
    if not isinstance(email_id, str) or not email_id:
        raise MalformedBody(f"Resend {kind_name} without data.email_id")
    recipients = _recipients(data.get("to"))
    if kind_name == "email.bounced":
        kind, text = _bounce(data.get("bounce"))
    else:
        kind, text = EventKind.COMPLAINT, "complaint"
    occurred_at = instant(document.get("created_at"))
    events = [
        WebhookEvent(
            provider=PROVIDER,
            event_id=event_id if len(recipients) == 1 else f"{event_id}#{index}",
            kind=kind,
            provider_message_id=email_id,
            recipient=address,
            reason=reason(text),
            occurred_at=occurred_at,
            cell=cell,
        )
        for index, address in enumerate(recipients)
    ]
    return events


def _accepted(event_id: str, document: dict[str, object]) -> list[WebhookEvent]:
    data = document.get("data")
    if not isinstance(data, dict):
        return []
    key = _tag(data.get("tags"), KEY_TAG)
    if key is None:
        return []
    if len(event_id) > MAX_EVENT_ID:
        raise MalformedBody(f"svix-id longer than {MAX_EVENT_ID} characters")
    return accepted_events(
        PROVIDER,
        event_id,
        provider_message_id=data.get("email_id"),
        to=data.get("to"),
        # data.created_at: when Resend took the email (the top-level created_at is
        # the event's, later by the webhook's delay, or the delivery's)
        occurred_at=instant(data.get("created_at")) or instant(document.get("created_at")),
        idempotency_key=key,
    )


def _tag(tags: object, name: str) -> str | None:
    """The value of tag `name` in Resend's object form ({name: value}) or list form
    ([{"name": ..., "value": ...}])."""
    value: object = None
    if isinstance(tags, dict):
        value = tags.get(name)
    elif isinstance(tags, list):
        value = next(
            (t.get("value") for t in tags if isinstance(t, dict) and t.get("name") == name),
            None,
        )
    return value if isinstance(value, str) and value else None


def _recipients(to: object) -> list[str]:
    addresses = [to] if isinstance(to, str) else to
    if not isinstance(addresses, list) or not addresses:
        raise MalformedBody("Resend event without recipient addresses in data.to")
    return [address(a, "Resend data.to") for a in addresses]


def _bounce(bounce: object) -> tuple[EventKind, str]:
    if bounce is None:
        return EventKind.HARD_BOUNCE, "Permanent/unspecified"
    if not isinstance(bounce, dict):
        raise MalformedBody("Resend data.bounce is not an object")
    bounce_type = bounce.get("type", "Permanent")
    # Only a documented permanent bounce suppresses; anything else is recorded only.
    kind = EventKind.HARD_BOUNCE if bounce_type == "Permanent" else EventKind.SOFT_BOUNCE
    sub_type = bounce.get("subType")
    text = f"{bounce_type}/{sub_type if isinstance(sub_type, str) else 'unspecified'}"
    message = bounce.get("message")
    return kind, f"{text}: {message}" if isinstance(message, str) and message else text
