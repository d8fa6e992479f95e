"""Heartbeat: keep what a sender holds its own while it works on it (docs/design.md,
"Exactly once per occurrence")."""

from __future__ import annotations

import threading
import uuid
from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager
from datetime import datetime

from sqlalchemy import Engine

from reminder_core.queue import Message, Queue
from reminder_core.store import delivery_log
from reminder_core.store.delivery_log import DeliveryLease
from sender.work import log


class Heartbeat:
    """Extends, every `visibility_timeout_s / 3` seconds, the visibility timeout of every
    message a sender holds and the lease of every delivery row it holds, so that a slow
    send is neither taken over nor dead-lettered, and the messages waiting behind it are
    not received again by other senders.

    Args:
        engine: database engine (the leases).
        queue: the messages' queue.
        visibility_timeout_s: seconds each extension hides a message for.
        clock: current time, aware UTC.
        name: thread name prefix.
    """

    def __init__(
        self,
        engine: Engine,
        queue: Queue,
        *,
        visibility_timeout_s: float,
        clock: Callable[[], datetime],
        name: str = "sender",
    ) -> None:
        self._engine = engine
        self._queue = queue
        self.visibility_timeout_s = visibility_timeout_s
        self._clock = clock
        self._name = name
        # receipt handle -> the delivery row held: (id, run_time_utc, lease token)
        self._held: dict[str, tuple[uuid.UUID, datetime, uuid.UUID] | None] = {}
        self._lock = threading.Lock()
        self._thread: threading.Thread | None = None
        self._stop = threading.Event()

    @contextmanager
    def tracking(self, messages: Iterable[Message]) -> Iterator[None]:
        """Hold `messages` until each is untracked or the block ends (an error mid-batch:
        the rest come back after their visibility timeout). Starts the thread."""
        listed = list(messages)
        self._ensure_thread()
        with self._lock:
            for message in listed:
                self._held[message.receipt_handle] = None
        try:
            yield
        finally:
            self.untrack(listed)

    def hold(
        self, message: Message, delivery_id: uuid.UUID, run_time: datetime, lease: uuid.UUID
    ) -> None:
        """Extend the lease of this delivery row with the message from now on."""
        with self._lock:
            if message.receipt_handle in self._held:
                self._held[message.receipt_handle] = (delivery_id, run_time, lease)

    def untrack(self, messages: Iterable[Message]) -> None:
        """Stop extending these messages (settled: deleted or handed back)."""
        with self._lock:
            for message in messages:
                self._held.pop(message.receipt_handle, None)

    def beat(self, now: datetime) -> int:
        """Extend every held message's visibility timeout (one queue call) and every held
        row's lease (one statement); returns how many messages were extended.

        Raises:
            InfrastructureError / sqlalchemy.exc.DBAPIError: the queue or the database
                failed (the thread logs it and tries again at the next beat).
        """
        with self._lock:
            held = list(self._held.items())
        if not held:
            return 0
        self._queue.change_visibility_batch(
            [(handle, self.visibility_timeout_s) for handle, _ in held], now=now
        )
        leases = [DeliveryLease(*lease) for _, lease in held if lease is not None]
        if leases:
            with self._engine.begin() as conn:
                delivery_log.heartbeat_many(conn, leases, now=now)
        return len(held)

    def _ensure_thread(self) -> None:
        if self._thread is None or not self._thread.is_alive():
            self._thread = threading.Thread(
                target=self._run, name=f"{self._name}-heartbeat", daemon=True
            )
            self._thread.start()

    def _run(self) -> None:
        interval = self.visibility_timeout_s / 3
        while not self._stop.wait(interval):
            try:
                self.beat(self._clock())
            except Exception:
                log.exception("heartbeat failed; will retry")

    def close(self) -> None:
        """Stop the thread (it exits at its next wake-up)."""
        self._stop.set()
