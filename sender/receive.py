"""Receive stage: take a batch off the queue and decode it (one copy per occurrence)."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime

from reminder_core.logging import delivery_fields
from reminder_core.messages import MalformedMessage, OccurrenceMessage
from reminder_core.metrics import SENDER_RECEIVE_SIZE
from reminder_core.queue import Message, Queue
from sender.providers.base import ChoosingProvider, Provider
from sender.work import Decided, Outcome, Received, log


class BatchSizer:
    """How many messages a receive asks for (docs/design.md, "Batch size").

    `batch_size` until a full batch has been timed; then about `batch_target_s` seconds
    of work at the pace the last full batches were handled (messages per second, from
    the receive to the settle), within [`batch_size`, `batch_max`]. A slower batch sets
    the pace at once, a faster one moves it halfway: a provider that slows down gets
    short batches from the next receive on.

    Args:
        batch_size: the first receives' size, and the fewest a receive asks for.
        batch_max: the most a receive asks for (None or less than `batch_size`:
            `batch_size`, fixed).
        batch_target_s: seconds of work a batch is sized to hold; 0: fixed `batch_size`.
    """

    def __init__(
        self, batch_size: int, batch_max: int | None = None, batch_target_s: float = 0.0
    ) -> None:
        self.batch_size = batch_size
        self.batch_max = batch_max
        self.batch_target_s = batch_target_s
        #: Messages per second of the last full batches (None: none timed yet).
        self.rate: float | None = None

    def next_size(self) -> int:
        """Messages the next receive asks for."""
        fewest = self.batch_size
        most = max(self.batch_max or fewest, fewest)
        if self.rate is None or self.batch_target_s <= 0 or most == fewest:
            return fewest
        return max(fewest, min(most, int(self.rate * self.batch_target_s)))

    def observe(self, requested: int, handled: int, elapsed_s: float) -> None:
        """Time a batch: `handled` of the `requested` messages, `elapsed_s` seconds from
        its receive to its settle. Only a full batch of more than one message says how
        fast the sender can go (a short one says the queue ran dry; one is a breaker's
        probe)."""
        if handled < max(2, requested) or elapsed_s <= 0:
            return
        sample = handled / elapsed_s
        rate = self.rate
        self.rate = sample if rate is None or sample < rate else (rate + sample) / 2


class Receiver:
    """Receives batches sized to the sender's pace (`BatchSizer`), and none while every
    provider's breaker is open (docs/design.md, "Retries and the dead-letter queue").

    Args:
        queue: where occurrences arrive.
        provider: the sender's provider; a failover (ChoosingProvider) gates receiving.
        batch_size, batch_max, batch_target_s: the receives' size (`BatchSizer`).
        visibility_timeout_s: seconds each received message stays hidden.
    """

    def __init__(
        self,
        queue: Queue,
        provider: Provider,
        *,
        batch_size: int,
        visibility_timeout_s: float,
        batch_max: int | None = None,
        batch_target_s: float = 0.0,
    ) -> None:
        self._queue = queue
        self._gate = provider if isinstance(provider, ChoosingProvider) else None
        self.sizer = BatchSizer(batch_size, batch_max, batch_target_s)
        self.visibility_timeout_s = visibility_timeout_s
        #: What the last receive asked for (0 before the first, and while it gave None).
        self.requested = 0
        SENDER_RECEIVE_SIZE.set(batch_size)

    @property
    def batch_size(self) -> int:
        return self.sizer.batch_size

    @batch_size.setter
    def batch_size(self, n: int) -> None:
        self.sizer.batch_size = n

    def observe(self, handled: int, elapsed_s: float) -> None:
        """Time the batch of the last receive (`BatchSizer.observe`); sets the
        reminders_sender_receive_size gauge."""
        self.sizer.observe(self.requested, handled, elapsed_s)
        SENDER_RECEIVE_SIZE.set(self.sizer.next_size())

    def receive(self, now: datetime) -> list[Message] | None:
        """Up to `sizer.next_size()` messages (1 while only a half-open probe may pass),
        or None when every provider's breaker is open: receiving then would only burn
        the messages' receives toward the dead-letter queue. Sets `requested`.

        Raises:
            InfrastructureError / sqlalchemy.exc.DBAPIError: the queue failed.
        """
        self.requested = 0
        max_messages = self.sizer.next_size()
        if self._gate is not None:
            if not self._gate.ready():
                return None
            if "closed" not in self._gate.breaker_states().values():
                max_messages = 1  # only a half-open probe may pass: risk one message
        self.requested = max_messages
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
