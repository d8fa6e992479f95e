"""Calendars in and out (issue 17): the user's iCalendar feed at a secret URL (create or
rotate, revoke, fetch) and `POST /v1/reminders:import` of an .ics file, all or nothing."""

from __future__ import annotations

import dataclasses
import hashlib
import uuid
from datetime import datetime
from typing import Annotated, Any

from fastapi import APIRouter, Depends, Header, Request, Response, status
from pydantic import BaseModel, Field, ValidationError
from sqlalchemy import Connection

from reminder_api.deps import (
    AppContext,
    context,
    current_user,
    in_worker_thread,
    reject_unknown_query,
    run_route_body,
)
from reminder_api.errors import problem
from reminder_api.openapi import problem_responses
from reminder_api.routes.reminders import fingerprint, require_profile
from reminder_api.schedules import parse_schedule_in
from reminder_api.schemas import MAX_REQUEST_ID, ReminderCreate
from reminder_core.calendar_ics import (
    MAX_IMPORT_EVENTS,
    EventRefusal,
    FeedEntry,
    ImportedEvent,
    feed_calendar,
    read_events,
)
from reminder_core.domain.states import ReminderStatus
from reminder_core.errors import Conflict, InvalidInput, NotFound
from reminder_core.quotas import Quotas
from reminder_core.scheduling import zone_for
from reminder_core.services import reminders as services
from reminder_core.services.reminders import ReminderContent, ReminderDraft
from reminder_core.store import calendar_feeds
from reminder_core.store import reminders as store
from reminder_core.store.reminders import ReminderRecord

router = APIRouter(tags=["calendar"])

User = Annotated[str, Depends(current_user)]
Ctx = Annotated[AppContext, Depends(context)]
NO_UNKNOWN_QUERY = [Depends(reject_unknown_query)]

CALENDAR = "text/calendar"
#: The reminders a feed shows: those that will still send (a paused one does not).
FEED_STATUSES = (ReminderStatus.PENDING, ReminderStatus.CLAIMED)
FEED_PAGE = 500


class CalendarFeedOut(BaseModel):
    """The user's feed: subscribe to `url` in a calendar application."""

    url: str = Field(
        description="The feed's URL; its last path segment is the secret (anyone who has"
        " the URL can read the feed: rotate or revoke it if it leaks).",
        examples=["https://reminders.example/v1/calendar-feed/3q2-7wFh5rP0WbS1oXk4bQ.ics"],
    )
    created_at: datetime = Field(description="When this secret was made (aware UTC).")


class ImportReport(BaseModel):
    """What an import created: one reminder per event, in the file's order."""

    created: list[uuid.UUID] = Field(description="The ids of the reminders created.")
    count: int = Field(description="How many were created (the length of `created`).")
    replayed: bool = Field(
        default=False,
        description="True when this answers a replay (same Idempotency-Key and file):"
        " `created` are the reminders the first import made.",
    )


@router.post(
    "/v1/calendar-feed",
    status_code=status.HTTP_201_CREATED,
    response_model=CalendarFeedOut,
    summary="Create or rotate the calendar feed",
    dependencies=NO_UNKNOWN_QUERY,
    responses=problem_responses(422),
)
@in_worker_thread
def create_feed(request: Request, user_id: User, ctx: Ctx) -> CalendarFeedOut:
    """Make a new secret URL for the user's iCalendar feed (RFC 5545) and answer it. A
    feed made earlier is replaced: its URL stops working at once (404). Only the secret's
    SHA-256 is stored, so the URL cannot be shown again: call this again for a new one."""
    secret = calendar_feeds.new_secret()
    with ctx.connect(user_id) as conn:
        created_at = calendar_feeds.upsert(conn, user_id=user_id, secret=secret, now=ctx.clock())
        conn.commit()
    return CalendarFeedOut(
        url=str(request.url_for("calendar_feed", secret=secret)), created_at=created_at
    )


@router.delete(
    "/v1/calendar-feed",
    status_code=status.HTTP_204_NO_CONTENT,
    response_class=Response,
    summary="Revoke the calendar feed",
    dependencies=NO_UNKNOWN_QUERY,
    responses={
        204: {"description": "No feed now (revoking twice is fine)."},
        **problem_responses(422),
    },
)
@in_worker_thread
def revoke_feed(user_id: User, ctx: Ctx) -> Response:
    """Revoke the user's feed: its URL answers 404 from now on."""
    with ctx.connect(user_id) as conn:
        calendar_feeds.delete(conn, user_id=user_id)
        conn.commit()
    return Response(status_code=status.HTTP_204_NO_CONTENT)


SECRET_PARAMETER = {
    "name": "secret",
    "in": "path",
    "required": True,
    "description": "The secret answered by `POST /v1/calendar-feed`.",
    "schema": {"type": "string"},
}


# HEAD (calendar clients and link checkers probe with it): the same answer, no body.
@router.head("/v1/calendar-feed/{secret}.ics", include_in_schema=False)
@router.get(
    "/v1/calendar-feed/{secret}.ics",
    name="calendar_feed",
    response_class=Response,
    summary="The calendar feed (no bearer: the URL's secret is the credential)",
    # The secret is read from the path, not declared as a parameter: FastAPI would then
    # document a 422 that no secret can cause (any text is looked up; unknown is 404).
    openapi_extra={"parameters": [SECRET_PARAMETER]},
    responses={
        200: {
            "description": "A VCALENDAR: one VEVENT with a VALARM per pending reminder, a"
            " VTIMEZONE per zone used.",
            "content": {CALENDAR: {"schema": {"type": "string"}}},
        },
        **problem_responses(404, 503),
    },
)
@in_worker_thread
def calendar_feed(request: Request, ctx: Ctx) -> Response:
    """The user's reminders as iCalendar (RFC 5545), for Google Calendar, Apple Calendar or
    Thunderbird to subscribe to. An unknown, rotated or revoked secret answers 404; query
    parameters are ignored (calendar clients add their own)."""
    secret = str(request.path_params["secret"])
    user_id, reminders = None, []
    for engine in ctx.each_engine() if len(secret) <= 100 else ():  # the secret's cell
        with engine.connect() as conn:
            user_id = calendar_feeds.find(conn, secret=secret)
        if user_id is not None:
            # Two cells hold the feed while its user is moved between them: the
            # directory's is the user's (the other's rows are frozen or about to go).
            with ctx.engine_for(user_id).connect() as conn:
                reminders = _feed_reminders(conn, user_id)
            break
    if user_id is None:
        raise NotFound("no calendar feed at this URL (unknown, rotated or revoked)")
    profile = ctx.profiles.get(user_id) if any(r.timezone is None for r in reminders) else None
    entries = []
    for r in reminders:
        zone = zone_for(r.timezone, profile)
        if zone is not None:  # a reminder following a profile that has gone: no zone
            entries.append(FeedEntry(r, zone))
    config = ctx.schedule_config
    ics = feed_calendar(entries, all_day_local_time=config.all_day_local_time, now=ctx.clock())
    return Response(ics, media_type=CALENDAR, headers={"Cache-Control": "private, no-cache"})


def _feed_reminders(conn: Connection, user_id: str) -> list[ReminderRecord]:
    """Every reminder of the user in FEED_STATUSES, newest first."""
    found: list[ReminderRecord] = []
    before = None
    while True:
        page = store.list_page(
            conn, user_id=user_id, limit=FEED_PAGE, before=before, statuses=FEED_STATUSES
        )
        found.extend(page)
        if len(page) < FEED_PAGE:
            return found
        before = (page[-1].created_at, page[-1].id)


ICS_BODY: dict[str, Any] = {
    "requestBody": {
        "required": True,
        "description": "An iCalendar object (RFC 5545), UTF-8: a VCALENDAR of at most"
        f" {MAX_IMPORT_EVENTS} VEVENTs (and VTODOs with DTSTART).",
        "content": {CALENDAR: {"schema": {"type": "string"}}},
    }
}


@router.post(
    "/v1/reminders:import",
    status_code=status.HTTP_201_CREATED,
    response_model=ImportReport,
    summary="Import reminders from an .ics file",
    dependencies=NO_UNKNOWN_QUERY,
    openapi_extra=ICS_BODY,
    responses={
        200: {
            "description": "A replay: this Idempotency-Key imported this very file before;"
            " the reminders it created then, nothing created now.",
            "model": ImportReport,
        },
        400: {"description": "The body is not UTF-8, or not an iCalendar object."},
        413: {"description": "The body is over 64 KiB."},
        415: {
            "description": "The body is not `text/calendar`.",
            "headers": {
                "Accept": {
                    "description": "The media type the body must have: `text/calendar`.",
                    "required": True,
                    "schema": {"type": "string"},
                }
            },
        },
        **problem_responses(422),
    },
)
async def import_reminders(
    request: Request,
    response: Response,
    user_id: User,
    ctx: Ctx,
    idempotency_key: Annotated[
        str | None,
        Header(alias="Idempotency-Key", min_length=1, max_length=MAX_IMPORT_KEY),
    ] = None,
) -> ImportReport | Response:
    """One reminder per event (VEVENT, or VTODO with DTSTART) of an .ics file: DTSTART's
    local time and TZID, RRULE, EXDATEs, SUMMARY as the title ("(no title)" without
    one), DESCRIPTION as the body. Each is validated as `POST /v1/reminders` would; all
    are created in one transaction, or none: a refused event answers 422 with `errors`
    naming each (`events[i]`, with its UID) and why.

    Idempotent on the `Idempotency-Key` header: the same key with the same file answers
    200 with the reminders the first import created; with another file, 409."""
    media = request.headers.get("content-type", "").split(";", 1)[0].strip().lower()
    if media != CALENDAR:
        return problem(
            415,
            "Unsupported media type",
            f"send the calendar as {CALENDAR}, not {media or 'no content type'!r}",
            kind="unsupported-media-type",
            headers={"Accept": CALENDAR},
            instance=request.url.path,
        )
    if idempotency_key is not None and "\x00" in idempotency_key:
        raise InvalidInput("Idempotency-Key", "must not contain NUL characters")
    body = await request.body()
    report = await run_route_body(_import, body, user_id, ctx, request.url.path, idempotency_key)
    if isinstance(report, ImportReport) and report.replayed:
        response.status_code = status.HTTP_200_OK
    return report


#: An import's key names each event's reminder as `<key>#<index>` (at most 500 events).
MAX_IMPORT_KEY = MAX_REQUEST_ID - 4


def _event_key(key: str, index: int) -> str:
    return f"{key}#{index}"


def _replay(
    conn: Connection, user_id: str, key: str, digest: str, events: int
) -> ImportReport | None:
    """The report of an earlier import with `key`, None when there was none.

    Raises:
        Conflict: `key` imported another file.
    """
    found = []
    for index in range(events):
        earlier = services.find_replay(
            conn, user_id=user_id, client_request_id=_event_key(key, index),
            request_fingerprint=digest,
        )  # fmt: skip
        if earlier is None:
            break
        found.append(earlier.id)
    if not found:
        return None
    if len(found) != events:
        raise Conflict("this Idempotency-Key was already used with a different file")
    return ImportReport(created=found, count=len(found), replayed=True)


def _import(
    body: bytes, user_id: str, ctx: AppContext, path: str, key: str | None
) -> ImportReport | Response:
    profile = require_profile(ctx, user_id)
    events = read_events(body, floating_zone=zone_for(None, profile))
    now = ctx.clock()
    created: list[uuid.UUID] = []
    refused: list[dict[str, str]] = []
    quotas = Quotas.from_settings(ctx.settings)  # a refusal refuses the whole import
    digest = "import:" + hashlib.sha256(body).hexdigest()  # the file is the request
    with ctx.connect(user_id) as conn:
        if key is not None and (earlier := _replay(conn, user_id, key, digest, len(events))):
            return earlier
        for event in events:
            try:
                if isinstance(event, EventRefusal):
                    raise InvalidInput(event.field, event.reason)
                draft = _draft(event, user_id)
                if key is not None:
                    draft = dataclasses.replace(
                        draft,
                        client_request_id=_event_key(key, event.index),
                        request_fingerprint=digest,
                    )
                zone = zone_for(draft.content.timezone, profile)
                assert zone is not None  # a profile always has a zone
                reminder = services.create(
                    conn, draft, zone=zone, now=now, config=ctx.schedule_config, quotas=quotas
                ).reminder
                created.append(reminder.id)
            except InvalidInput as exc:
                refused.append(_refusal(event, exc.field, exc.reason))
        if refused:
            conn.rollback()
            return problem(
                422,
                "Invalid request",
                f"{len(refused)} of {len(events)} events refused; nothing was imported",
                kind="validation",
                errors=refused,
                instance=path,
            )
        conn.commit()
    return ImportReport(created=created, count=len(created))


#: The title of an imported event without SUMMARY.
UNTITLED = "(no title)"


def _draft(event: ImportedEvent, user_id: str) -> ReminderDraft:
    """The create route's draft of `event`, validated as its JSON body would be.

    Raises:
        InvalidInput: a field is refused (the create route's 422).
    """
    fields = {
        # SUMMARY is optional in a VEVENT (RFC 5545 §3.6.1); calendar apps show such an
        # event as untitled, and so does the reminder.
        "title": event.title if event.title is not None else UNTITLED,
        "body": event.body,
        "start_local": event.start_local,
        "timezone": event.timezone,
        "rrule": event.rrule,
        "exdates": list(event.exdates),
        "all_day": event.all_day,
    }
    try:
        payload = ReminderCreate.model_validate({k: v for k, v in fields.items() if v is not None})
    except ValidationError as exc:
        first = exc.errors()[0]
        field = ".".join(str(p) for p in first["loc"]) or "body"
        raise InvalidInput(field, str(first["msg"]).removeprefix("Value error, ")) from None
    return ReminderDraft(
        user_id=user_id,
        content=ReminderContent(
            title=payload.title,
            body=payload.body,
            schedule=parse_schedule_in(payload),
            timezone=payload.timezone,
            misfire_policy=payload.misfire.policy,
            max_lateness_s=payload.misfire.max_lateness_s,
        ),
        client_request_id=None,
        request_fingerprint=fingerprint(payload),
    )


def _refusal(event: ImportedEvent | EventRefusal, field: str, reason: str) -> dict[str, str]:
    uid = f" (UID {event.uid!r})" if event.uid is not None else ""
    return {"field": f"events[{event.index}]", "message": f"{field}{uid}: {reason}"}
