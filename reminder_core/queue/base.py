"""Queue interface with SQS semantics, implemented by the PostgreSQL and SQS backends."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any, Protocol

from reminder_core.record import record


@record
class Message:
    """One received message.

    Attributes:
        message_id: backend id of the message (stable across receives).
        body: the JSON object that was sent.
        receipt_handle: handle of this receive; needed to delete or extend it.
        receive_count: how many times it has been received, this receive included (>= 1).
    """

    message_id: str
    body: dict[str, Any]
    receipt_handle: str
    receive_count: int


@dataclass(frozen=True, slots=True)
class QueueDepth:
    """Approximate counts: visible now, in flight or delayed, and in the dead-letter queue.

    Attributes:
        dead_lettered_held: of the dead letters, those a reader holds invisible now, which
            no other reader can receive until its hold ends (SQS: the DLQ's
            ApproximateNumberOfMessagesNotVisible; PostgreSQL: always 0, a dead letter is
            never hidden).
    """

    visible: int
    not_visible: int
    dead_lettered: int
    dead_lettered_held: int = 0


@dataclass(frozen=True, slots=True)
class DeadLetter:
    """A message in the dead-letter queue.

    Attributes:
        message_id: backend id.
        body: the JSON object that was sent.
        receive_count: receives before it was dead-lettered.
        dead_lettered_at: aware UTC, when it moved to the DLQ (None if unknown).
        recorded_at: when its occurrence was recorded `failed` (None: not yet).
    """

    message_id: str
    body: dict[str, Any]
    receive_count: int
    dead_lettered_at: datetime | None
    recorded_at: datetime | None


class Queue(Protocol):
    """At-least-once queue with a visibility timeout and a dead-letter queue (SQS model)."""

    def check(self) -> None:
        """Check once, at start, that the queue exists and can be used.

        Raises:
            QueueNotFound: the queue server says the queue does not exist.
            InfrastructureError: the queue server could not be asked.
        """
        ...

    def send_batch(
        self, bodies: Sequence[Mapping[str, Any]], *, now: datetime, delays_s: Sequence[float]
    ) -> None:
        """Send each body; body i becomes visible `delays_s[i]` seconds after `now`.

        Raises:
            InfrastructureError: the backend refused or could not be reached; nothing or
                part of the batch may have been sent (at-least-once: the caller resends).
        """
        ...

    def receive(
        self, *, now: datetime, max_messages: int, visibility_timeout_s: float
    ) -> list[Message]:
        """Receive up to `max_messages` visible messages, hiding each for the timeout.

        A message already received the maximum number of times goes to the dead-letter
        queue instead of being returned.
        """
        ...

    def delete(self, receipt_handles: Sequence[str]) -> None:
        """Delete the received messages. A handle from an earlier receive of a message
        received again since raises nothing; it deletes nothing on PostgreSQL, and on SQS
        "the message might not be deleted" (AWS DeleteMessage): rely on neither."""
        ...

    def change_visibility(self, receipt_handle: str, *, now: datetime, timeout_s: float) -> None:
        """Hide a received message for `timeout_s` more seconds from `now` (0: visible now)."""
        ...

    def change_visibility_batch(
        self, changes: Sequence[tuple[str, float]], *, now: datetime
    ) -> None:
        """Apply many visibility changes at once: (receipt handle, timeout in seconds from
        `now`) pairs, as `change_visibility` each (SQS: ChangeMessageVisibilityBatch, 10
        per call). A stale handle changes nothing."""
        ...

    def depth(self, *, now: datetime) -> QueueDepth:
        """Return the approximate depth of the queue and its dead-letter queue."""
        ...

    # --- dead-letter queue -------------------------------------------------------------

    def dead_letters(self, *, limit: int, unrecorded_only: bool = False) -> list[DeadLetter]:
        """Messages in the dead-letter queue, oldest first (only those whose occurrence is
        not yet recorded, with `unrecorded_only`)."""
        ...

    def mark_dead_letters_recorded(self, message_ids: Sequence[str], *, now: datetime) -> None:
        """Remember that these dead letters' occurrences were recorded `failed`."""
        ...

    def redrive(self, message_ids: Sequence[str], *, now: datetime) -> list[str]:
        """Move dead letters back to the queue, visible at once and marked as a replay;
        returns the ids moved (an id not in the DLQ, or held by another reader on SQS, is
        not)."""
        ...

    def delete_dead_letters(self, message_ids: Sequence[str] | None) -> list[str]:
        """Delete these dead letters (None: all of them a reader can reach); returns the
        ids deleted."""
        ...
