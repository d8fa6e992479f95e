"""What flows between the sender's stages: one type per stage (docs/design.md, "Sender").

    receive → Received → begin → Begun → execute → SendResult → complete → Decided → settle

A message leaves the pipeline as soon as its outcome is known, as a `Decided` (dropped,
duplicate, cancelled, ... at receive or begin; sent, failed, retried after the completer
recorded it).
"""

from __future__ import annotations

import logging
import uuid
from dataclasses import field
from datetime import datetime
from enum import StrEnum
from zoneinfo import ZoneInfo

from reminder_core.domain.localtime import idempotency_key
from reminder_core.messages import OccurrenceMessage
from reminder_core.profiles import Profile
from reminder_core.queue import Message
from reminder_core.record import record
from reminder_core.store.delivery_log import DeliveryLease
from reminder_core.store.reminders import ReminderForSend
from sender.providers.base import SendReceipt

#: The logger of every delivery event of every stage (docs/operations.md "Logs" names it).
log = logging.getLogger("sender.service")


class ShutdownRequested(Exception):
    """The process is stopping: abandon the wait and hand the message back."""


class Outcome(StrEnum):
    """What handling one message led to."""

    SENT = "sent"  # delivered now
    DUPLICATE = "duplicate"  # the occurrence was already terminal; message dropped
    CANCELLED = "cancelled"  # reminder cancelled or rescheduled since the claim
    FAILED = "failed"  # permanent error, recorded
    RETRY = "retry"  # transient error; the message comes back after a backoff
    MISSED = "missed"  # too late under the misfire policy; recorded, not sent
    BUSY = "busy"  # another worker holds a live lease on the occurrence
    DROPPED = "dropped"  # malformed message or unknown reminder
    RELEASED = "released"  # shutting down or withdrawn: handed back unattempted
    SUPPRESSED = "suppressed"  # recipient on the suppression list; recorded, not sent
    HELD = "held"  # due in the user's quiet hours: comes back when they end


#: Outcomes whose message is handed back to the queue (a visibility change) instead of
#: deleted; BUSY only when no provider call of this sender reached the provider.
HANDED_BACK = frozenset({Outcome.RETRY, Outcome.RELEASED, Outcome.BUSY, Outcome.HELD})


@record
class Received:
    """A received message whose body decoded, the only copy of its occurrence in the
    batch (receive stage)."""

    message: Message
    occurrence: OccurrenceMessage


def held_for(reminder: ReminderForSend, chosen: datetime) -> datetime | None:
    """The end of the quiet hours that held occurrence `chosen` of `reminder` (aware
    UTC), or None: the reminder's `held_until` when it is after `chosen` (an earlier
    value is a past occurrence's hold)."""
    held = reminder.held_until
    return held if held is not None and held > chosen else None


@record
class Begun:
    """An occurrence this sender holds: its `sending` row is leased to `lease_token`, or,
    for a first send without a lease (`leaseless`: lease_token None), the message's
    receipt handle alone holds it and its delivery row `delivery_id` is written once,
    with the outcome (begin stage; docs/design.md, "First sends without a lease"); the
    execute stage sends it.

    Attributes:
        received: the message and its occurrence.
        reminder: the reminder as read in the begin transaction
            (`reminder_core.store.reminders.get_many_for_send`).
        profile: the user's profile (None: unknown user, fails permanently at send).
        zone: the zone to render and to compute the next occurrence in (None: unknown).
        chosen: aware UTC; the occurrence to send (the misfire plan may pick a later one
            than the message names).
        delivery_id: the delivery_log row (for a leaseless send: the id its row gets).
        lease_token: the fencing token of this sender's lease on that row; None for a
            leaseless send (no row until its outcome).
        pinned: the provider an earlier ambiguous attempt may have reached (send there).
        taken_over: the row was `sending` under a lease that ended without a heartbeat:
            its sender died, maybe after the provider accepted the email (a possible
            duplicate when the provider does not deduplicate on the key).
        accepted: the provider's own evidence that it already accepted this email (its
            webhook named our key while the row was `sending`: webhooks.apply.
            apply_evidence): the receipt to record without calling the provider again;
            None: no evidence.
        accepted_at: aware UTC, when the provider says it accepted it (with `accepted`).
        accepted_to: the recipient the evidence names (with `accepted`; may be None).
    """

    received: Received
    reminder: ReminderForSend
    profile: Profile | None
    zone: ZoneInfo | None
    chosen: datetime
    delivery_id: uuid.UUID
    lease_token: uuid.UUID | None
    pinned: str | None
    taken_over: bool
    accepted: SendReceipt | None = None
    accepted_at: datetime | None = None
    accepted_to: str | None = None
    key: str = field(init=False)

    def __post_init__(self) -> None:
        object.__setattr__(
            self, "key", idempotency_key(self.received.occurrence.reminder_id, self.chosen)
        )

    @property
    def held_until(self) -> datetime | None:
        """The end of the quiet hours that held this occurrence (aware UTC), or None."""
        return held_for(self.reminder, self.chosen)

    @property
    def leaseless(self) -> bool:
        """A first send without a lease: no delivery row until the completer writes its
        outcome (`delivery_log.record_first_sends_many`)."""
        return self.lease_token is None

    @property
    def lease(self) -> DeliveryLease:
        """This sender's lease on the row: what fences every write to it.

        Raises:
            ValueError: a leaseless send has no lease.
        """
        if self.lease_token is None:
            raise ValueError("a first send without a lease has no delivery row to fence")
        return DeliveryLease(self.delivery_id, self.chosen, self.lease_token)

    @property
    def message(self) -> Message:
        return self.received.message

    @property
    def occurrence(self) -> OccurrenceMessage:
        return self.received.occurrence


@record
class SendResult:
    """What the execute stage learned of one Begun occurrence; the completer records it.

    Attributes:
        begun: the occurrence.
        outcome: SENT, FAILED (permanent), RETRY (transient: hide for `hide_for_s`) or
            RELEASED (not attempted: shutting down, or `withdrawn`).
        attempts: provider calls made for it by this sender.
        receipt: the provider's answer (SENT only).
        recipient: the address it went (or would have gone) to.
        sent_at: aware UTC, when the provider accepted it (SENT only).
        error: why it failed or is retried.
        hide_for_s: seconds to hide the message for (RETRY, RELEASED).
        provider: the provider that accepted it (None: none did), for metrics and logs.
        pinned: the provider an ambiguous attempt of this send may have reached.
        withdrawn: the reminder stopped wanting the occurrence during the batch.
    """

    begun: Begun
    outcome: Outcome
    attempts: int = 0
    receipt: SendReceipt | None = None
    recipient: str | None = None
    sent_at: datetime | None = None
    error: Exception | None = None
    hide_for_s: float | None = None
    provider: str | None = None
    pinned: str | None = None
    withdrawn: bool = False


@record
class Decided:
    """A message whose outcome is known: what the settle stage needs.

    Attributes:
        message: the received message.
        outcome: what happened.
        reminder_id, run_time_utc: the occurrence decided (the one chosen to send, else
            the one the message names); None for a malformed message.
        hide_for_s: seconds to hide the message for instead of deleting it (None: leave
            its visibility as it is, e.g. BUSY with the holder's lease end unknown).
        provider: for metrics and logs.
        error, attempts, recipient, sent_at: as in SendResult.
        accepted: a provider accepted this sender's call (a receipt came back).
        held: the occurrence was held by its user's quiet hours before this send.
    """

    message: Message
    outcome: Outcome
    reminder_id: uuid.UUID | None = None
    run_time_utc: datetime | None = None
    hide_for_s: float | None = None
    provider: str | None = None
    error: Exception | None = None
    attempts: int = 0
    recipient: str | None = None
    sent_at: datetime | None = None
    accepted: bool = False
    held: bool = False

    @classmethod
    def of(
        cls,
        received: Received,
        outcome: Outcome,
        *,
        run_time_utc: datetime | None = None,
        hide_for_s: float | None = None,
        error: Exception | None = None,
    ) -> Decided:
        """A message decided before any provider call (receive or begin stage)."""
        occ = received.occurrence
        return cls(
            message=received.message,
            outcome=outcome,
            reminder_id=occ.reminder_id,
            run_time_utc=run_time_utc or occ.run_time_utc,
            hide_for_s=hide_for_s,
            error=error,
        )

    @classmethod
    def of_result(cls, result: SendResult, outcome: Outcome | None = None) -> Decided:
        """A sent, failed, retried or released occurrence, as the completer recorded it
        (`outcome` overrides the result's: BUSY when the lease was lost)."""
        begun = result.begun
        return cls(
            message=begun.message,
            outcome=outcome or result.outcome,
            reminder_id=begun.occurrence.reminder_id,
            run_time_utc=begun.chosen,
            hide_for_s=result.hide_for_s,
            provider=result.provider,
            error=result.error,
            attempts=result.attempts,
            recipient=result.recipient,
            sent_at=result.sent_at,
            accepted=result.receipt is not None,
            held=begun.held_until is not None,
        )

    @property
    def handed_back(self) -> bool:
        """The message goes back to the queue (visibility change) instead of deleted."""
        if self.outcome is Outcome.BUSY:
            return not self.accepted  # lost its lease after the provider took it: done
        return self.outcome in HANDED_BACK
