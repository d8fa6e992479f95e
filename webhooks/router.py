"""POST /v1/webhooks/{ses,resend,postmark}: read the raw body, verify it, parse it, and
apply every event it carries in one transaction (mounted by the API's create_app)."""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime
from typing import Any, Literal

import httpx
from fastapi import APIRouter, Request
from pydantic import BaseModel, Field, SecretStr
from sqlalchemy import Engine
from sqlalchemy.exc import InterfaceError, OperationalError
from starlette.concurrency import run_in_threadpool

from reminder_core.cell_directory import CellRouting
from reminder_core.errors import (
    InfrastructureError,
    MalformedBody,
    NotFound,
    PayloadTooLarge,
)
from reminder_core.settings import Settings
from webhooks.apply import ApplyResult, Evidence, apply_event, apply_evidence
from webhooks.cells import cell_engine
from webhooks.events import EventKind, WebhookEvent
from webhooks.postmark import check_basic_auth, parse_postmark_events
from webhooks.resend import ResendVerifier, parse_resend_events
from webhooks.sns import SnsVerifier, parse_ses_events

log = logging.getLogger(__name__)

PREFIX = "/v1/webhooks"


class WebhookAnswer(BaseModel):
    """The 200 answer of a webhook endpoint: the provider may stop retrying."""

    status: Literal["processed", "confirmed", "ignored"] = Field(
        description="`processed`: every event of the request was applied; `confirmed`: an"
        " SNS subscription was confirmed; `ignored`: verified, but nothing to apply."
    )
    events: int = Field(ge=0, description="Events the request carried and were applied.")
    duplicates: int = Field(
        ge=0, description="Of those, replays of events already applied (nothing changed)."
    )


#: The error statuses of the webhook routes, for the OpenAPI document (the API's handlers
#: answer each as application/problem+json; reminder_api.openapi adds that schema).
RETRY_AFTER = {
    "Retry-After": {
        "description": "Seconds to wait before retrying (RFC 9110 §10.2.3).",
        "required": True,
        "schema": {"type": "integer", "minimum": 0},
    }
}
COMMON_ERRORS: dict[int | str, dict[str, Any]] = {
    400: {"description": "The body is not JSON, or not the provider's documented shape."},
    404: {"description": "This provider's webhook is not configured (its WEBHOOK_* settings)."},
    413: {"description": "The body is over WEBHOOK_MAX_BODY_BYTES (default 1 MiB)."},
    503: {
        "description": "The database, or the SNS certificate host, cannot be reached or"
        " answers 5xx; the provider retries.",
        "headers": RETRY_AFTER,
    },
}
SES_ERRORS: dict[int | str, dict[str, Any]] = {
    **COMMON_ERRORS,
    401: {
        "description": "The SNS signature does not verify, or its certificate or"
        " SubscribeURL is not an https://sns.<region>.amazonaws.com URL serving one."
    },
    403: {"description": "A message from an SNS topic not in WEBHOOK_SNS_TOPIC_ARNS."},
}
RESEND_ERRORS: dict[int | str, dict[str, Any]] = {
    **COMMON_ERRORS,
    401: {
        "description": "The Svix signature (svix-id, svix-timestamp, svix-signature) is"
        " missing, malformed, outside the 5-minute tolerance or does not verify."
    },
}
POSTMARK_ERRORS: dict[int | str, dict[str, Any]] = {
    **COMMON_ERRORS,
    401: {
        "description": "Missing, malformed or wrong Basic credentials (RFC 7617).",
        "headers": {
            "WWW-Authenticate": {
                "description": "The Basic challenge (RFC 7617 §2).",
                "required": True,
                "schema": {"type": "string"},
            }
        },
    },
}


def raw_body(media_type: str, description: str) -> dict[str, Any]:
    """`openapi_extra` of a route that reads its body raw (verified before it is parsed)."""
    schema = {"type": "object"} if media_type == "application/json" else {"type": "string"}
    return {
        "requestBody": {
            "required": True,
            "description": description,
            "content": {media_type: {"schema": schema}},
        }
    }


@dataclass(frozen=True, slots=True)
class WebhookConfig:
    """What the webhook endpoints need from the settings.

    Attributes:
        sns_topic_arns: SNS topics accepted by /ses (empty: /ses answers 404).
        resend_secret: Resend signing secret (None: /resend answers 404).
        postmark_user, postmark_password: basic auth credentials (either None: /postmark
            answers 404).
        max_body_bytes: larger bodies answer 413.
    """

    sns_topic_arns: tuple[str, ...] = ()
    resend_secret: str | None = None
    postmark_user: str | None = None
    postmark_password: str | None = None
    max_body_bytes: int = 1024 * 1024

    @classmethod
    def from_settings(cls, settings: Settings) -> WebhookConfig:
        """Read WEBHOOK_* settings (secrets unwrapped here, kept out of reprs elsewhere)."""

        def secret(value: SecretStr | None) -> str | None:
            return value.get_secret_value() if value is not None else None

        return cls(
            sns_topic_arns=settings.webhook_sns_topic_arns,
            resend_secret=secret(settings.webhook_resend_secret),
            postmark_user=secret(settings.webhook_postmark_user),
            postmark_password=secret(settings.webhook_postmark_password),
            max_body_bytes=settings.webhook_max_body_bytes,
        )


def build_router(
    config: WebhookConfig,
    *,
    engine: Engine,
    clock: Callable[[], datetime],
    http: httpx.Client | None = None,
    cells: CellRouting | None = None,
) -> APIRouter:
    """The webhook endpoints, answering (errors as RFC 9457 problem+json by the API):

    - 200 `{"status": "processed", "events": N, "duplicates": D}` once every event of a
      verified request is applied (D of them were replays: nothing changed for those;
      unknown provider message ids are stored and acknowledged); `"confirmed"` for an SNS
      subscription confirmed; `"ignored"` for verified requests carrying nothing to apply.
    - 401 bad, missing, expired or malformed signature, or wrong basic auth (nothing read
      past the check, nothing changed), or an SNS certificate URL whose host does not
      exist or refuses it, or that serves no RSA certificate (the sender's fault); 403 an
      SNS notification from a topic that is not configured; 400 malformed body; 413 body
      over `max_body_bytes`; 404 a provider that is not configured; 503 the database, or
      the SNS certificate host, cannot be reached or answers 5xx (ours or AWS's fault: the
      provider retries; the problem's detail names which).

    Args:
        config: provider secrets and limits.
        engine: the database; each request applies its events in one transaction.
        clock: aware UTC now, for `received_at` and `updated_at`.
        http: client for SNS certificate and SubscribeURL requests (default: a new
            httpx.Client, made only when SNS is configured).
        cells: with CELLS, the cells: each event is applied in the cell of the delivery
            it is about (webhooks.cells.cell_engine), one transaction per cell.

    Raises:
        ValueError: the Resend secret is not a whsec_<base64> secret.
    """
    router = APIRouter(prefix=PREFIX, tags=["webhooks"])
    sns = (
        SnsVerifier(topic_arns=config.sns_topic_arns, http=http or httpx.Client())
        if config.sns_topic_arns
        else None
    )
    resend = ResendVerifier(config.resend_secret) if config.resend_secret else None
    postmark = (
        (config.postmark_user, config.postmark_password)
        if config.postmark_user and config.postmark_password
        else None
    )
    limit = config.max_body_bytes

    def by_cell(events: list[WebhookEvent]) -> list[tuple[Engine, list[WebhookEvent]]]:
        """The events grouped by the database they are applied in (one with one cell)."""
        if cells is None:
            return [(engine, events)]
        groups: dict[int, tuple[Engine, list[WebhookEvent]]] = {}
        for event in events:
            target = cell_engine(cells, event)
            groups.setdefault(id(target), (target, []))[1].append(event)
        return list(groups.values())

    def apply_all(events: list[WebhookEvent], body: bytes) -> WebhookAnswer:
        if not events:
            return WebhookAnswer(status="ignored", events=0, duplicates=0)
        now = clock()
        results: list[ApplyResult | Evidence] = []
        try:
            for target, group in by_cell(events):  # one transaction per cell
                with target.begin() as conn:
                    results += [
                        apply_evidence(conn, e, now=now)
                        if e.kind is EventKind.ACCEPTED
                        else apply_event(conn, e, raw_body=body, now=now)
                        for e in group
                    ]
        except (OperationalError, InterfaceError) as exc:
            raise InfrastructureError(
                f"database unavailable: {type(exc).__name__}", dependency="the database"
            ) from exc
        except ValueError as exc:  # apply_event: a hard bounce naming no recipient
            raise MalformedBody(str(exc)) from exc
        duplicates = sum(1 for r in results if isinstance(r, ApplyResult) and r.duplicate)
        log.info(
            "webhook %s: %d event(s) applied, %d duplicate(s)",
            events[0].provider,
            len(results) - duplicates,
            duplicates,
        )
        return WebhookAnswer(status="processed", events=len(results), duplicates=duplicates)

    def handle_ses(verifier: SnsVerifier, body: bytes) -> WebhookAnswer:
        receipt = verifier.receive(body)  # blocking: may fetch a certificate
        if receipt.action != "notification":
            return WebhookAnswer(status=receipt.action, events=0, duplicates=0)
        return apply_all(parse_ses_events(receipt.message), body)

    @router.post(
        "/ses",
        summary="Amazon SES sends, deliveries, bounces and complaints through Amazon SNS",
        response_model=WebhookAnswer,
        responses=SES_ERRORS,
        openapi_extra=raw_body(
            "text/plain",
            "An SNS HTTP(S) message (Notification, SubscriptionConfirmation or"
            " UnsubscribeConfirmation): JSON sent as text/plain, signed by SNS.",
        ),
    )
    async def ses(request: Request) -> WebhookAnswer:
        """An SNS HTTPS subscription of a topic that SES publishes feedback to."""
        if sns is None:
            raise NotFound("the SES webhook is not configured (WEBHOOK_SNS_TOPIC_ARNS)")
        body = await read_body(request, limit)
        return await run_in_threadpool(handle_ses, sns, body)

    @router.post(
        "/resend",
        summary="Resend sent, delivered, bounced and complained events (Svix signature)",
        response_model=WebhookAnswer,
        responses=RESEND_ERRORS,
        openapi_extra=raw_body(
            "application/json",
            "A Resend event, signed per Standard Webhooks in the svix-id, svix-timestamp"
            " and svix-signature headers.",
        ),
    )
    async def resend_webhook(request: Request) -> WebhookAnswer:
        """A Resend webhook endpoint subscribed to email.sent, email.bounced and
        email.complained (email.delivered is read too)."""
        if resend is None:
            raise NotFound("the Resend webhook is not configured (WEBHOOK_RESEND_SECRET)")
        body = await read_body(request, limit)
        event_id = resend.verify(body, dict(request.headers))
        events = parse_resend_events(event_id, body)
        return await run_in_threadpool(apply_all, events, body)

    @router.post(
        "/postmark",
        summary="Postmark bounces and spam complaints (basic auth)",
        response_model=WebhookAnswer,
        responses=POSTMARK_ERRORS,
        openapi_extra=raw_body("application/json", "A Postmark Bounce or SpamComplaint record."),
    )
    async def postmark_webhook(request: Request) -> WebhookAnswer:
        """A Postmark bounce / spam complaint webhook URL with basic auth credentials."""
        if postmark is None:
            raise NotFound(
                "the Postmark webhook is not configured "
                "(WEBHOOK_POSTMARK_USER, WEBHOOK_POSTMARK_PASSWORD)"
            )
        user, password = postmark
        check_basic_auth(request.headers.get("authorization"), user=user, password=password)
        body = await read_body(request, limit)
        return await run_in_threadpool(apply_all, parse_postmark_events(body), body)

    return router


async def read_body(request: Request, limit: int) -> bytes:
    """The raw request body, read up to `limit` bytes.

    Raises:
        PayloadTooLarge: a declared Content-Length or the bytes received exceed `limit`.
    """
    declared = request.headers.get("content-length", "")
    if declared.isdigit() and int(declared) > limit:
        raise PayloadTooLarge(f"webhook bodies are limited to {limit} bytes")
    chunks: list[bytes] = []
    size = 0
    async for chunk in request.stream():
        size += len(chunk)
        if size > limit:
            raise PayloadTooLarge(f"webhook bodies are limited to {limit} bytes")
        chunks.append(chunk)
    return b"".join(chunks)
