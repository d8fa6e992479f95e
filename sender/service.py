"""Deliver queued occurrences: one `delivery_log` row per occurrence, sent once.

The Sender runs a pipeline of stages, one module each (docs/design.md, "Sender"):

    receive (sender.receive) → begin (sender.begin) → execute (sender.execute)
      → complete (sender.complete: the streaming completer) → finish (sender.finish)
      → settle (sender.settle);    heartbeat (sender.heartbeat) alongside.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Sequence
from datetime import datetime

from sqlalchemy import Engine

from reminder_core.clock import utcnow
from reminder_core.domain.retry import RetryPolicy
from reminder_core.links import LinkSigner
from reminder_core.profiles import ProfileSource
from reminder_core.queue import Message, Queue
from reminder_core.scheduling import ScheduleConfig
from reminder_core.worker.loop import TickResult
from sender.begin import Begin
from sender.complete import Completer, FlushStats
from sender.execute import Executor
from sender.finish import finish_batch
from sender.heartbeat import Heartbeat
from sender.providers.base import Provider, close_provider, deduplicates_keys
from sender.providers.webhook import WebhookChannel
from sender.receive import Receiver, decode_batch
from sender.render import Renderer
from sender.settle import settle
from sender.work import Begun, Decided, Outcome, Received, ShutdownRequested

__all__ = ["Outcome", "Sender", "ShutdownRequested"]


class Sender:
    """Receives occurrences and delivers each at most once per idempotency key.

    A received batch is decoded (receive), decided and leased in one transaction
    (begin), sent with up to `concurrency` provider calls in flight (execute); each
    outcome is recorded by the streaming completer within `flush_interval_s` of the
    provider's answer (complete), so a crash repeats at most the accepted sends of the
    flush under way; at the batch end the reminders move on (finish) and the messages are
    deleted or handed back (settle). The heartbeat extends the messages' visibility and
    the rows' leases meanwhile (docs/design.md, "Exactly once per occurrence").

    Args:
        engine: database engine.
        queue: where occurrences arrive.
        profiles: the user's address and timezone, read for every batch.
        renderer: email templates.
        provider: where emails go.
        mail_from: From header.
        visibility_timeout_s: how long a received message stays hidden.
        lease_s: a `sending` row older than this is taken over by the next receiver.
        schedule_config: recurrence limits and the all-day fire time.
        retry: in-process retries of transient provider errors (docs/design.md,
            "Retries and the dead-letter queue").
        stop: set on shutdown: sends not started are handed back, retry waits end.
        batch_size: messages per receive before the sender has measured its pace, and
            the fewest a receive asks for (sender.receive.Receiver).
        batch_max: the most messages a receive asks for (None: `batch_size`, fixed).
        batch_target_s: seconds of work a receive is sized to hold at the measured pace
            (0: fixed `batch_size`).
        concurrency: provider calls in flight at once (threads); 1 sends one by one.
        clock: current time for instants taken after a send (sent_at); aware UTC.
        recheck_interval_s: seconds after which a send re-reads the batch's reminders
            before calling the provider (sender.recheck).
        flush_interval_s: seconds between two completer flushes at most.
        flush_max: outcomes that make the completer flush at once.
        owns_provider: `close()` closes the provider too (its connections and threads);
            False when the caller shares the provider and closes it itself.
        coalesce_s: an idle sender on the PostgreSQL queue wakes this long after the next
            message becomes visible (`wait_for_work`).
        links: signs each email's snooze and stop links (None: emails carry none).
        webhooks: delivers the reminders of the webhook channel (None: such a reminder
            fails permanently).
        leaseless_first_send: send an occurrence's first receive without a `sending`
            row where that is safe (SENDER_LEASELESS_FIRST_SEND; in force only on a queue
            whose first receive is exclusive, the PostgreSQL queue, with a provider that
            delivers each key once: `providers.base.deduplicates_keys`).
    """

    name = "sender"

    def __init__(
        self,
        engine: Engine,
        queue: Queue,
        profiles: ProfileSource,
        renderer: Renderer,
        provider: Provider,
        *,
        mail_from: str,
        visibility_timeout_s: float,
        lease_s: float,
        schedule_config: ScheduleConfig,
        retry: RetryPolicy | None = None,
        stop: threading.Event | None = None,
        batch_size: int = 10,
        concurrency: int = 1,
        clock: Callable[[], datetime] = utcnow,
        recheck_interval_s: float = 0.1,
        flush_interval_s: float = 0.005,
        flush_max: int = 100,
        owns_provider: bool = False,
        coalesce_s: float = 0.05,
        links: LinkSigner | None = None,
        webhooks: WebhookChannel | None = None,
        leaseless_first_send: bool = False,
        batch_max: int | None = None,
        batch_target_s: float = 0.0,
    ) -> None:
        retry = retry or RetryPolicy()
        # docs/design.md, "First sends without a lease": only where the queue's first
        # receive is exclusive and the provider delivers a key once.
        self.leaseless_first_send = (
            leaseless_first_send
            and getattr(queue, "first_receive_exclusive", False) is True
            and getattr(queue, "max_receive_count", 0) >= 2
            and deduplicates_keys(provider)
        )
        self.coalesce_s = coalesce_s
        self._engine = engine
        self._queue = queue
        self._provider = provider
        self._owns_provider = owns_provider
        self._webhooks = webhooks
        self._stop = stop or threading.Event()
        self._clock = clock
        self.schedule_config = schedule_config
        self.receiver = Receiver(
            queue, provider, batch_size=batch_size, visibility_timeout_s=visibility_timeout_s,
            batch_max=batch_max, batch_target_s=batch_target_s,
        )  # fmt: skip
        self.begin = Begin(
            engine, profiles, lease_s=lease_s, schedule_config=schedule_config, retry=retry,
            leaseless=self.leaseless_first_send,
        )  # fmt: skip
        self.executor = Executor(
            engine, provider, renderer, mail_from=mail_from, retry=retry, stop=self._stop,
            concurrency=concurrency, clock=clock, recheck_interval_s=recheck_interval_s,
            links=links, webhooks=webhooks, lease=self._lease_begun,
        )  # fmt: skip
        self.completer = Completer(
            engine, flush_interval_s=flush_interval_s, flush_max=flush_max, clock=clock,
            retry_budget_s=lease_s,
        )  # fmt: skip
        self.heartbeat_stage = Heartbeat(
            engine, queue, visibility_timeout_s=visibility_timeout_s, clock=clock
        )

    @property
    def batch_size(self) -> int:
        return self.receiver.batch_size

    @property
    def recheck_interval_s(self) -> float:
        return self.executor.recheck_interval_s

    @recheck_interval_s.setter
    def recheck_interval_s(self, seconds: float) -> None:
        self.executor.recheck_interval_s = seconds

    def run_once(self, now: datetime) -> TickResult:
        """Receive one batch and handle it; returns counts per outcome.

        On shutdown (the stop event), messages whose send has not started are handed back
        to the queue at once (visibility 0, counted `released`).

        Raises:
            sqlalchemy.exc.DBAPIError / InfrastructureError / FlushFailed: the database
                or queue failed; the batch's unsettled messages come back after their
                visibility timeout (an outcome not recorded is sent again with the same
                idempotency key once its lease ends).
        """
        started = time.perf_counter()
        messages = self.receiver.receive(now)
        if messages is None:
            return TickResult(processed=0, more=False, counts={"providers_unavailable": 1})
        counts: dict[str, int] = {}
        for d in self._process(messages, now) if messages else ():
            counts[d.outcome.value] = counts.get(d.outcome.value, 0) + 1
        full = len(messages) >= self.receiver.requested
        self.receiver.observe(len(messages), time.perf_counter() - started)
        return TickResult(processed=len(messages), more=full, counts=counts)

    def wait_for_work(self, stop: threading.Event, timeout_s: float) -> None:
        """Wait after a tick that left the queue empty (the worker loop calls it): on the
        PostgreSQL queue until its next message becomes visible (+ `coalesce_s`) or a new
        one is sent (LISTEN/NOTIFY), so that delivery lag is not the poll interval
        (issue 15); elsewhere (SQS, whose receive long-polls) `timeout_s` seconds. Returns
        early when `stop` is set."""
        wait = getattr(self._queue, "wait_for_messages", None)
        if wait is None:
            stop.wait(timeout_s)
            return
        wait(stop, timeout_s=timeout_s, now=self._clock(), coalesce_s=self.coalesce_s)

    def handle(self, message: Message, now: datetime) -> Outcome:
        """Handle one received message as a batch of one; returns its outcome."""
        (decided,) = self._process([message], now)
        return decided.outcome

    def _process(self, messages: Sequence[Message], now: datetime) -> list[Decided]:
        with self.heartbeat_stage.tracking(messages):
            if self._stop.is_set():
                decided = [Decided(m, Outcome.RELEASED, hide_for_s=0.0) for m in messages]
            else:
                received, decided = decode_batch(messages)
                decided += self._deliver(received, now)
            settle(self._queue, decided, now=self._clock(), provider=self._provider.name)
        return decided

    def _deliver(self, received: list[Received], now: datetime) -> list[Decided]:
        """Begin, execute, complete and finish `received`; returns their outcomes."""
        begun, decided = self.begin.run(received, now)
        for b in begun:
            if b.lease_token is not None:  # a leaseless send's message alone is extended
                self.heartbeat_stage.hold(b.message, b.delivery_id, b.chosen, b.lease_token)
        if begun:
            self.executor.run(begun, self.completer.submit)
            recorded = self.completer.drain()
            decided += finish_batch(
                self._engine, recorded, now=self._clock(), config=self.schedule_config
            )
        return decided

    def _lease_begun(self, begun: Begun) -> Begun | None:
        """Lease a first send without a lease for its retries (`Begin.lease`), its row
        extended by the heartbeat from now on; None: handed back."""
        leased = self.begin.lease(begun, self._clock())
        if leased is not None and leased.lease_token is not None:
            self.heartbeat_stage.hold(
                leased.message, leased.delivery_id, leased.chosen, leased.lease_token
            )
        return leased

    def heartbeat(self, now: datetime) -> int:
        """Extend the visibility timeout of every message in flight and the lease of its
        delivery row; returns how many messages were extended (sender.heartbeat)."""
        return self.heartbeat_stage.beat(now)

    def flush_stats(self) -> FlushStats:
        """The streaming completer's counters (flushes, outcomes, waits)."""
        return self.completer.stats()

    def close(self) -> None:
        """Stop the heartbeat, send and completer threads; close the provider when this
        sender owns it (`owns_provider`)."""
        self.heartbeat_stage.close()
        self.executor.close()
        self.completer.close()
        if self._owns_provider:
            close_provider(self._provider)
            if self._webhooks is not None:
                self._webhooks.close()
