"""Execute stage: render and send each begun occurrence, `concurrency` calls in flight;
each result goes to the completer the moment it is known."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from datetime import datetime

from sqlalchemy import Engine
from tenacity import RetryCallState, Retrying, retry_if_exception_type

from reminder_core.domain.retry import RetryPolicy, next_wait_s, requeue_delay_s, should_stop
from reminder_core.errors import (
    InfrastructureError,
    PermanentDeliveryError,
    TransientDeliveryError,
)
from reminder_core.links import LinkAction, LinkSigner, issued_at
from reminder_core.logging import DELIVERY, delivery_fields
from reminder_core.metrics import POSSIBLE_DUPLICATES, SENDS_RECOVERED
from reminder_core.store import delivery_log
from sender.providers.base import ChoosingProvider, OutgoingEmail, Provider, SendReceipt
from sender.providers.webhook import WebhookChannel, WebhookDelivery
from sender.recheck import Recheck
from sender.render import Renderer
from sender.work import Begun, Outcome, SendResult, ShutdownRequested, log

OnResult = Callable[[SendResult], None]


class _Attempt:
    """The mutable state of one send while its provider calls go on (one thread)."""

    def __init__(self, begun: Begun) -> None:
        self.begun = begun
        self.calls = 0
        self.recipient: str | None = None
        self.pinned = begun.pinned  # recorded on the row: an ambiguous attempt's provider
        self.ambiguous = False  # the last failure may have reached the provider
        self.accepted_at: datetime | None = None  # from the provider's evidence


class Executor:
    """Sends begun occurrences: renders at send time and calls the provider, retrying
    transient errors in process (tenacity: full-jitter backoff, Retry-After honoured,
    bounded by the delivery budget; docs/design.md, "Retries and the dead-letter queue").
    Never raises for a send: every send ends in one SendResult handed to `on_result`.

    Args:
        engine: database engine (records the provider an ambiguous attempt reached).
        provider: where emails go.
        renderer: email templates.
        mail_from: From header.
        retry: in-process retries of transient provider errors.
        stop: set on shutdown: sends not started are handed back, retry waits end.
        concurrency: provider calls in flight at once (threads); 1 sends one by one.
        clock: current time for sent_at, aware UTC.
        recheck_interval_s: see `Recheck`.
        name: thread name prefix.
        lease: leases a first send without a lease after its first transient failure
            (`Begin.lease`), so that its retries run under a lease; returns the leased
            occurrence, or None when another copy holds a row (the send is handed back).
            None: such a send is handed back at its first transient failure.
    """

    def __init__(
        self,
        engine: Engine,
        provider: Provider,
        renderer: Renderer,
        *,
        mail_from: str,
        retry: RetryPolicy,
        stop: threading.Event,
        concurrency: int,
        clock: Callable[[], datetime],
        recheck_interval_s: float,
        name: str = "sender",
        links: LinkSigner | None = None,
        webhooks: WebhookChannel | None = None,
        lease: Callable[[Begun], Begun | None] | None = None,
    ) -> None:
        self._lease = lease
        self._links = links
        self._webhooks = webhooks
        self._engine = engine
        self._provider = provider
        self._failover = provider if isinstance(provider, ChoosingProvider) else None
        self._renderer = renderer
        self.mail_from = mail_from
        self.retry = retry
        self._stop = stop
        self.concurrency = max(1, concurrency)
        self._clock = clock
        self.recheck_interval_s = recheck_interval_s
        self._name = name
        self._pool: ThreadPoolExecutor | None = None

    def run(self, begun: Sequence[Begun], on_result: OnResult) -> None:
        """Send every occurrence of `begun`; returns once each has reached `on_result`
        (called from the send threads, as each send ends)."""
        recheck = Recheck(self._engine, begun, interval_s=self.recheck_interval_s)
        if self.concurrency == 1 or len(begun) <= 1:
            for b in begun:
                on_result(self.send(b, recheck))
            return
        if self._pool is None:
            self._pool = ThreadPoolExecutor(
                max_workers=self.concurrency, thread_name_prefix=f"{self._name}-send"
            )
        pool = self._pool
        futures = [pool.submit(self._send_to, b, recheck, on_result) for b in begun]
        for future in futures:
            future.result()

    def _send_to(self, begun: Begun, recheck: Recheck, on_result: OnResult) -> None:
        on_result(self.send(begun, recheck))

    def send(self, begun: Begun, recheck: Recheck) -> SendResult:
        """`_send` with the occurrence bound to every record logged meanwhile (by the
        providers and the failover too): reminder_id, run_time_utc, attempt."""
        token = DELIVERY.set(
            {
                "reminder_id": begun.occurrence.reminder_id,
                "run_time_utc": begun.chosen,
                "attempt": begun.message.receive_count,
            }
        )
        try:
            return self._send(begun, recheck)
        finally:
            DELIVERY.reset(token)

    def _send(self, begun: Begun, recheck: Recheck) -> SendResult:
        if self._stop.is_set():
            return SendResult(begun, Outcome.RELEASED, hide_for_s=0.0)
        if begun.accepted is not None:
            return self._recovered(begun, begun.accepted)
        if recheck.withdrawn(begun):
            log.info(
                "delivery withdrawn: the reminder changed during its batch; handed back to"
                " be decided again",
                extra=_fields(begun, None),
            )
            return SendResult(begun, Outcome.RELEASED, hide_for_s=0.0, withdrawn=True)
        attempt = _Attempt(begun)
        try:
            if begun.reminder.webhook_url is not None:
                receipt = self._call(attempt, self._webhook_call(attempt))
            else:
                email = self._email(attempt)
                receipt = self._call(
                    attempt, lambda key: self._provider.send(email, idempotency_key=key)
                )
        except (TransientDeliveryError, InfrastructureError) as exc:
            return self._to_retry(attempt, exc)
        except ShutdownRequested:
            return self._result(attempt, Outcome.RETRY, hide_for_s=0.0,
                                error=ShutdownRequested("shutting down"))  # fmt: skip
        except PermanentDeliveryError as exc:
            fields = _fields(
                begun, self._provider_of(attempt), error=exc, provider_calls=attempt.calls
            )
            log.error("delivery failed", extra=fields)
            return self._result(attempt, Outcome.FAILED, error=exc)
        except Exception as exc:
            # A defect, not a provider answer: treat it as transient so that the message
            # comes back (and ends in the dead-letter queue if it keeps failing) while the
            # rest of the batch is completed.
            log.exception("delivery error", extra=_fields(begun, self._provider_of(attempt)))
            return self._to_retry(attempt, exc)
        sent_at = attempt.accepted_at or self._clock()
        return self._result(attempt, Outcome.SENT, receipt=receipt, sent_at=sent_at)

    def _evidence(self, attempt: _Attempt) -> SendReceipt | None:
        """Before retrying an ambiguous failure: the provider's evidence that it took the
        request whose answer was lost (its webhook wrote it on the row meanwhile), as the
        receipt to record instead of sending again; None without evidence."""
        begun = attempt.begun
        with self._engine.connect() as conn:
            evidence = delivery_log.get_evidence(conn, lease=begun.lease)
        if evidence is None:
            return None
        receipt = SendReceipt(
            provider=evidence.provider, provider_message_id=evidence.provider_message_id
        )
        self._log_recovered(begun, receipt)
        attempt.accepted_at = evidence.sent_at
        return receipt

    def _log_recovered(self, begun: Begun, receipt: SendReceipt) -> None:
        SENDS_RECOVERED.labels(provider=receipt.provider).inc()
        log.info(
            "send recovered from provider feedback: the provider accepted it before its"
            " sender recorded it; recorded sent without sending again",
            extra=_fields(begun, receipt.provider, idempotency_key=begun.key,
                          provider_message_id=receipt.provider_message_id),
        )  # fmt: skip

    def _recovered(self, begun: Begun, receipt: SendReceipt) -> SendResult:
        """The provider already accepted this email (its webhook said so while the row
        was `sending`: its sender died or lost the answer): record it sent as the provider
        reported, with no provider call, whatever the reminder became since (the email
        went out). Counted in `reminders_sends_recovered_total`, logged "send recovered
        from provider feedback"."""
        self._log_recovered(begun, receipt)
        # The address this occurrence goes to; the provider's event names it only as the
        # fallback (it is the provider's word, and a profile may be gone).
        recipient = (begun.profile.email if begun.profile else None) or begun.accepted_to
        return SendResult(
            begun, Outcome.SENT, attempts=0, receipt=receipt, recipient=recipient,
            sent_at=begun.accepted_at or self._clock(), provider=receipt.provider,
        )  # fmt: skip

    def _email(self, attempt: _Attempt) -> OutgoingEmail:
        """Render the email from the reminder as read at begin (title and body at send
        time, docs/design.md, "A cancel or change wins").

        Raises:
            PermanentDeliveryError: no profile, no zone, or the template fails.
        """
        begun = attempt.begun
        reminder, profile = begun.reminder, begun.profile
        if profile is None:
            raise PermanentDeliveryError(f"no profile for user {reminder.user_id!r}")
        if begun.zone is None:
            raise PermanentDeliveryError(f"unknown time zone {reminder.timezone!r}")
        attempt.recipient = profile.email
        links: dict[str, str] = {}
        headers: tuple[tuple[str, str], ...] = ()
        if self._links is not None:
            # The same links on every attempt: the same payload under the key (links.py).
            links = self._links.links(
                reminder_id=reminder.id, occurrence=begun.chosen, user_id=reminder.user_id,
                now=issued_at(begun.chosen, self._clock()),
            )  # fmt: skip
            # RFC 8058 §3.1: one-click unsubscribe, the stop link POSTed by the mail client.
            headers = (
                ("List-Unsubscribe", f"<{links[LinkAction.STOP.value]}>"),
                ("List-Unsubscribe-Post", "List-Unsubscribe=One-Click"),
            )
        rendered = self._renderer.render(
            reminder.template, reminder_id=str(reminder.id), title=reminder.title,
            body=reminder.body, run_time_utc=begun.chosen, timezone=begun.zone.key,
            recipient=profile.email, links=links,
        )  # fmt: skip
        return OutgoingEmail(
            to=profile.email, sender=self.mail_from, subject=rendered.subject,
            text=rendered.text, html=rendered.html, headers=headers,
        )  # fmt: skip

    def _webhook_call(self, attempt: _Attempt) -> Callable[[str], SendReceipt]:
        """The POST of a reminder of the webhook channel, as `_call` makes it.

        Raises:
            PermanentDeliveryError: no webhook channel in this sender, or no zone.
        """
        begun = attempt.begun
        reminder = begun.reminder
        if self._webhooks is None:
            raise PermanentDeliveryError("this sender has no webhook channel")
        if begun.zone is None:
            raise PermanentDeliveryError(f"unknown time zone {reminder.timezone!r}")
        assert reminder.webhook_url is not None  # the caller's test
        assert reminder.webhook_secret is not None  # NOT NULL with the url
        attempt.recipient = reminder.webhook_url
        local = begun.chosen.astimezone(begun.zone)
        delivery = WebhookDelivery(
            url=reminder.webhook_url,
            secret=reminder.webhook_secret,
            data={
                "reminder_id": str(reminder.id),
                "occurrence_utc": begun.chosen.isoformat().replace("+00:00", "Z"),
                "occurrence_local": local.strftime("%Y-%m-%dT%H:%M:%S"),
                "timezone": begun.zone.key,
                "title": reminder.title,
                "body": reminder.body,
                "user_id": reminder.user_id,
            },
        )
        webhooks = self._webhooks
        return lambda key: webhooks.send(delivery, idempotency_key=key, now=self._clock())

    def _call(self, attempt: _Attempt, send: Callable[[str], SendReceipt]) -> SendReceipt:
        """Call the provider (`send(idempotency_key)`), retrying transient errors in
        process.

        Raises:
            TransientDeliveryError: still failing when the budget ran out.
            PermanentDeliveryError, ShutdownRequested.
        """
        begun = attempt.begun
        if begun.pinned is not None and self._failover is not None:
            # An earlier attempt (maybe another worker's) may have reached this provider:
            # only it can deduplicate the key.
            self._failover.pin(begun.key, begun.pinned)
        if begun.taken_over:
            self._possible_duplicate(attempt)
        started = time.monotonic()
        try:
            attempt.calls += 1
            return send(begun.key)
        except TransientDeliveryError as first:
            if begun.leaseless:
                # A retry needs a row (the provider an ambiguous call may have reached is
                # pinned on it, evidence lands on it): lease the occurrence now, or hand
                # the message back if another copy has a row (its holder goes on).
                leased = self._lease(begun) if self._lease is not None else None
                if leased is None:
                    raise
                attempt.begun = begun = leased
            failed = [first]
        # The retry loop starts only after a failure (building it costs more than an
        # in-process send); its first attempt re-raises that failure, so tenacity sees
        # the same attempts, waits and stop as for a plain loop.
        for retrying in self._retrying(started, attempt):
            with retrying:
                if failed:
                    raise failed.pop()
                if attempt.ambiguous and (evidence := self._evidence(attempt)) is not None:
                    return evidence
                attempt.calls += 1
                return send(begun.key)
        raise AssertionError("tenacity ended without an outcome")  # pragma: no cover

    def _possible_duplicate(self, attempt: _Attempt) -> None:
        """Count and log a send of a row taken over from a sender that died with its
        outcome unknown: if that sender's call was accepted, a provider that does not
        deduplicate on the key delivers this one too (docs/operations.md "Delivery
        guarantees")."""
        provider = self._provider_of(attempt)
        POSSIBLE_DUPLICATES.labels(provider=provider).inc()
        log.warning(
            "possible duplicate: sending again an occurrence whose sender died with its"
            " outcome unknown (same idempotency key; a provider that ignores the key may"
            " deliver it twice)",
            extra=_fields(attempt.begun, provider, idempotency_key=attempt.begun.key),
        )

    def _retrying(self, started: float, attempt: _Attempt) -> Retrying:
        """tenacity's loop for one send whose first call started at `started`
        (time.monotonic()): the delivery budget counts from there. Before each wait, an
        ambiguous failure's provider is recorded on the delivery row (see `_pin`)."""
        policy = self.retry

        def from_first_call(state: RetryCallState) -> None:
            state.start_time = started

        def before_sleep(state: RetryCallState) -> None:
            failure = state.outcome.exception() if state.outcome is not None else None
            attempt.ambiguous = bool(getattr(failure, "ambiguous", False))
            self._pin(attempt)

        return Retrying(
            before=from_first_call,
            before_sleep=before_sleep,
            retry=retry_if_exception_type(TransientDeliveryError),
            stop=lambda state: should_stop(policy, state),
            wait=lambda state: next_wait_s(policy, state),
            sleep=self._sleep,
            reraise=True,
        )

    def _pinned_now(self, begun: Begun) -> str | None:
        return self._failover.pinned_provider(begun.key) if self._failover is not None else None

    def _provider_of(self, attempt: _Attempt) -> str:
        if attempt.begun.reminder.webhook_url is not None:
            return WebhookChannel.name
        return self._pinned_now(attempt.begun) or self._provider.name

    def _failed_provider(self, attempt: _Attempt) -> str | None:
        """The provider of an attempt with no receipt: the webhook channel's name for a
        webhook delivery (its metrics and failures are its own), else None (the settle
        stage names the sender's provider)."""
        return WebhookChannel.name if attempt.begun.reminder.webhook_url is not None else None

    def _pin(self, attempt: _Attempt) -> None:
        """Record on the delivery row the provider that an ambiguous attempt may have
        reached, so a worker taking the row over after a crash sends there, not to a
        backup that cannot deduplicate the key (docs/design.md, "Provider failover")."""
        begun = attempt.begun
        pinned = self._pinned_now(begun)
        if pinned is None or pinned == attempt.pinned:
            return
        with self._engine.begin() as conn:
            delivery_log.pin_provider(conn, lease=begun.lease, provider=pinned)
        attempt.pinned = pinned

    def _sleep(self, seconds: float) -> None:
        """Wait between retries; a shutdown ends the wait (ShutdownRequested)."""
        if self._stop.wait(seconds):
            raise ShutdownRequested

    def _to_retry(self, attempt: _Attempt, exc: Exception) -> SendResult:
        """Hide the message for a backoff (Retry-After wins); the next receive retries it,
        up to the queue's maximum receive count (then the DLQ)."""
        begun = attempt.begun
        hide = requeue_delay_s(
            self.retry, begun.message.receive_count, getattr(exc, "retry_after_s", None)
        )
        log.warning(
            "delivery retry",
            extra=_fields(begun, self._provider_of(attempt), retry_in_s=hide, error=exc,
                          provider_calls=attempt.calls),
        )  # fmt: skip
        return self._result(attempt, Outcome.RETRY, hide_for_s=hide, error=exc)

    def _result(
        self,
        attempt: _Attempt,
        outcome: Outcome,
        *,
        receipt: SendReceipt | None = None,
        sent_at: datetime | None = None,
        hide_for_s: float | None = None,
        error: Exception | None = None,
    ) -> SendResult:
        return SendResult(
            attempt.begun, outcome, attempts=attempt.calls, receipt=receipt,
            recipient=attempt.recipient, sent_at=sent_at, error=error, hide_for_s=hide_for_s,
            provider=receipt.provider if receipt else self._failed_provider(attempt),
            pinned=self._pinned_now(attempt.begun),
        )  # fmt: skip

    def close(self) -> None:
        """Stop the send threads (waits for the calls under way)."""
        if self._pool is not None:
            self._pool.shutdown(wait=True)


def _fields(begun: Begun, provider: str | None, **more: object) -> dict[str, object]:
    """`delivery_fields` of the occurrence being sent; `attempt` is the receive count."""
    return delivery_fields(
        begun.occurrence.reminder_id, begun.chosen, begun.message.receive_count, provider,
        **more,
    )  # fmt: skip
