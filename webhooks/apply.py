"""Apply one verified provider event exactly once (docs/design.md, "Suppression list";
issue 6): store it, then change the delivery, the suppression list and the user's
reminders, all in the caller's transaction. Signature checks and parsing happen before
(webhooks.sns / resend / postmark); the rules are `reminder_core.domain.suppression`.

This is the one door from provider text to the database: every text of an event, and the
raw body, pass through `reminder_core.text.storable` here (U+0000 and lone surrogates
become U+FFFD; a provider message id becomes what `storable_message_id` makes it, as
the sender records it), whichever parser made the event. A provider's words are never a
reason to refuse its event: it would retry it for days."""

from __future__ import annotations

import uuid
from dataclasses import dataclass, replace
from datetime import datetime
from enum import StrEnum

from sqlalchemy import Connection

from reminder_core.domain.localtime import parse_idempotency_key
from reminder_core.domain.states import DeliveryStatus
from reminder_core.domain.suppression import ApplyOutcome, FeedbackKind, decide_feedback
from reminder_core.metrics import SEND_EVIDENCE
from reminder_core.store import delivery_log, webhook_events
from reminder_core.suppression import apply_decision, find_delivery
from webhooks.events import EventKind, WebhookEvent
from webhooks.parsing import storable, storable_message_id

__all__ = ["ApplyOutcome", "ApplyResult", "Evidence", "apply_event", "apply_evidence"]


@dataclass(frozen=True, slots=True)
class ApplyResult:
    """What `apply_event` did. Every outcome is a success for the provider (answer 2xx).

    Attributes:
        outcome: DUPLICATE (event id seen before: nothing changed, nothing stored),
            UNMATCHED (no delivery has that provider message id: stored only; the
            maintenance workload retries the match for WEBHOOK_REMATCH_WINDOW_S),
            RECORDED (soft bounce: stored, linked to its delivery, nothing else changes),
            SUPPRESSED (hard bounce or complaint: see the other fields).
        event_row_id: `webhook_events.id` of the stored event; None for DUPLICATE.
        delivery_id: the delivery the event is about; None for DUPLICATE and UNMATCHED.
        delivery_status: the delivery's new status (`bounced` / `complained`); None when
            unchanged (soft bounce, or the delivery was no longer `sent`).
        suppressed_address: the case-folded address on the suppression list (SUPPRESSED).
        newly_suppressed: False when the address was already listed.
        paused_reminder_ids: the user's reminders this event paused, ascending.
    """

    outcome: ApplyOutcome
    event_row_id: uuid.UUID | None = None
    delivery_id: uuid.UUID | None = None
    delivery_status: DeliveryStatus | None = None
    suppressed_address: str | None = None
    newly_suppressed: bool = False
    paused_reminder_ids: tuple[uuid.UUID, ...] = ()

    @property
    def duplicate(self) -> bool:
        """True when the event was a replay and nothing changed."""
        return self.outcome is ApplyOutcome.DUPLICATE


def apply_event(
    conn: Connection, event: WebhookEvent, *, raw_body: bytes, now: datetime
) -> ApplyResult:
    """Store `event` once and apply it, in the caller's transaction (the caller commits,
    or rolls back on an exception: then nothing is stored, and the provider's retry
    applies it again).

    Steps: find the delivery by (event.provider, event.provider_message_id); insert the
    event into `webhook_events` (unique per provider and event id: a replay inserts
    nothing and changes nothing); for a known delivery, a hard bounce or complaint sets
    it `bounced` / `complained` (only from `sent`) with the reason in `error`, adds the
    recipient (case-folded) to `suppressions` and pauses the delivery's user's `pending`
    and `claimed` reminders (`paused_reason`, `suppressed_address`). A soft bounce is
    recorded only: the delivery stays `sent`, since the provider may still deliver it.

    Every text of `event` (provider, event id, provider message id, recipient, reason) is
    used as `storable` makes it: U+0000 and lone surrogates replaced by U+FFFD (the
    message id as `storable_message_id` makes it, as the sender stored it), so what a
    remote mail server wrote cannot fail the statement. An event id that differs from
    another only there is the same event.

    Args:
        conn: a connection inside the caller's transaction.
        event: verified and parsed (webhooks.events).
        raw_body: the request body as received, stored for audit (as UTF-8 text,
            undecodable bytes and NULs replaced by U+FFFD; a JSON escape such as
            "\\u0000" is text and stays as sent).
        now: aware UTC; `received_at` and every `updated_at`.

    Returns:
        ApplyResult; never an error for unknown message ids or replays.

    Raises:
        ValueError: a hard bounce or complaint names no recipient and its delivery
            recorded none (nothing was written; answer 400).
        sqlalchemy.exc.DBAPIError: the database failed (answer 5xx: the provider retries).
    """
    event = _storable(event)
    kind = FeedbackKind(event.kind.value)
    delivery = find_delivery(conn, event.provider, event.provider_message_id)
    decision = decide_feedback(kind, delivery_found=delivery is not None)
    recipient = event.recipient.strip() or (delivery.recipient if delivery else None) or ""
    if decision.suppress is not None and not recipient:
        raise ValueError(f"{kind.value} event {event.event_id!r} names no recipient")
    applied = delivery is not None
    event_row_id = webhook_events.insert(
        conn,
        provider=event.provider,
        event_id=event.event_id,
        kind=kind,
        provider_message_id=event.provider_message_id,
        recipient=event.recipient,
        reason=event.reason,
        occurred_at=event.occurred_at,
        raw_body=_text(raw_body),
        outcome=decision.outcome,
        delivery_id=delivery.id if delivery else None,
        applied_at=now if applied else None,
        now=now,
    )
    if event_row_id is None:
        return ApplyResult(ApplyOutcome.DUPLICATE)
    if delivery is None:
        return ApplyResult(decision.outcome, event_row_id)
    effects = apply_decision(
        conn,
        decision,
        delivery,
        kind=kind,
        recipient=recipient,
        reason=event.reason,
        provider=event.provider,
        event_id=event.event_id,
        now=now,
    )
    return ApplyResult(
        decision.outcome,
        event_row_id,
        delivery.id,
        effects.delivery_status,
        effects.suppressed_address,
        effects.newly_suppressed,
        effects.paused_reminder_ids,
    )


class Evidence(StrEnum):
    """What `apply_evidence` did with one ACCEPTED event.

    RECORDED: written on a delivery still `sending`, for the sender that takes it over.
    KNOWN: the delivery had its answer already (the usual case: its sender recorded it
        before the provider's event came), or evidence from an earlier event.
    UNKNOWN: no delivery of ours has that idempotency key (not our email, or a key
        altered on the way, or the delivery row was removed by retention).
    """

    RECORDED = "recorded"
    KNOWN = "known"
    UNKNOWN = "unknown"


def apply_evidence(conn: Connection, event: WebhookEvent, *, now: datetime) -> Evidence:
    """Apply an ACCEPTED event (the provider took or delivered the email of one occurrence)
    in the caller's transaction: while that occurrence's delivery row is still `sending`,
    record on it the provider, its message id, the instant it accepted the email
    (`event.occurred_at`, else `now`) and the recipient, so the sender that takes the row
    over records it `sent` instead of sending a second email (docs/operations.md, "Delivery
    guarantees"). Nothing is stored in `webhook_events`: a replay finds the evidence there
    and changes nothing. Counted in `reminders_send_evidence_total`.

    Args:
        conn: a connection inside the caller's transaction.
        event: kind ACCEPTED, with `idempotency_key` (the occurrence) and
            `provider_message_id`.
        now: aware UTC; `updated_at`.

    Returns:
        Evidence; never an error for an unknown key (the provider would retry for days).

    Raises:
        ValueError: `event` is not an ACCEPTED event with a key and a message id (a
            defect of the caller).
        sqlalchemy.exc.DBAPIError: the database failed (answer 5xx: the provider retries).
    """
    if event.kind is not EventKind.ACCEPTED or not event.idempotency_key:
        raise ValueError(f"not an ACCEPTED event with a key: {event!r}")
    if not event.provider_message_id:
        raise ValueError(f"ACCEPTED event {event.event_id!r} without a message id")
    occurrence = parse_idempotency_key(event.idempotency_key)
    outcome = Evidence.UNKNOWN
    if occurrence is not None:
        reminder_id, run_time_utc = occurrence
        written = delivery_log.record_evidence(
            conn,
            reminder_id=uuid.UUID(reminder_id),  # the key's id is 8-4-4-4-12 hex
            run_time_utc=run_time_utc,
            provider=storable(event.provider),
            provider_message_id=storable_message_id(event.provider_message_id),
            accepted_at=event.occurred_at,
            recipient=storable(event.recipient),
            now=now,
        )
        if written.recorded:
            outcome = Evidence.RECORDED
        elif written.found:
            outcome = Evidence.KNOWN
    SEND_EVIDENCE.labels(provider=event.provider, outcome=outcome.value).inc()
    return outcome


def _storable(event: WebhookEvent) -> WebhookEvent:
    pmid = event.provider_message_id
    return replace(
        event,
        provider=storable(event.provider),
        event_id=storable(event.event_id),
        provider_message_id=storable_message_id(pmid) if pmid is not None else None,
        recipient=storable(event.recipient),
        reason=storable(event.reason),
    )


def _text(raw_body: bytes) -> str:
    # PostgreSQL text holds neither invalid UTF-8 nor U+0000.
    return storable(raw_body.decode("utf-8", errors="replace"))
