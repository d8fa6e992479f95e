"""The webhook channel: an occurrence delivered as an HTTP POST to a URL its user
registered, signed per Standard Webhooks (issue 17; docs/design.md, "Webhook channel").

Request: `POST <url>`, `Content-Type: application/json`, body
`{"type": "reminder.due", "timestamp": <RFC 3339>, "data": {...}}`, headers `webhook-id`
(our idempotency key: the same on every attempt, so the receiver deduplicates on it),
`webhook-timestamp` (Unix seconds of this attempt) and `webhook-signature`
(`v1,<base64 HMAC-SHA256>` of `id.timestamp.body`, made by the `standardwebhooks`
library with the endpoint's `whsec_` secret).

Every request goes through `reminder_core.destinations.check_destination` at send time
(after DNS resolution; it connects to the checked address, TLS still verified against the
host name) and never follows a redirect. Answers: 2xx accepted; 408, 425, 429 and 5xx
transient (Retry-After honoured); a redirect or any other 4xx permanent. Connection
errors are transient and not taken; a timeout or broken answer after the request was
sent is transient and ambiguous (the receiver may have it: it deduplicates on
`webhook-id`). One circuit breaker per destination host (pybreaker): a host that keeps
failing is not called for `reset_timeout_s`, without holding back the others.
"""

from __future__ import annotations

import json
import threading
from dataclasses import dataclass
from datetime import datetime

import httpx
import pybreaker
from standardwebhooks import Webhook

from reminder_core.destinations import (
    DestinationPolicy,
    DestinationRefused,
    Resolver,
    check_destination,
    system_resolver,
)
from reminder_core.errors import PermanentDeliveryError, TransientDeliveryError
from sender.providers.base import SendReceipt
from sender.providers.resend import parse_retry_after

NAME = "webhook"
TRANSIENT_STATUSES = frozenset({408, 425, 429})
#: How much of a refusing answer's body is kept in the error (for the delivery log).
ERROR_BODY_CHARS = 200


@dataclass(frozen=True, slots=True)
class WebhookDelivery:
    """One occurrence to POST: the endpoint's `url` and `secret` (whsec_...), and the
    event's `data` (JSON-ready)."""

    url: str
    secret: str
    data: dict[str, object]


class WebhookChannel:
    """Sends webhook deliveries (thread-safe: the sender's threads share it).

    Args:
        policy: the SSRF policy (WEBHOOK_CHANNEL_ALLOW_HTTP, _ALLOW_NETWORKS).
        timeout_s: connect and read timeout of one request, seconds.
        fail_max, reset_timeout_s: a host's breaker opens after `fail_max` transient
            failures in a row and lets a trial call through after `reset_timeout_s`.
        resolve: DNS (tests pass a fake resolver to map names to addresses).
        client: the HTTP client (default: a new one that never follows redirects).
    """

    name = NAME

    def __init__(
        self,
        policy: DestinationPolicy,
        *,
        timeout_s: float = 10.0,
        fail_max: int = 5,
        reset_timeout_s: float = 30.0,
        resolve: Resolver = system_resolver,
        client: httpx.Client | None = None,
    ) -> None:
        self.policy = policy
        self.fail_max = fail_max
        self.reset_timeout_s = reset_timeout_s
        self._resolve = resolve
        self._client = client or httpx.Client(
            timeout=httpx.Timeout(timeout_s), follow_redirects=False, trust_env=False
        )
        self._breakers: dict[str, pybreaker.CircuitBreaker] = {}
        self._lock = threading.Lock()

    def close(self) -> None:
        self._client.close()

    def breaker(self, host: str) -> pybreaker.CircuitBreaker:
        """The breaker of one destination host (made on first use)."""
        with self._lock:
            found = self._breakers.get(host)
            if found is None:
                found = self._breakers[host] = pybreaker.CircuitBreaker(
                    fail_max=self.fail_max,
                    reset_timeout=self.reset_timeout_s,
                    exclude=[PermanentDeliveryError],
                    name=f"webhook:{host}",
                )
            return found

    def send(
        self, delivery: WebhookDelivery, *, idempotency_key: str, now: datetime
    ) -> SendReceipt:
        """POST one delivery (see the module docstring).

        Args:
            now: aware; the `webhook-timestamp` and the event's `timestamp`.

        Returns:
            SendReceipt(provider "webhook", provider_message_id = the webhook-id).

        Raises:
            PermanentDeliveryError: the destination is refused (SSRF policy, a name that
                does not resolve to allowed addresses), a redirect, or a 4xx other than
                408/425/429.
            TransientDeliveryError: 408/425/429/5xx (with Retry-After), a connection
                failure, the host's breaker open; `ambiguous` after a timeout or broken
                answer once the request was sent.
        """
        try:
            destination = check_destination(delivery.url, self.policy, self._resolve)
        except DestinationRefused as exc:
            raise PermanentDeliveryError(f"webhook destination refused: {exc}") from None
        body = json.dumps(
            {
                "type": "reminder.due",
                "timestamp": now.isoformat().replace("+00:00", "Z"),
                "data": delivery.data,
            },
            separators=(",", ":"),
            ensure_ascii=False,
        )
        signature = Webhook(delivery.secret).sign(idempotency_key, now, body)
        host = f"[{destination.address}]" if ":" in destination.address else destination.address
        url = f"{destination.scheme}://{host}:{destination.port}{destination.target}"
        netloc = destination.host
        if destination.port != (443 if destination.scheme == "https" else 80):
            netloc = f"{netloc}:{destination.port}"
        headers = {
            "Host": netloc,
            "Content-Type": "application/json",
            "User-Agent": "reminders-webhook/1",
            "webhook-id": idempotency_key,
            "webhook-timestamp": str(int(now.timestamp())),
            "webhook-signature": signature,
        }
        breaker = self.breaker(destination.host)
        try:
            return breaker.call(
                self._post, url, headers, body.encode(), destination.host, idempotency_key
            )
        except pybreaker.CircuitBreakerError:
            raise TransientDeliveryError(
                f"webhook: the breaker of {destination.host} is open (failing host)",
                retry_after_s=self.reset_timeout_s,
            ) from None

    def _post(
        self, url: str, headers: dict[str, str], body: bytes, server_name: str, key: str
    ) -> SendReceipt:
        try:
            response = self._client.post(
                url, content=body, headers=headers, extensions={"sni_hostname": server_name}
            )
        except (httpx.ConnectError, httpx.ConnectTimeout, httpx.PoolTimeout) as exc:
            raise TransientDeliveryError(f"webhook: cannot connect: {exc!r}") from exc
        except httpx.TransportError as exc:  # after the request went out: it may have it
            raise TransientDeliveryError(
                f"webhook: no answer after sending: {exc!r}", ambiguous=True
            ) from exc
        status = response.status_code
        if 200 <= status < 300:
            return SendReceipt(provider=NAME, provider_message_id=key)
        detail = response.text[:ERROR_BODY_CHARS]
        if 300 <= status < 400:
            raise PermanentDeliveryError(f"webhook: redirect {status} refused (not followed)")
        if status in TRANSIENT_STATUSES or status >= 500:
            raise TransientDeliveryError(
                f"webhook: {status} {detail}",
                retry_after_s=parse_retry_after(response.headers.get("retry-after")),
            )
        raise PermanentDeliveryError(f"webhook: {status} {detail}")
