"""What a provider webhook tells us, once verified and parsed: the provider-neutral event
that `webhooks.apply` applies (docs/design.md, "Suppression list")."""

from __future__ import annotations

import dataclasses
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
    ACCEPTED: the provider took the email to deliver it, or delivered it (SES `Send` /
        `Delivery`, Resend `email.sent` / `email.delivered`): evidence for a delivery
        still `sending` whose sender died or lost the answer, so that the sender taking
        it over records it `sent` instead of sending it again (docs/operations.md,
        "Delivery guarantees"). Found by `idempotency_key`, not stored as an event.
    """

    HARD_BOUNCE = "hard_bounce"
    SOFT_BOUNCE = "soft_bounce"
    COMPLAINT = "complaint"
    ACCEPTED = "accepted"


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
        idempotency_key: our key of the occurrence, from the message tag the sender set
            (`idempotency_key`); ACCEPTED events are found by it (None: absent).
        cell: the sender's cell, from its `cell` message tag (None: absent, or one
            cell); the API applies the event in that cell (webhooks.cells).
    """

    provider: str
    event_id: str
    kind: EventKind
    provider_message_id: str | None
    recipient: str
    reason: str
    occurred_at: datetime | None = None
    idempotency_key: str | None = None
    cell: str | None = None


def with_cell(events: list[WebhookEvent], cell: str | None) -> list[WebhookEvent]:
    """`events` with `cell` set (the `cell` tag of the record they came from)."""
    if cell is None:
        return events
    return [dataclasses.replace(e, cell=cell) for e in events]


def accepted_events(
    provider: str,
    event_id: str,
    *,
    provider_message_id: object,
    to: object,
    occurred_at: datetime | None,
    idempotency_key: str,
) -> list[WebhookEvent]:
    """The ACCEPTED event of a provider's "sent" / "delivered" record, as a list of one;
    none when `provider_message_id` is not a string holding more than white space. The id
    is kept exactly as sent (it is stored and looked up as the sender records the id of
    its answer, `reminder_core.text.storable_message_id`, whatever its length). `to` is
    the record's recipient list (or one address); the first address is kept when it is
    a string of at most 254 characters (ours are single-recipient emails), else ""."""
    if not isinstance(provider_message_id, str) or not provider_message_id.strip():
        return []
    first = to[0] if isinstance(to, list) and to else to
    event = WebhookEvent(
        provider=provider,
        event_id=event_id,
        kind=EventKind.ACCEPTED,
        provider_message_id=provider_message_id,
        recipient=first if isinstance(first, str) and len(first) <= 254 else "",
        reason="accepted",
        occurred_at=occurred_at,
        idempotency_key=idempotency_key,
    )
    return [event]
