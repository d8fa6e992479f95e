"""What a provider webhook tells us, once verified and parsed: the provider-neutral event
that `webhooks.apply` applies (DESIGN §4.8)."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from enum import StrEnum


class EventKind(StrEnum):
    """The kinds of feedback that change state.

    HARD_BOUNCE: the address does not exist or refuses mail for good (SES `Permanent`,
        Postmark `HardBounce`, Resend `email.bounced` of type Permanent): suppress.
    SOFT_BOUNCE: a temporary refusal (mailbox full, SES `Transient` / `Undetermined`):
        recorded only.
    COMPLAINT: the recipient marked the email as spam: suppress.
    """

    HARD_BOUNCE = "hard_bounce"
    SOFT_BOUNCE = "soft_bounce"
    COMPLAINT = "complaint"


@dataclass(frozen=True, slots=True)
class WebhookEvent:
    """One verified provider event about one message and one recipient.

    Attributes:
        provider: our provider name, as recorded in `delivery_log.provider` ("ses",
            "resend", "postmark", ...).
        event_id: the provider's id of this event (SNS MessageId, svix-id, Postmark
            `ID`), unique per provider: a replay with the same id changes nothing.
        kind: what happened.
        provider_message_id: the provider's id of the email it is about, as a string
            (Postmark's numeric ids must survive intact), as returned when it was sent.
        recipient: the address concerned.
        reason: the provider's own words (bounce type / subtype / diagnostic), for
            `delivery_log.error` and the suppression entry.
        occurred_at: aware UTC, when the provider says it happened (None if it does not).
    """

    provider: str
    event_id: str
    kind: EventKind
    provider_message_id: str | None
    recipient: str
    reason: str
    occurred_at: datetime | None = None
