"""The webhook channel's destinations (issue 17; docs/design.md, "Webhook channel"):
register, list and delete the URLs a user's reminders may be POSTed to. A reminder
created with `webhook_endpoint_id` is delivered there, signed per Standard Webhooks with
the endpoint's secret, instead of by email."""

from __future__ import annotations

import base64
import secrets
import uuid
from datetime import datetime
from typing import Annotated

from fastapi import APIRouter, Depends, Response, status
from pydantic import BaseModel, Field

from reminder_api.deps import AppContext, context, current_user, in_worker_thread
from reminder_api.openapi import problem_responses
from reminder_core.destinations import DestinationRefused, check_destination
from reminder_core.errors import Conflict, InvalidInput, NotFound
from reminder_core.store import reminders as reminder_store
from reminder_core.store import webhook_endpoints
from reminder_core.store.webhook_endpoints import WebhookEndpointRow

router = APIRouter(tags=["webhook channel"])
User = Annotated[str, Depends(current_user)]
Ctx = Annotated[AppContext, Depends(context)]

#: Bytes of a new signing secret (Standard Webhooks: 24 to 64 bytes, base64 after whsec_).
SECRET_BYTES = 32


class WebhookEndpointIn(BaseModel):
    """Body of POST /v1/webhook-endpoints."""

    model_config = {"extra": "forbid"}

    url: str = Field(
        description="Where to POST: an https URL of at most 2,000 characters whose host"
        " resolves only to public addresses (the operator may allow http and private"
        " networks).",
        examples=["https://hooks.example.com/reminders"],
    )


class WebhookEndpointOut(BaseModel):
    """A registered endpoint and the secret its requests are signed with."""

    id: uuid.UUID
    url: str
    secret: str = Field(
        description="The Standard Webhooks signing secret (whsec_<base64>): verify"
        " `webhook-signature` with it (e.g. the standardwebhooks or svix library)."
    )
    created_at: datetime


def _out(row: WebhookEndpointRow) -> WebhookEndpointOut:
    return WebhookEndpointOut(id=row.id, url=row.url, secret=row.secret, created_at=row.created_at)


@router.post(
    "/v1/webhook-endpoints",
    status_code=status.HTTP_201_CREATED,
    response_model=WebhookEndpointOut,
    summary="Register a webhook endpoint",
    responses=problem_responses(409),
)
@in_worker_thread
def create_endpoint(payload: WebhookEndpointIn, user_id: User, ctx: Ctx) -> WebhookEndpointOut:
    """Register `url` (checked against the SSRF policy now, and again at every send after
    DNS resolution) with a new signing secret. 422 names why a URL is refused; 409 when
    the user has WEBHOOK_CHANNEL_MAX_ENDPOINTS already."""
    try:
        check_destination(payload.url, ctx.settings.destination_policy())
    except DestinationRefused as exc:
        raise InvalidInput("url", str(exc)) from None
    secret = "whsec_" + base64.b64encode(secrets.token_bytes(SECRET_BYTES)).decode()
    limit = ctx.settings.webhook_channel_max_endpoints
    with ctx.connect(user_id) as conn:
        reminder_store.lock_owner(conn, user_id=user_id)  # the count and insert: one at a time
        row = webhook_endpoints.insert(
            conn, user_id=user_id, url=payload.url, secret=secret, now=ctx.clock(),
            max_per_user=limit,
        )  # fmt: skip
        if row is None:
            raise Conflict(f"at most {limit} webhook endpoints per user (delete one first)")
        conn.commit()
    return _out(row)


@router.get(
    "/v1/webhook-endpoints",
    response_model=list[WebhookEndpointOut],
    summary="List your webhook endpoints",
)
@in_worker_thread
def list_endpoints(user_id: User, ctx: Ctx) -> list[WebhookEndpointOut]:
    """The user's endpoints, oldest first."""
    with ctx.connect(user_id, reads_only=True) as conn:
        return [_out(r) for r in webhook_endpoints.list_for(conn, user_id=user_id)]


@router.delete(
    "/v1/webhook-endpoints/{endpoint_id}",
    status_code=status.HTTP_204_NO_CONTENT,
    response_class=Response,
    summary="Delete a webhook endpoint",
    responses={204: {"description": "Deleted."}, **problem_responses(404)},
)
@in_worker_thread
def delete_endpoint(endpoint_id: uuid.UUID, user_id: User, ctx: Ctx) -> Response:
    """Delete the endpoint; reminders that were delivered there go back to email."""
    with ctx.connect(user_id) as conn:
        if not webhook_endpoints.delete(conn, user_id=user_id, endpoint_id=endpoint_id):
            raise NotFound(f"webhook endpoint {endpoint_id} not found")
        conn.commit()
    return Response(status_code=status.HTTP_204_NO_CONTENT)
