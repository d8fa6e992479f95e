"""/v1/reminders: create (idempotent), read, list (cursor), cancel."""

from __future__ import annotations

import base64
import binascii
import hashlib
import json
import uuid
from datetime import datetime
from typing import Annotated

from fastapi import APIRouter, Depends, Header, Query, Response, status
from sqlalchemy.orm import Session

from reminder_api import repository
from reminder_api.deps import AppContext, context, current_user, db_session
from reminder_api.schemas import MAX_REQUEST_ID, ReminderCreate, ReminderOut, ReminderPage
from reminder_core.db.models import Reminder
from reminder_core.domain.localtime import load_zone, parse_start_local
from reminder_core.domain.schedule import first_run_utc
from reminder_core.domain.states import ReminderStatus
from reminder_core.errors import Conflict, InvalidInput, InvalidSchedule, NotFound

router = APIRouter(prefix="/v1/reminders", tags=["reminders"])

User = Annotated[str, Depends(current_user)]
Ctx = Annotated[AppContext, Depends(context)]
Db = Annotated[Session, Depends(db_session)]


def to_out(r: Reminder) -> ReminderOut:
    return ReminderOut(
        id=r.id,
        title=r.title,
        body=r.body,
        start_local=r.start_local.isoformat(timespec="seconds"),
        timezone=r.timezone,
        status=ReminderStatus(r.status),
        next_run_utc=r.next_run_utc,
        version=r.version,
        client_request_id=r.client_request_id,
        last_error=r.last_error,
        created_at=r.created_at,
        updated_at=r.updated_at,
    )


def etag(r: Reminder) -> str:
    return f'"{r.version}"'


def fingerprint(payload: ReminderCreate) -> str:
    """Hash of the request body without its idempotency key (same key + other body → 409)."""
    canonical = json.dumps(payload.model_dump(exclude={"client_request_id"}), sort_keys=True)
    return hashlib.sha256(canonical.encode()).hexdigest()


@router.post(
    "",
    status_code=status.HTTP_201_CREATED,
    response_model=ReminderOut,
    responses={
        200: {"description": "Idempotent replay: the reminder created earlier"},
        409: {"description": "Idempotency key reused with another body"},
        422: {"description": "Invalid field (problem+json names it)"},
    },
)
def create_reminder(
    payload: ReminderCreate,
    response: Response,
    user_id: User,
    ctx: Ctx,
    session: Db,
    idempotency_key: Annotated[
        str | None, Header(alias="Idempotency-Key", min_length=1, max_length=MAX_REQUEST_ID)
    ] = None,
) -> ReminderOut:
    """Create a one-time reminder; one transaction, no provider call (DESIGN §4.1).

    Idempotent on `client_request_id` or the `Idempotency-Key` header: the same key and
    body return the reminder created first (200); the same key with another body is 409.
    """
    key = payload.client_request_id or idempotency_key
    if (
        payload.client_request_id
        and idempotency_key
        and payload.client_request_id != idempotency_key
    ):
        raise InvalidInput("client_request_id", "differs from the Idempotency-Key header")
    if "\x00" in (key or ""):
        raise InvalidInput("Idempotency-Key", "must not contain NUL characters")
    digest = fingerprint(payload)

    if key is not None:
        existing = repository.get_by_request_id(session, user_id, key)
        if existing is not None:
            return _replay(existing, digest, response)

    start_local = parse_start_local(payload.start_local)
    if payload.timezone is not None:
        zone = load_zone(payload.timezone)
    else:
        profile = ctx.profiles.get(user_id)
        if profile is None:
            raise InvalidSchedule(
                "timezone", "required: no profile timezone is known for this user"
            )
        zone = load_zone(profile.timezone, field="timezone")
    now = ctx.clock()
    next_run = first_run_utc(start_local, zone, now=now)

    created = repository.insert_reminder(
        session,
        {
            "user_id": user_id,
            "title": payload.title,
            "body": payload.body,
            "start_local": start_local,
            "timezone": payload.timezone,
            "next_run_utc": next_run,
            "status": ReminderStatus.PENDING.value,
            "client_request_id": key,
            "request_fingerprint": digest,
            "created_at": now,
            "updated_at": now,
        },
    )
    if created is None:  # a concurrent request with the same key won the race
        session.rollback()
        existing = repository.get_by_request_id(session, user_id, key or "")
        if existing is None:  # pragma: no cover - the conflict implies the row exists
            raise Conflict("idempotency key in use; retry")
        return _replay(existing, digest, response)
    session.commit()
    response.headers["ETag"] = etag(created)
    response.headers["Location"] = f"/v1/reminders/{created.id}"
    return to_out(created)


def _replay(existing: Reminder, digest: str, response: Response) -> ReminderOut:
    if existing.request_fingerprint != digest:
        raise Conflict("this idempotency key was already used with a different request body")
    response.status_code = status.HTTP_200_OK
    response.headers["Idempotent-Replayed"] = "true"
    response.headers["ETag"] = etag(existing)
    response.headers["Location"] = f"/v1/reminders/{existing.id}"
    return to_out(existing)


def encode_cursor(r: Reminder) -> str:
    raw = f"{r.created_at.isoformat()}|{r.id}".encode()
    return base64.urlsafe_b64encode(raw).decode().rstrip("=")


def decode_cursor(cursor: str) -> tuple[datetime, uuid.UUID]:
    """Inverse of `encode_cursor`.

    Raises:
        InvalidInput: ("cursor") not a cursor this API produced.
    """
    try:
        raw = base64.urlsafe_b64decode(cursor + "=" * (-len(cursor) % 4)).decode()
        created, rid = raw.split("|", 1)
        created_at = datetime.fromisoformat(created)
        if created_at.tzinfo is None:
            raise ValueError("naive")
        return created_at, uuid.UUID(rid)
    except (ValueError, UnicodeDecodeError, binascii.Error):
        raise InvalidInput("cursor", "is not a cursor returned by this API") from None


@router.get("", response_model=ReminderPage)
def list_reminders(
    user_id: User,
    session: Db,
    limit: Annotated[int, Query(ge=1, le=100)] = 50,
    cursor: Annotated[str | None, Query(max_length=200)] = None,
    status_: Annotated[list[ReminderStatus] | None, Query(alias="status")] = None,
) -> ReminderPage:
    """The user's reminders, newest first; `next_cursor` is null on the last page."""
    after = decode_cursor(cursor) if cursor else None
    rows = repository.list_page(session, user_id, limit=limit + 1, after=after, statuses=status_)
    page, more = rows[:limit], len(rows) > limit
    return ReminderPage(
        items=[to_out(r) for r in page],
        next_cursor=encode_cursor(page[-1]) if more and page else None,
    )


@router.get("/{reminder_id}", response_model=ReminderOut)
def get_reminder(
    reminder_id: uuid.UUID, response: Response, user_id: User, session: Db
) -> ReminderOut:
    """One reminder of the user; another user's id answers 404."""
    r = repository.get(session, user_id, reminder_id)
    if r is None:
        raise NotFound(f"reminder {reminder_id} not found")
    response.headers["ETag"] = etag(r)
    return to_out(r)


@router.delete("/{reminder_id}", response_model=ReminderOut)
def cancel_reminder(
    reminder_id: uuid.UUID, response: Response, user_id: User, ctx: Ctx, session: Db
) -> ReminderOut:
    """Cancel the reminder: nothing more is sent (an occurrence claimed but not yet sent
    is recorded `cancelled`). Cancelling twice is fine; a finished reminder is 409."""
    r = repository.cancel(session, user_id, reminder_id, ctx.clock())
    if r is None:
        current = repository.get(session, user_id, reminder_id)
        if current is None:
            raise NotFound(f"reminder {reminder_id} not found")
        if current.status != ReminderStatus.CANCELLED:
            raise Conflict(f"reminder is {current.status}; only live reminders can be cancelled")
        r = current
    else:
        session.commit()
    response.headers["ETag"] = etag(r)
    return to_out(r)
