"""/v1/reminders: create (idempotent), read, list (cursor), change (If-Match), pause,
resume, cancel, the occurrence preview of a saved reminder and its delivery log."""

from __future__ import annotations

import base64
import binascii
import dataclasses
import functools
import hashlib
import json
import uuid
from collections.abc import Callable
from datetime import datetime
from typing import Annotated
from zoneinfo import ZoneInfo

from fastapi import APIRouter, Body, Depends, Header, Query, Request, Response, status
from psycopg.errors import QueryCanceled
from sqlalchemy import Connection
from sqlalchemy import exc as sa_exc

from reminder_api.deps import (
    AppContext,
    check_left_to_route,
    context,
    current_user,
    in_worker_thread,
    in_worker_thread_checking_in_body,
    reject_unknown_query,
)
from reminder_api.openapi import ETAG_HEADER, problem_responses
from reminder_api.schedules import (
    format_local,
    occurrence_list,
    parse_schedule,
    parse_schedule_in,
)
from reminder_api.schemas import (
    CONTROL,
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
from reminder_core.domain.states import ReminderStatus
from reminder_core.errors import InvalidInput, InvalidSchedule, NotFound, PreconditionFailed
from reminder_core.profiles import Profile
from reminder_core.quotas import Quotas
from reminder_core.scheduling import schedule_of, stored_of, zone_for
from reminder_core.services import reminders as services
from reminder_core.services.reminders import LIVE, ReminderContent, ReminderDraft, ReminderEdit
from reminder_core.store import delivery_log, webhook_endpoints
from reminder_core.store import reminders as store
from reminder_core.store.reminders import ReminderRecord

router = APIRouter(
    prefix="/v1/reminders", tags=["reminders"], dependencies=[Depends(reject_unknown_query)]
)

User = Annotated[str, Depends(current_user)]
Ctx = Annotated[AppContext, Depends(context)]


def to_out(r: ReminderRecord) -> ReminderOut:
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
        status=r.status,
        next_run_utc=r.next_run_utc,
        version=r.version,
        client_request_id=r.client_request_id,
        last_error=r.last_error,
        paused_reason=r.paused_reason,
        snoozed_from=r.snoozed_from,
        webhook_endpoint_id=r.webhook_endpoint_id,
        created_at=r.created_at,
        updated_at=r.updated_at,
    )


def etag(r: ReminderRecord) -> str:
    return f'"{r.version}"'


def fingerprint(payload: ReminderCreate) -> str:
    """Hash of the request body without its idempotency key (same key + other body → 409)."""
    canonical = json.dumps(
        payload.model_dump(mode="json", exclude={"client_request_id"}), sort_keys=True
    )
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


def zones_of(ctx: AppContext, user_id: str) -> Callable[[str | None], ZoneInfo]:
    """`zone_of` for this user, as the services' `zone` argument (a changed or resumed
    reminder's zone, known only once its new fields are)."""
    return lambda timezone: zone_of(ctx, user_id, timezone)


def zone_of(ctx: AppContext, user_id: str, timezone: str | None) -> ZoneInfo:
    """The fixed zone, else the user's profile zone.

    Raises:
        InvalidSchedule: ("timezone") unknown zone, or none given and no profile zone.
    """
    zone = zone_for(timezone, None if timezone is not None else ctx.profiles.get(user_id))
    if zone is None:
        raise InvalidSchedule("timezone", "required: no profile timezone is known for this user")
    return zone


CREATE_EXAMPLES = {
    "one-time": {
        "summary": "A one-time reminder in a fixed zone",
        "value": {
            "title": "Call the dentist",
            "body": "Bring the insurance card.",
            "start_local": "2031-07-01T09:00",
            "timezone": "America/New_York",
        },
    },
    "recurring": {
        "summary": "Every weekday at 08:30 in Paris, except Christmas",
        "value": {
            "title": "Standup",
            "start_local": "2031-12-01T08:30",
            "timezone": "Europe/Paris",
            "rrule": "FREQ=WEEKLY;BYDAY=MO,TU,WE,TH,FR",
            "exdates": ["2031-12-25T08:30"],
        },
    },
    "all-day": {
        "summary": "The last Friday of each month, all day, in the profile's zone",
        "value": {
            "title": "Timesheets",
            "start_local": "2031-12-01",
            "all_day": True,
            "rrule": "FREQ=MONTHLY;BYDAY=-1FR",
        },
    },
}

PATCH_EXAMPLES = {
    "title": {"summary": "A new title", "value": {"title": "Call the dentist (again)"}},
    "reschedule": {
        "summary": "Move a recurring reminder to 09:00, with its exclusion",
        "value": {"start_local": "2031-12-01T09:00", "exdates": ["2031-12-25T09:00"]},
    },
    "one-time": {"summary": "Make it one-time", "value": {"rrule": None}},
}

#: The ETag of the reminder answered; a missing reminder, a state that forbids the
#: change, a stale If-Match.
CHANGED = {
    200: {"description": "The reminder after the change.", "headers": ETAG_HEADER},
    **problem_responses(404, 409, 412),
}

#: Where a created (or replayed) reminder is.
LOCATION_HEADER = {
    "Location": {
        "description": "The reminder's URL, `/v1/reminders/{id}`.",
        "required": True,
        "schema": {"type": "string"},
    }
}


@router.post(
    "",
    status_code=status.HTTP_201_CREATED,
    response_model=ReminderOut,
    summary="Create a reminder",
    responses={
        201: {"description": "The reminder created.", "headers": ETAG_HEADER | LOCATION_HEADER},
        200: {
            "model": ReminderOut,
            "description": "Idempotent replay: the reminder created earlier with this key"
            " and body.",
            "headers": ETAG_HEADER
            | LOCATION_HEADER
            | {
                "Idempotent-Replayed": {
                    "description": "`true`: this is the reminder created earlier.",
                    "required": True,
                    "schema": {"type": "string", "enum": ["true"]},
                }
            },
        },
        **problem_responses(409),
    },
)
@in_worker_thread_checking_in_body
def create_reminder(
    payload: Annotated[ReminderCreate, Body(openapi_examples=CREATE_EXAMPLES)],
    request: Request,
    response: Response,
    user_id: User,
    ctx: Ctx,
    idempotency_key: Annotated[
        str | None, Header(alias="Idempotency-Key", min_length=1, max_length=MAX_REQUEST_ID)
    ] = None,
) -> ReminderOut:
    """Create a one-time or recurring reminder (201, with `Location` and `ETag`); the
    response carries `next_run_utc`, its first occurrence. Nothing is sent on the request
    path.

    Idempotent on `client_request_id` or the `Idempotency-Key` header (not both with
    different values): the same key and body return the reminder created first (200);
    the same key with another body is 409. A user without a profile (email address) is
    refused with 422: no email could be sent.
    \f
    One transaction (usually one statement committed as it runs, with the rate limit's
    take: `services.create`'s `alone` and `take`), no provider call (docs/design.md,
    "Producer never waits").
    """
    key = payload.client_request_id or idempotency_key
    if (
        payload.client_request_id
        and idempotency_key
        and payload.client_request_id != idempotency_key
    ):
        raise InvalidInput("client_request_id", "differs from the Idempotency-Key header")
    if len(request.headers.getlist("idempotency-key")) > 1:
        raise InvalidInput("Idempotency-Key", "must be given once")
    if idempotency_key is not None and not idempotency_key.isascii():
        # HTTP field values are read as ISO-8859-1 (RFC 9110 §5.5): UTF-8 bytes would be
        # another key than the same text in client_request_id (trial, 2026-12-06).
        raise InvalidInput(
            "Idempotency-Key", "must be ASCII (send other characters in client_request_id)"
        )
    if idempotency_key is not None and CONTROL.search(idempotency_key):
        # as client_request_id's rule: a key either way is one key (trial, 2026-12-06)
        raise InvalidInput(
            "Idempotency-Key", "must not contain control characters (newlines, tabs, NUL, ...)"
        )
    # Only a keyed create is compared with a retry (~2% of a create's CPU, issue 15).
    digest = fingerprint(payload) if key is not None else None
    check = check_left_to_route()
    with ctx.connect(user_id) as conn:
        if key is not None and digest is not None:
            # Read alone (no transaction): a new key's create then takes the rate limit
            # in its one statement too. A 409 is counted as its response starts.
            existing = services.find_replay(
                conn, user_id=user_id, client_request_id=key, request_fingerprint=digest,
                alone=True,
            )  # fmt: skip
            if existing is not None:
                if check is not None:  # a replay is counted (and refused past the budget)
                    check.check(keep=False)
                return _replay(existing, response)

        stored = parse_schedule_in(payload)
        profile = require_profile(ctx, user_id)
        zone = zone_for(payload.timezone, profile)
        assert zone is not None  # a profile always has a zone
        if payload.webhook_endpoint_id is not None and (
            webhook_endpoints.get(conn, user_id=user_id, endpoint_id=payload.webhook_endpoint_id)
            is None
        ):
            raise InvalidInput("webhook_endpoint_id", "no webhook endpoint of yours has this id")
        draft = ReminderDraft(
            user_id=user_id,
            content=ReminderContent(
                title=payload.title,
                body=payload.body,
                schedule=stored,
                timezone=payload.timezone,
                misfire_policy=payload.misfire.policy,
                max_lateness_s=payload.misfire.max_lateness_s,
            ),
            client_request_id=key,
            request_fingerprint=digest,
            webhook_endpoint_id=payload.webhook_endpoint_id,
        )
        take = None
        if check is not None and conn.in_transaction():  # with CELLS: the move lock's
            check.check(keep=False)
        now = ctx.clock()
        if check is not None and not conn.in_transaction():
            take = check.adopt()  # in the create's one statement
        create = functools.partial(
            services.create,
            conn,
            draft,
            zone=zone,
            now=now,
            config=ctx.schedule_config,
            quotas=Quotas.from_settings(ctx.settings),
            alone=True,
        )
        try:
            created = create(take=take)
        except sa_exc.OperationalError as exc:
            if check is None or take is None or not isinstance(exc.orig, QueryCanceled):
                raise
            # The statement waited past API_STATEMENT_TIMEOUT_S and was cancelled: nothing
            # written, nothing taken. The take alone tells whose wait it was: a budget the
            # database cannot take lets the request through unlimited, as for any route
            # (docs/operations.md, "Fair limits"); else the wait was the create's: 503.
            check.check(keep=False)
            if not check.skipped:
                raise
            created = create(take=None)
        if created.replayed:
            return _replay(created.reminder, response)
        conn.commit()
        response.headers["ETag"] = etag(created.reminder)
        response.headers["Location"] = f"/v1/reminders/{created.reminder.id}"
        return to_out(created.reminder)


def _replay(existing: ReminderRecord, response: Response) -> ReminderOut:
    response.status_code = status.HTTP_200_OK
    response.headers["Idempotent-Replayed"] = "true"
    response.headers["ETag"] = etag(existing)
    response.headers["Location"] = f"/v1/reminders/{existing.id}"
    return to_out(existing)


CURSOR = "A page's `next_cursor`, for the page after it (opaque; any other value is a 422)."


def encode_cursor(r: ReminderRecord) -> str:
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


@router.get("", response_model=ReminderPage, summary="List reminders")
@in_worker_thread
def list_reminders(
    user_id: User,
    ctx: Ctx,
    limit: Annotated[int, Query(ge=1, le=100, description="Page size.")] = 50,
    cursor: Annotated[str | None, Query(description=CURSOR)] = None,
    status_: Annotated[
        list[ReminderStatus] | None,
        Query(alias="status", description="Only reminders in these states (repeatable)."),
    ] = None,
) -> ReminderPage:
    """The user's reminders, newest first; `next_cursor` is null on the last page."""
    with ctx.connect(user_id, reads_only=True) as conn:
        before = decode_cursor(cursor) if cursor else None
        rows = store.list_page(
            conn, user_id=user_id, limit=limit + 1, before=before, statuses=status_
        )
        page, more = rows[:limit], len(rows) > limit
        return ReminderPage(
            items=[to_out(r) for r in page],
            next_cursor=encode_cursor(page[-1]) if more and page else None,
        )


def _get(conn: Connection, user_id: str, reminder_id: uuid.UUID) -> ReminderRecord:
    """The user's reminder. Raises NotFound (another user's id too)."""
    r = store.get(conn, user_id=user_id, reminder_id=reminder_id)
    if r is None:
        raise NotFound(f"reminder {reminder_id} not found")
    return r


@router.get(
    "/{reminder_id}",
    response_model=ReminderOut,
    summary="Get a reminder",
    responses={
        200: {"description": "The reminder.", "headers": ETAG_HEADER},
        **problem_responses(404),
    },
)
@in_worker_thread
def get_reminder(
    reminder_id: uuid.UUID, response: Response, user_id: User, ctx: Ctx
) -> ReminderOut:
    """One reminder of the user; another user's id answers 404."""
    with ctx.connect(user_id, reads_only=True) as conn:
        r = _get(conn, user_id, reminder_id)
        response.headers["ETag"] = etag(r)
        return to_out(r)


@router.delete(
    "/{reminder_id}",
    response_model=ReminderOut,
    summary="Cancel a reminder",
    responses=CHANGED,
)
@in_worker_thread
def cancel_reminder(
    reminder_id: uuid.UUID,
    response: Response,
    user_id: User,
    ctx: Ctx,
    if_match: Annotated[str | None, Header(alias="If-Match", max_length=200)] = None,
) -> ReminderOut:
    """Cancel the reminder: nothing more is sent (an occurrence claimed but not yet sent
    is recorded `cancelled`). Cancelling twice is fine; a finished reminder is 409. With
    `If-Match`, only if the reminder is still at that version (else 412)."""
    with ctx.connect(user_id) as conn:
        if if_match is not None:
            _lock_current(conn, user_id, reminder_id, if_match)
        r = services.cancel(conn, user_id=user_id, reminder_id=reminder_id, now=ctx.clock())
        conn.commit()
        response.headers["ETag"] = etag(r)
        return to_out(r)


def _lock_current(
    conn: Connection, user_id: str, reminder_id: uuid.UUID, if_match: str | None
) -> ReminderRecord:
    """The user's reminder, row-locked, at the version `If-Match` names (if given).

    Raises:
        NotFound: no such reminder for this user.
        PreconditionFailed: If-Match names another version.
    """
    r = services.lock(conn, user_id=user_id, reminder_id=reminder_id)
    _check_if_match(if_match, r)
    return r


def _check_if_match(if_match: str | None, r: ReminderRecord) -> None:
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
    summary="Change a reminder",
    responses=CHANGED,
)
@in_worker_thread
def update_reminder(
    reminder_id: uuid.UUID,
    payload: Annotated[ReminderPatch, Body(openapi_examples=PATCH_EXAMPLES)],
    response: Response,
    user_id: User,
    ctx: Ctx,
    if_match: Annotated[str | None, Header(alias="If-Match", max_length=200)] = None,
) -> ReminderOut:
    """Change title, body, schedule or policies (JSON merge patch: a field not sent keeps
    its value, null clears `body`, `timezone` and `rrule`); bumps the version (the ETag).
    With `If-Match`, only if the reminder is still at that version (else 412); a
    cancelled reminder is 409.

    A schedule change recomputes `next_run_utc` from now and supersedes an occurrence that
    is claimed but not yet sent (the sender records it `cancelled`). A title or body change
    reaches the next email, which is rendered at send time.
    """
    with ctx.connect(user_id) as conn:
        given = payload.model_fields_set
        for name in sorted(given & NOT_NULL):
            if getattr(payload, name) is None:
                raise InvalidInput(name, "must not be null")
        r = _lock_current(conn, user_id, reminder_id, if_match)
        if not given:
            response.headers["ETag"] = etag(r)
            return to_out(r)
        changed = services.update(
            conn,
            r,
            _edit_of(payload, r, ctx),
            zone=zones_of(ctx, user_id),
            now=ctx.clock(),
            config=ctx.schedule_config,
            quotas=Quotas.from_settings(ctx.settings),
        )
        conn.commit()
        response.headers["ETag"] = etag(changed)
        return to_out(changed)


def _edit_of(payload: ReminderPatch, r: ReminderRecord, ctx: AppContext) -> ReminderEdit:
    """The reminder's values after the PATCH `payload` (JSON merge patch semantics:
    a field not given keeps its value; `dst` and `misfire` merge by sub-field).

    Raises:
        InvalidSchedule: a schedule field given cannot be parsed (naming it).
    """
    given = payload.model_fields_set
    current = stored_of(r)
    stored = current
    timezone = r.timezone
    exdates_carried = False
    if given & SCHEDULE_FIELDS:
        all_day = payload.all_day if "all_day" in given else r.all_day
        assert all_day is not None

        def carried(value: datetime) -> datetime:
            # An all-day reminder turned into a timed one keeps firing at the all-day time;
            # a timed one turned all-day keeps its dates (stored at 00:00).
            if current.all_day and not all_day:
                return datetime.combine(value.date(), ctx.schedule_config.all_day_local_time)
            if all_day and not current.all_day:
                return datetime.combine(value.date(), datetime.min.time())
            return value

        dst = DstPolicy(nonexistent=current.nonexistent, ambiguous=current.ambiguous)  # type: ignore[arg-type]
        if payload.dst is not None:  # only the sub-fields given change
            dst = dst.model_copy(
                update=payload.dst.model_dump(include=payload.dst.model_fields_set)
            )
        start_local = (
            payload.start_local
            if "start_local" in given and payload.start_local is not None
            else format_local(carried(current.start_local), all_day)
        )
        stored = parse_schedule(
            start_local=start_local,
            all_day=all_day,
            rrule=payload.rrule if "rrule" in given else current.rrule,
            exdates=payload.exdates or [] if "exdates" in given else [],
            dst=dst,
        )
        if "exdates" not in given:
            # Kept exclusions must still match the new schedule (services.update refuses
            # them otherwise, docs/api.md "Exclusions"); those before a later start can
            # never fire and are dropped.
            kept = tuple(
                moved
                for moved in (carried(d) for d in current.exdates)
                if moved >= stored.start_local
            )
            exdates_carried = bool(kept)
            stored = dataclasses.replace(stored, exdates=kept)
        timezone = payload.timezone if "timezone" in given else r.timezone
    misfire_policy, max_lateness_s = r.misfire_policy, r.max_lateness_s
    if payload.misfire is not None:  # only the sub-fields given change
        given_misfire = payload.misfire.model_fields_set
        if "policy" in given_misfire:
            misfire_policy = payload.misfire.policy
        if "max_lateness_s" in given_misfire:
            max_lateness_s = payload.misfire.max_lateness_s
    content = ReminderContent(
        title=payload.title if "title" in given and payload.title is not None else r.title,
        body=payload.body if "body" in given else r.body,
        schedule=stored,
        timezone=timezone,
        misfire_policy=misfire_policy,
        max_lateness_s=max_lateness_s,
    )
    return ReminderEdit(
        content=content,
        schedule_changed=bool(given & SCHEDULE_FIELDS),
        exdates_carried=exdates_carried,
    )


@router.post(
    "/{reminder_id}/pause",
    response_model=ReminderOut,
    summary="Pause a reminder",
    responses=CHANGED,
)
@in_worker_thread
def pause_reminder(
    reminder_id: uuid.UUID,
    response: Response,
    user_id: User,
    ctx: Ctx,
    if_match: Annotated[str | None, Header(alias="If-Match", max_length=200)] = None,
) -> ReminderOut:
    """Stop sending until resumed; an occurrence claimed but not sent is not sent.
    With `If-Match`, only if the reminder is still at that version (else 412)."""
    with ctx.connect(user_id) as conn:
        r = services.pause(
            conn, _lock_current(conn, user_id, reminder_id, if_match), now=ctx.clock()
        )
        conn.commit()
        response.headers["ETag"] = etag(r)
        return to_out(r)


@router.post(
    "/{reminder_id}/resume",
    response_model=ReminderOut,
    summary="Resume a reminder",
    responses=CHANGED,
)
@in_worker_thread
def resume_reminder(
    reminder_id: uuid.UUID,
    response: Response,
    user_id: User,
    ctx: Ctx,
    if_match: Annotated[str | None, Header(alias="If-Match", max_length=200)] = None,
) -> ReminderOut:
    """Send again. A recurring reminder continues with its first occurrence from now
    (occurrences during the pause are not sent); a one-time reminder whose time passed
    while paused is sent now, subject to its misfire policy. With `If-Match`, only if
    the reminder is still at that version (else 412). A reminder paused by a suppression
    resumes too; while its address stays suppressed, its next occurrence is recorded
    `suppressed` and the reminder paused again."""
    with ctx.connect(user_id) as conn:
        r = services.resume(
            conn,
            _lock_current(conn, user_id, reminder_id, if_match),
            zone=zones_of(ctx, user_id),
            now=ctx.clock(),
            config=ctx.schedule_config,
        )
        conn.commit()
        response.headers["ETag"] = etag(r)
        return to_out(r)


@router.get(
    "/{reminder_id}/occurrences",
    response_model=OccurrenceList,
    summary="Next occurrences of a reminder",
    responses=problem_responses(404),
)
@in_worker_thread
def list_occurrences(
    reminder_id: uuid.UUID,
    user_id: User,
    ctx: Ctx,
    limit: Annotated[int, Query(ge=1, le=100, description="How many occurrences.")] = 10,
) -> OccurrenceList:
    """The next `limit` occurrences (from next_run_utc; for a paused reminder, from now),
    each with its UTC instant, local wall time with offset and DST flags. A finished or
    cancelled reminder has none."""
    with ctx.connect(user_id, reads_only=True) as conn:
        r = _get(conn, user_id, reminder_id)
        zone = zone_of(ctx, user_id, r.timezone)
        if r.status not in LIVE or r.next_run_utc is None:
            return OccurrenceList(timezone=zone.key, items=[])
        now = ctx.clock()
        after = r.next_run_utc if r.status != ReminderStatus.PAUSED or r.rrule is None else now
        config = ctx.schedule_config
        return occurrence_list(schedule_of(stored_of(r), config), zone, after, limit, config)


@router.get(
    "/{reminder_id}/deliveries",
    response_model=DeliveryPage,
    summary="Delivery log of a reminder",
    responses=problem_responses(404),
)
@in_worker_thread
def list_deliveries(
    reminder_id: uuid.UUID,
    user_id: User,
    ctx: Ctx,
    limit: Annotated[int, Query(ge=1, le=100, description="Page size.")] = 50,
    cursor: Annotated[str | None, Query(description=CURSOR)] = None,
) -> DeliveryPage:
    """What happened to each occurrence, newest first: its state (including `bounced`,
    `complained` and `suppressed`), provider, attempts, error and when it was sent.
    `next_cursor` is null on the last page; another user's reminder answers 404."""
    with ctx.connect(user_id, reads_only=True) as conn:
        _get(conn, user_id, reminder_id)
        before = _decode_run_time(cursor) if cursor else None
        rows = delivery_log.list_page(conn, reminder_id=reminder_id, limit=limit + 1, before=before)
        page, more = rows[:limit], len(rows) > limit
        return DeliveryPage(
            items=[DeliveryOut.model_validate(d, from_attributes=True) for d in page],
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
