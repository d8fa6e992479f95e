"""The provider interface: send one email under an idempotency key."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol


@dataclass(frozen=True, slots=True)
class OutgoingEmail:
    """A rendered email, ready for a provider.

    Attributes:
        to: recipient address.
        sender: From header value.
        subject: one line, no CR/LF.
        text: plain-text part.
        html: HTML part (already escaped by the template engine).
    """

    to: str
    sender: str
    subject: str
    text: str
    html: str


@dataclass(frozen=True, slots=True)
class SendReceipt:
    """What the provider said: its name and the id it gave the message."""

    provider: str
    provider_message_id: str


class Provider(Protocol):
    """An email provider adapter.

    `send` must be idempotent on `idempotency_key` (reminder_id + run_time_utc, DESIGN
    §4.3): a second call with the same key delivers nothing new and returns the first
    receipt, wherever the provider supports it.
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


def close_provider(provider: Provider) -> None:
    """Release what `provider` holds (connections, threads) by calling its `close()`, for
    providers that have one (a provider without it holds nothing to release). Wrappers
    (failover, instrumented) close what they wrap."""
    close = getattr(provider, "close", None)
    if callable(close):
        close()
