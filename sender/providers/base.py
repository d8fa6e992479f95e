"""The provider interface: send one email under an idempotency key."""

from __future__ import annotations

from typing import Protocol, runtime_checkable

from reminder_core.record import record


@record
class OutgoingEmail:
    """A rendered email, ready for a provider.

    Attributes:
        to: recipient address.
        sender: From header value.
        subject: one line, no CR/LF.
        text: plain-text part.
        html: HTML part (already escaped by the template engine).
        headers: more header fields, (name, value) pairs of ASCII text: the
            List-Unsubscribe / List-Unsubscribe-Post pair of RFC 8058 when the email
            carries links.
    """

    to: str
    sender: str
    subject: str
    text: str
    html: str
    headers: tuple[tuple[str, str], ...] = ()


@record
class SendReceipt:
    """What the provider said: its name and the id it gave the message."""

    provider: str
    provider_message_id: str


class Provider(Protocol):
    """An email provider adapter.

    `send` must be idempotent on `idempotency_key` (reminder_id + run_time_utc,
    docs/design.md, "Exactly once per occurrence"): a second call with the same key
    delivers nothing new and returns the first receipt, wherever the provider supports it.
    """

    name: str

    def send(self, email: OutgoingEmail, *, idempotency_key: str) -> SendReceipt:
        """Hand `email` to the provider.

        Raises:
            TransientDeliveryError: try again later (timeouts, 429, 5xx), with
                retry_after_s when the provider said how long to wait.
            PermanentDeliveryError: never retry (rejected message or address).
        """
        ...


@runtime_checkable
class ChoosingProvider(Protocol):
    """A provider that chooses among several behind circuit breakers
    (sender/providers/failover.py): it says whether any may be called now, and can pin
    an idempotency key to the one an ambiguous attempt may have reached. The sender's
    stages look for these methods rather than import the failover module (pybreaker,
    redis) when no failover is configured."""

    def ready(self) -> bool:
        """False while every breaker is open and none is due for its probe."""
        ...

    def breaker_states(self) -> dict[str, str]:
        """{provider name: "closed" | "open" | "half-open"}, primary first."""
        ...

    def pinned_provider(self, idempotency_key: str) -> str | None:
        """The provider the key is pinned to, or None."""
        ...

    def pin(self, idempotency_key: str, provider_name: str) -> None:
        """Send every later attempt for the key to `provider_name` only."""
        ...


def deduplicates_keys(provider: Provider) -> bool:
    """True when `provider` itself delivers each idempotency key at most once (a repeat
    of a key delivers nothing new), as a provider says by a true `deduplicates_keys`
    attribute: Resend (24 hours, same payload), the file sink, and a failover or wrapper
    whose every provider does. SES and SMTP do not (no key reaches the recipient's
    side), nor does any provider that does not say so. The sender's first send of an
    occurrence skips its `sending` row only on such a provider (docs/design.md,
    "First sends without a lease")."""
    return getattr(provider, "deduplicates_keys", False) is True


def close_provider(provider: Provider) -> None:
    """Release what `provider` holds (connections, threads) by calling its `close()`, for
    providers that have one (a provider without it holds nothing to release). Wrappers
    (failover, instrumented) close what they wrap."""
    close = getattr(provider, "close", None)
    if callable(close):
        close()
