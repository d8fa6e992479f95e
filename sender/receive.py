"""Receive stage: take a batch off the queue and decode it (one copy per occurrence)."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime

from reminder_core.logging import delivery_fields
from reminder_core.messages import MalformedMessage, OccurrenceMessage
from reminder_core.queue import Message, Queue
from sender.providers.base import ChoosingProvider, Provider
from sender.work import Decided, Outcome, Received, log


class Receiver:
    """Receives batches, and none while every provider's breaker is open (docs/design.md,
    "Retries and the dead-letter queue").

    Args:
        queue: where occurrences arrive.
        provider: the sender's provider; a failover (ChoosingProvider) gates receiving.
        batch_size: messages per receive.
        visibility_timeout_s: seconds each received message stays hidden.
    """

    def __init__(
        self, queue: Queue, provider: Provider, *, batch_size: int, visibility_timeout_s: float
    ) -> None:
        self._queue = queue
        self._gate = provider if isinstance(provider, ChoosingProvider) else None
        self.batch_size = batch_size
        self.visibility_timeout_s = visibility_timeout_s

    def receive(self, now: datetime) -> list[Message] | None:
        """Up to `batch_size` messages (1 while only a half-open probe may pass), or None
        when every provider's breaker is open: receiving then would only burn the
        messages' receives toward the dead-letter queue.

        Raises:
            InfrastructureError / sqlalchemy.exc.DBAPIError: the queue failed.
        """
        max_messages = self.batch_size
        if self._gate is not None:
            if not self._gate.ready():
                return None
            if "closed" not in self._gate.breaker_states().values():
                max_messages = 1  # only a half-open probe may pass: risk one message
        return self._queue.receive(
            now=now, max_messages=max_messages, visibility_timeout_s=self.visibility_timeout_s
        )


def decode_batch(messages: Sequence[Message]) -> tuple[list[Received], list[Decided]]:
    """Decode each body with the one codec (reminder_core.messages); keep one copy of
    each occurrence.

    Returns:
        (received, decided): the messages to carry on, in receive order, and those
        decided here: DROPPED (malformed body: poison) and DUPLICATE (the same occurrence
        twice in the batch: a republished outbox row, or a replay beside a plain copy;
        the replay is kept, since only it is sent whatever the reminder's state).
    """
    decided: list[Decided] = []
    # By (UUID.int, run_time_utc): an int hashes in C, a UUID's __hash__ runs in Python.
    kept: dict[tuple[int, datetime], Received] = {}
    for message in messages:
        try:
            occurrence = OccurrenceMessage.decode(message.body)
        except MalformedMessage as exc:
            log.error(
                "delivery dropped: malformed message",
                extra=delivery_fields(
                    None, None, message.receive_count, None,
                    message_id=message.message_id, error=exc,
                ),
            )  # fmt: skip
            decided.append(Decided(message=message, outcome=Outcome.DROPPED, error=exc))
            continue
        received = Received(message, occurrence)
        key = (occurrence.reminder_id.int, occurrence.run_time_utc)
        first = kept.get(key)
        if first is None:
            kept[key] = received
        elif occurrence.replay and not first.occurrence.replay:
            decided.append(Decided.of(first, Outcome.DUPLICATE))
            kept[key] = received
        else:
            decided.append(Decided.of(received, Outcome.DUPLICATE))
    return list(kept.values()), decided
