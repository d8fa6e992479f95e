"""/v1/reminders: create (idempotent), read, list (cursor), change (If-Match), pause,
resume, cancel, the occurrence preview of a saved reminder and its delivery log."""

from __future__ import annotations

import base64
import binascii
import hashlib
import json
import uuid
from datetime import datetime
from typing import Annotated
from zoneinfo import ZoneInfo

from fastapi import APIRouter, Depends, Header, Query, Response, status
from sqlalchemy.orm import Session

from reminder_api import repository
from reminder_api.deps import AppContext, context, current_user, db_session
from reminder_api.schedules import (
    first_run,
    format_local,
    occurrence_list,
    parse_schedule,
    schedule_of,
    stored_of,
)
from reminder_api.schemas import (
    MAX_REQUEST_ID,
    DeliveryOut,
    DeliveryPage,
    DstPolicy,
    MisfirePolicy,
    OccurrenceList,
    ReminderCreate,
    ReminderOut,
    ReminderPage,
    ReminderPatch,
)
from reminder_core.db.models import Reminder
from reminder_core.domain.recurrence import next_occurrence
from reminder_core.domain.states import DeliveryStatus, ReminderStatus
from reminder_core.errors import (
    Conflict,
    InvalidInput,
    InvalidSchedule,
    NotFound,
    PreconditionFailed,
)
from reminder_core.profiles import Profile
from reminder_core.scheduling import zone_for

router = APIRouter(prefix="/v1/reminders", tags=["reminders"])

User = Annotated[str, Depends(current_user)]
Ctx = Annotated[AppContext, Depends(context)]
Db = Annotated[Session, Depends(db_session)]

LIVE = (ReminderStatus.PENDING, ReminderStatus.CLAIMED, ReminderStatus.PAUSED)


def to_out(r: Reminder) -> ReminderOut:
    return ReminderOut(
        id=r.id,
        title=r.title,
        body=r.body,
        start_local=format_local(r.start_local, r.all_day),
        timezone=r.timezone,
        rrule=r.rrule,
        exdates=[format_local(d, r.all_day) for d in r.exdates or ()],
        all_day=r.all_day,
        dst=DstPolicy(nonexistent=r.dst_nonexistent, ambiguous=r.dst_ambiguous),  # type: ignore[arg-type]
        misfire=MisfirePolicy(policy=r.misfire_policy, max_lateness_s=r.max_lateness_s),  # type: ignore[arg-type]
        status=ReminderStatus(r.status),
        next_run_utc=r.next_run_utc,
        version=r.version,
        client_request_id=r.client_request_id,
        last_error=r.last_error,
        paused_reason=r.paused_reason,
        created_at=r.created_at,
        updated_at=r.updated_at,
    )


def etag(r: Reminder) -> str:
    return f'"{r.version}"'


def fingerprint(payload: ReminderCreate) -> str:
    """Hash of the request body without its idempotency key (same key + other body → 409)."""
    canonical = json.dumps(payload.model_dump(exclude={"client_request_id"}), sort_keys=True)
    return hashlib.sha256(canonical.encode()).hexdigest()


def require_profile(ctx: AppContext, user_id: str) -> Profile:
    """The user's profile; a reminder for a user without one could never be delivered.

    Raises:
        InvalidInput: ("user") no profile (email address) is known for the token's subject.
        InfrastructureError: the profile source is unavailable (answered 503).
    """
    profile = ctx.profiles.get(user_id)
    if profile is None:
        raise InvalidInput(
            "user",
            "no profile (email address) is known for this user; reminders could not be delivered",
        )
    return profile


def zone_of(ctx: AppContext, user_id: str, timezone: str | None) -> ZoneInfo:
    """The fixed zone, else the user's profile zone.

    Raises:
        InvalidSchedule: ("timezone") unknown zone, or none given and no profile zone.
    """
    zone = zone_for(timezone, None if timezone is not None else ctx.profiles.get(user_id))
    if zone is None:
        raise InvalidSchedule("timezone", "required: no profile timezone is known for this user")
    return zone


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
    """Create a one-time or recurring reminder; one transaction, no provider call
    (see docs/design.md, "Producer never waits"). The response carries `next_run_utc`.

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

    stored = parse_schedule(
        start_local=payload.start_local,
        all_day=payload.all_day,
        rrule=payload.rrule,
        exdates=payload.exdates,
        dst=payload.dst,
    )
    profile = require_profile(ctx, user_id)
    zone = zone_for(payload.timezone, profile)
    assert zone is not None  # a profile always has a zone
    config = ctx.schedule_config
    schedule = schedule_of(stored, config)
    now = ctx.clock()
    next_run = first_run(schedule, zone, now, config)

    created = repository.insert_reminder(
        session,
        {
            "user_id": user_id,
            "title": payload.title,
            "body": payload.body,
            "start_local": stored.start_local,
            "all_day": stored.all_day,
            "timezone": payload.timezone,
            "rrule": schedule.rule.text if schedule.rule is not None else None,
            "exdates": list(stored.exdates),
            "dst_nonexistent": stored.nonexistent,
            "dst_ambiguous": stored.ambiguous,
            "misfire_policy": payload.misfire.policy,
            "max_lateness_s": payload.misfire.max_lateness_s,
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
    reminder_id: uuid.UUID,
    response: Response,
    user_id: User,
    ctx: Ctx,
    session: Db,
    if_match: Annotated[str | None, Header(alias="If-Match", max_length=200)] = None,
) -> ReminderOut:
    """Cancel the reminder: nothing more is sent (an occurrence claimed but not yet sent
    is recorded `cancelled`). Cancelling twice is fine; a finished reminder is 409. With
    `If-Match`, only if the reminder is still at that version (else 412)."""
    if if_match is not None:
        _lock_current(session, user_id, reminder_id, if_match)
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


def _lock_current(
    session: Session, user_id: str, reminder_id: uuid.UUID, if_match: str | None
) -> Reminder:
    """The user's reminder, row-locked, at the version `If-Match` names (if given).

    Raises:
        NotFound: no such reminder for this user.
        PreconditionFailed: If-Match names another version.
    """
    r = repository.lock(session, user_id, reminder_id)
    if r is None:
        raise NotFound(f"reminder {reminder_id} not found")
    _check_if_match(if_match, r)
    return r


def _check_if_match(if_match: str | None, r: Reminder) -> None:
    """RFC 9110 §13.1.1: a stale or unknown entity tag answers 412. If-Match uses the
    strong comparison (§8.8.3.2), so a weak tag (W/"1") never matches."""
    if if_match is None:
        return
    listed = [t.strip() for t in if_match.split(",")]
    tags = [t.strip('"') for t in listed if not t.startswith("W/")]
    if "*" in tags or str(r.version) in tags:
        return
    raise PreconditionFailed(
        f'If-Match {if_match} does not match the current version "{r.version}"; '
        "re-read the reminder and try again"
    )


SCHEDULE_FIELDS = frozenset({"start_local", "timezone", "rrule", "exdates", "all_day", "dst"})
NOT_NULL = frozenset({"title", "start_local", "all_day", "dst", "misfire"})


@router.patch(
    "/{reminder_id}",
    response_model=ReminderOut,
    responses={412: {"description": "If-Match names a stale version"}},
)
def update_reminder(
    reminder_id: uuid.UUID,
    payload: ReminderPatch,
    response: Response,
    user_id: User,
    ctx: Ctx,
    session: Db,
    if_match: Annotated[str | None, Header(alias="If-Match", max_length=200)] = None,
) -> ReminderOut:
    """Change title, body, schedule or policies; bumps the version (the ETag).

    A schedule change recomputes `next_run_utc` from now and supersedes an occurrence that
    is claimed but not yet sent (the sender records it `cancelled`). A title or body change
    reaches the next email, which is rendered at send time.
    """
    given = payload.model_fields_set
    for name in sorted(given & NOT_NULL):
        if getattr(payload, name) is None:
            raise InvalidInput(name, "must not be null")
    r = _lock_current(session, user_id, reminder_id, if_match)
    if not given:
        response.headers["ETag"] = etag(r)
        return to_out(r)
    if r.status == ReminderStatus.CANCELLED:
        raise Conflict("reminder is cancelled; create a new one")
    now = ctx.clock()
    if given & SCHEDULE_FIELDS:
        all_day = payload.all_day if "all_day" in given else r.all_day
        assert all_day is not None
        current = stored_of(r)

        def carried(value: datetime) -> str:
            # An all-day reminder turned into a timed one keeps firing at the all-day time.
            if current.all_day and not all_day:
                value = datetime.combine(value.date(), ctx.schedule_config.all_day_local_time)
            return format_local(value, all_day)

        dst = DstPolicy(nonexistent=current.nonexistent, ambiguous=current.ambiguous)  # type: ignore[arg-type]
        if payload.dst is not None:  # only the sub-fields given change
            dst = dst.model_copy(
                update=payload.dst.model_dump(include=payload.dst.model_fields_set)
            )
        stored = parse_schedule(
            start_local=payload.start_local
            if "start_local" in given and payload.start_local is not None
            else carried(current.start_local),
            all_day=all_day,
            rrule=payload.rrule if "rrule" in given else current.rrule,
            exdates=payload.exdates or []
            if "exdates" in given
            else [carried(d) for d in current.exdates],
            dst=dst,
        )
        timezone = payload.timezone if "timezone" in given else r.timezone
        zone = zone_of(ctx, user_id, timezone)
        config = ctx.schedule_config
        schedule = schedule_of(stored, config)
        next_run = first_run(schedule, zone, now, config)
        r.start_local, r.all_day = stored.start_local, stored.all_day
        r.rrule = schedule.rule.text if schedule.rule is not None else None
        r.exdates = list(stored.exdates)
        r.dst_nonexistent, r.dst_ambiguous = stored.nonexistent, stored.ambiguous
        r.timezone = timezone
        r.next_run_utc = next_run
        if r.status != ReminderStatus.PAUSED:
            r.status = ReminderStatus.PENDING.value
            r.claimed_by = r.claimed_at = r.last_error = None
    if "title" in given and payload.title is not None:
        r.title = payload.title
    if "body" in given:
        r.body = payload.body
    if payload.misfire is not None:  # only the sub-fields given change
        given_misfire = payload.misfire.model_fields_set
        if "policy" in given_misfire:
            r.misfire_policy = payload.misfire.policy
        if "max_lateness_s" in given_misfire:
            r.max_lateness_s = payload.misfire.max_lateness_s
    r.version += 1
    r.updated_at = now
    session.commit()
    response.headers["ETag"] = etag(r)
    return to_out(r)


@router.post("/{reminder_id}/pause", response_model=ReminderOut)
def pause_reminder(
    reminder_id: uuid.UUID,
    response: Response,
    user_id: User,
    ctx: Ctx,
    session: Db,
    if_match: Annotated[str | None, Header(alias="If-Match", max_length=200)] = None,
) -> ReminderOut:
    """Stop sending until resumed; an occurrence claimed but not sent is not sent.
    With `If-Match`, only if the reminder is still at that version (else 412)."""
    r = _lock_current(session, user_id, reminder_id, if_match)
    if r.status in (ReminderStatus.PENDING, ReminderStatus.CLAIMED) or (
        r.status == ReminderStatus.PAUSED and r.suppressed_address is not None
    ):
        # A reminder paused by a suppression becomes the user's pause: it no longer
        # resumes by itself when the address changes.
        r.status = ReminderStatus.PAUSED.value
        r.claimed_by = r.claimed_at = None
        _clear_suppression(r)
        r.version += 1
        r.updated_at = ctx.clock()
        session.commit()
    elif r.status != ReminderStatus.PAUSED:
        raise Conflict(f"reminder is {r.status}; only live reminders can be paused")
    response.headers["ETag"] = etag(r)
    return to_out(r)


@router.post("/{reminder_id}/resume", response_model=ReminderOut)
def resume_reminder(
    reminder_id: uuid.UUID,
    response: Response,
    user_id: User,
    ctx: Ctx,
    session: Db,
    if_match: Annotated[str | None, Header(alias="If-Match", max_length=200)] = None,
) -> ReminderOut:
    """Send again. A recurring reminder continues with its first occurrence from now
    (occurrences during the pause are not sent); a one-time reminder whose time passed
    while paused is sent now, subject to its misfire policy. With `If-Match`, only if
    the reminder is still at that version (else 412). A reminder paused by a suppression
    resumes too; while its address stays suppressed, its next occurrence is recorded
    `suppressed` and the reminder paused again."""
    r = _lock_current(session, user_id, reminder_id, if_match)
    if r.status in (ReminderStatus.PENDING, ReminderStatus.CLAIMED):
        response.headers["ETag"] = etag(r)
        return to_out(r)
    if r.status != ReminderStatus.PAUSED:
        raise Conflict(f"reminder is {r.status}; only paused reminders can be resumed")
    now = ctx.clock()
    if r.rrule is not None:
        config = ctx.schedule_config
        zone = zone_of(ctx, user_id, r.timezone)
        found = next_occurrence(
            schedule_of(stored_of(r), config), zone, now, inclusive=True, limits=config.limits
        )
        r.next_run_utc = found
        r.status = (ReminderStatus.PENDING if found else ReminderStatus.COMPLETED).value
    else:
        r.status = ReminderStatus.PENDING.value
    _clear_suppression(r)
    r.version += 1
    r.updated_at = now
    session.commit()
    response.headers["ETag"] = etag(r)
    return to_out(r)


@router.get("/{reminder_id}/occurrences", response_model=OccurrenceList)
def list_occurrences(
    reminder_id: uuid.UUID,
    user_id: User,
    ctx: Ctx,
    session: Db,
    limit: Annotated[int, Query(ge=1, le=100)] = 10,
) -> OccurrenceList:
    """The next `limit` occurrences (from next_run_utc; for a paused reminder, from now),
    each with its UTC instant, local wall time with offset and DST flags. A finished or
    cancelled reminder has none."""
    r = repository.get(session, user_id, reminder_id)
    if r is None:
        raise NotFound(f"reminder {reminder_id} not found")
    zone = zone_of(ctx, user_id, r.timezone)
    if r.status not in LIVE or r.next_run_utc is None:
        return OccurrenceList(timezone=zone.key, items=[])
    now = ctx.clock()
    after = r.next_run_utc if r.status != ReminderStatus.PAUSED or r.rrule is None else now
    config = ctx.schedule_config
    return occurrence_list(schedule_of(stored_of(r), config), zone, after, limit, config)


def _clear_suppression(r: Reminder) -> None:
    r.paused_reason = r.suppressed_address = r.suppression_checked_at = None


@router.get("/{reminder_id}/deliveries", response_model=DeliveryPage)
def list_deliveries(
    reminder_id: uuid.UUID,
    user_id: User,
    session: Db,
    limit: Annotated[int, Query(ge=1, le=100)] = 50,
    cursor: Annotated[str | None, Query(max_length=200)] = None,
) -> DeliveryPage:
    """What happened to each occurrence, newest first: its state (including `bounced`,
    `complained` and `suppressed`), provider, attempts, error and when it was sent.
    `next_cursor` is null on the last page; another user's reminder answers 404."""
    if repository.get(session, user_id, reminder_id) is None:
        raise NotFound(f"reminder {reminder_id} not found")
    before = _decode_run_time(cursor) if cursor else None
    rows = repository.deliveries_page(session, reminder_id, limit=limit + 1, before=before)
    page, more = rows[:limit], len(rows) > limit
    return DeliveryPage(
        items=[
            DeliveryOut(
                run_time_utc=d.run_time_utc,
                status=DeliveryStatus(d.status),
                provider=d.provider,
                attempt_count=d.attempt_count,
                error=d.error,
                sent_at=d.sent_at,
                updated_at=d.updated_at,
            )
            for d in page
        ],
        next_cursor=_encode_run_time(page[-1].run_time_utc) if more and page else None,
    )


def _encode_run_time(run_time: datetime) -> str:
    return base64.urlsafe_b64encode(run_time.isoformat().encode()).decode().rstrip("=")


def _decode_run_time(cursor: str) -> datetime:
    """Inverse of `_encode_run_time`.

    Raises:
        InvalidInput: ("cursor") not a cursor this API produced.
    """
    try:
        raw = base64.urlsafe_b64decode(cursor + "=" * (-len(cursor) % 4)).decode()
        run_time = datetime.fromisoformat(raw)
        if run_time.tzinfo is None:
            raise ValueError("naive")
        return run_time
    except (ValueError, UnicodeDecodeError, binascii.Error):
        raise InvalidInput("cursor", "is not a cursor returned by this API") from None
