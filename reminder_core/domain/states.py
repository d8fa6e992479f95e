"""Reminder and delivery states (docs/design.md, "State machines") and which of them are
terminal."""

from __future__ import annotations

from enum import StrEnum


class ReminderStatus(StrEnum):
    """Lifecycle of a reminder.

    pending → claimed (coordinator) → pending (next occurrence) | completed (no more);
    any live state → cancelled (user) | paused (user or suppression) | failed (one-time
    reminder whose only occurrence failed).
    """

    PENDING = "pending"
    CLAIMED = "claimed"
    COMPLETED = "completed"
    CANCELLED = "cancelled"
    PAUSED = "paused"
    FAILED = "failed"


class DeliveryStatus(StrEnum):
    """State of one occurrence in `delivery_log`; every state but `sending` is terminal."""

    SENDING = "sending"
    SENT = "sent"
    FAILED = "failed"
    BOUNCED = "bounced"
    COMPLAINED = "complained"
    SUPPRESSED = "suppressed"
    CANCELLED = "cancelled"
    MISSED = "missed"


#: Reminder states a user may still cancel.
CANCELLABLE = frozenset({ReminderStatus.PENDING, ReminderStatus.CLAIMED, ReminderStatus.PAUSED})

#: Delivery states after which an occurrence is never sent again.
TERMINAL_DELIVERY = frozenset(set(DeliveryStatus) - {DeliveryStatus.SENDING})
