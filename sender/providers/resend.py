"""Resend HTTP API provider: POST /emails with an Idempotency-Key header, over the
aiohttp-backed client of sender/providers/http.py.

Resend documents: `POST https://api.resend.com/emails` with `Authorization: Bearer <key>`
and JSON {from, to, subject, html, text, tags: [{name, value}]}; success 200 {"id": "..."}; the
`Idempotency-Key` header (up to 256 characters, kept 24 hours) makes a retry with the
same key return the first result instead of sending again; 429 carries `Retry-After`.
The test suite's fake provider speaks the same protocol.
"""

from __future__ import annotations

import json
from datetime import UTC, datetime
from email.utils import parsedate_to_datetime

from reminder_core.domain.localtime import CELL_TAG, KEY_TAG
from reminder_core.errors import PermanentDeliveryError, TransientDeliveryError
from reminder_core.settings import Settings
from sender.providers.base import OutgoingEmail, SendReceipt
from sender.providers.http import NO_ANSWER_ERRORS, NOT_SENT_ERRORS, HttpClient

#: Statuses that prove the message was not taken and a retry may succeed.
RETRYABLE = frozenset({408, 409, 425, 429, 500, 502, 503, 504})
#: Credentials or plan problems: not the message's fault; retry (then dead-letter, replay).
OPERATOR_ERRORS = frozenset({401, 403})


def parse_retry_after(value: str | None, *, now: datetime | None = None) -> float | None:
    """Seconds to wait from a Retry-After header (RFC 9110 §10.2.3: delay-seconds or an
    HTTP-date); None when absent or unreadable; never negative."""
    if not value:
        return None
    value = value.strip()
    if value.isascii() and value.isdigit():
        return float(value)
    try:
        when = parsedate_to_datetime(value)
    except (TypeError, ValueError):
        return None
    if when.tzinfo is None:
        when = when.replace(tzinfo=UTC)
    return max(0.0, (when - (now or datetime.now(UTC))).total_seconds())


class ResendProvider:
    """Sends through the Resend API (or anything speaking it, such as the test fake).

    Args:
        base_url: e.g. "https://api.resend.com".
        api_key: bearer token.
        connect_timeout_s: seconds to get a connection (PROVIDER_CONNECT_TIMEOUT_S).
        read_timeout_s: seconds to wait for each read of the answer
            (PROVIDER_READ_TIMEOUT_S).
        max_connections: keep-alive connections to the API (at least the sender's
            SENDER_CONCURRENCY, or calls wait for a free one).
        name: provider name recorded on delivery rows.

    Side effects: starts the HTTP client's event-loop thread; `close()` stops it.
    """

    #: Resend delivers a key once for 24 hours: a repeat with the same payload gets the
    #: first answer, a different payload 409 (https://resend.com/docs/dashboard/emails/
    #: idempotency-keys); providers.base.deduplicates_keys.
    deduplicates_keys = True

    def __init__(
        self,
        *,
        base_url: str,
        api_key: str,
        connect_timeout_s: float = 5.0,
        read_timeout_s: float = 30.0,
        max_connections: int = 20,
        name: str = "resend",
        cell: str | None = None,
    ) -> None:
        self._url = base_url.rstrip("/") + "/emails"
        self._api_key = api_key
        self.name = name
        self._tags = [{"name": CELL_TAG, "value": cell}] if cell is not None else []
        self._client = HttpClient(
            connect_timeout_s=connect_timeout_s,
            read_timeout_s=read_timeout_s,
            max_connections=max_connections,
            name=f"{name}-http",
        )

    @classmethod
    def from_settings(cls, settings: Settings) -> ResendProvider:
        """From RESEND_API_URL, RESEND_API_KEY, PROVIDER_CONNECT_TIMEOUT_S,
        PROVIDER_READ_TIMEOUT_S and SENDER_CONCURRENCY.

        Raises:
            ValueError: RESEND_API_KEY is not set.
        """
        if not settings.resend_api_key:
            raise ValueError("EMAIL_PROVIDER=resend needs RESEND_API_KEY")
        return cls(
            base_url=settings.resend_api_url,
            api_key=settings.resend_api_key,
            connect_timeout_s=settings.provider_connect_timeout_s,
            read_timeout_s=settings.provider_read_timeout_s,
            max_connections=max(20, settings.sender_concurrency),
            cell=settings.cell if settings.cells else None,  # a cell's sender tags its cell
        )

    def close(self) -> None:
        """Close the keep-alive connections and the client's thread. Idempotent."""
        self._client.close()

    def send(self, email: OutgoingEmail, *, idempotency_key: str) -> SendReceipt:
        """POST the email; see the module docstring for the protocol.

        Raises:
            TransientDeliveryError: connection failure (not taken), 408/425/429/5xx
                (not taken; with Retry-After), 401/403 (operator must fix the key), or a
                timeout/broken response after the request was sent, a 2xx without a
                non-empty string `id`, or 409 (the key is already known to Resend)
                (`ambiguous`).
            PermanentDeliveryError: any other 4xx (the message or address is invalid).
        """
        try:
            response = self._client.post_json(
                self._url,
                {
                    "from": email.sender,
                    "to": [email.to],
                    "subject": email.subject,
                    "text": email.text,
                    "html": email.html,
                    # Resend tags allow ASCII letters, digits, "_" and "-" (up to 256),
                    # which our keys are made of. Resend publishes them with every
                    # webhook event (email.sent, ...): how the webhook endpoint finds the
                    # delivery of a send whose sender died before it learnt the answer
                    # (docs/operations.md "Delivery guarantees").
                    # With CELLS, the `cell` tag too: the webhook applies the event
                    # there (webhooks.cells).
                    "tags": [{"name": KEY_TAG, "value": idempotency_key}, *self._tags],
                    # Resend's `headers` object: custom header fields (RFC 8058's pair).
                    **({"headers": dict(email.headers)} if email.headers else {}),
                },
                headers={
                    "Authorization": f"Bearer {self._api_key}",
                    "Idempotency-Key": idempotency_key,
                },
            )
        except NOT_SENT_ERRORS as exc:
            raise TransientDeliveryError(f"{self.name}: cannot connect: {exc!r}") from exc
        except NO_ANSWER_ERRORS as exc:
            raise TransientDeliveryError(
                f"{self.name}: no answer after sending: {exc!r}", ambiguous=True
            ) from exc
        status = response.status
        if status < 300:
            try:
                message_id = json.loads(response.body)["id"]
            except (ValueError, KeyError, TypeError, RecursionError) as exc:
                message_id = exc  # RecursionError: JSON nested deeper than Python parses
            if not isinstance(message_id, str) or not message_id:
                # Resend answers {"id": "<uuid>"}: anything else says nothing of the
                # message, which it may have taken (a retry stays on this provider).
                raise TransientDeliveryError(
                    f"{self.name}: unreadable success answer {response.text[:200]!r}",
                    ambiguous=True,
                ) from (message_id if isinstance(message_id, Exception) else None)
            return SendReceipt(provider=self.name, provider_message_id=message_id)
        detail = f"{self.name}: HTTP {status}: {response.text[:300]}"
        if status in RETRYABLE or status >= 500 or status in OPERATOR_ERRORS:
            raise TransientDeliveryError(
                detail,
                retry_after_s=parse_retry_after(response.headers.get("retry-after")),
                # 409: Resend already holds this Idempotency-Key (a request with it is in
                # progress, or had another payload): it may have the message, so a retry
                # must stay on this provider (no failover).
                ambiguous=status == 409,
            )
        raise PermanentDeliveryError(detail)
