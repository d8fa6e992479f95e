"""The links in emails, for the people who get them (issue 17; docs/design.md, "Links in
emails"): `GET /v1/links/{token}` shows what the link will do and a button (a GET changes
nothing: mail scanners and previews fetch links); `POST /v1/links/{token}` does it, also
as the RFC 8058 one-click unsubscribe a mail client posts (`List-Unsubscribe=One-Click`).
No login: the signed token is the credential. Answers are small HTML pages, never
cached nor referred (the token is in the URL); not in the OpenAPI document, which
describes the JSON API.
"""

from __future__ import annotations

import html
from datetime import datetime
from typing import Annotated
from zoneinfo import ZoneInfo

from fastapi import APIRouter, Depends
from fastapi.responses import HTMLResponse

from reminder_api.deps import AppContext, context, in_worker_thread
from reminder_core.domain.states import ReminderStatus
from reminder_core.errors import InfrastructureError, NotFound, QuotaExceeded
from reminder_core.links import (
    LinkAction,
    LinkClaims,
    LinkError,
    delay_text,
    link_key,
    verify_link,
)
from reminder_core.metrics import API_LIMITED
from reminder_core.quotas import Quotas
from reminder_core.scheduling import zone_for
from reminder_core.services.links import LinkOutcome, SnoozeOptions, apply_link
from reminder_core.store import reminders as store
from reminder_core.store.reminders import ReminderRecord

router = APIRouter(tags=["links"], include_in_schema=False)
Ctx = Annotated[AppContext, Depends(context)]

#: The token is a credential in the URL: no referrer, no cache, no scripts, no framing.
PAGE_HEADERS = {
    "Cache-Control": "no-store",
    "Referrer-Policy": "no-referrer",
    "Content-Security-Policy": "default-src 'none'; form-action 'self'; frame-ancestors 'none'",
    "X-Content-Type-Options": "nosniff",
}


def _page(status: int, heading: str, text: str, *, form: str | None = None) -> HTMLResponse:
    button = (
        f'<form method="post"><button type="submit">{html.escape(form)}</button></form>'
        if form
        else ""
    )
    body = (
        '<!doctype html><html lang="en"><head><meta charset="utf-8">'
        '<meta name="viewport" content="width=device-width">'
        f"<title>{html.escape(heading)}</title></head><body>"
        f"<h1>{html.escape(heading)}</h1><p>{html.escape(text)}</p>{button}</body></html>"
    )
    return HTMLResponse(body, status_code=status, headers=PAGE_HEADERS)


def _refused(exc: LinkError) -> HTMLResponse:
    if exc.expired:
        return _page(410, "This link has expired", f"{exc}. Nothing was changed.")
    return _page(
        400,
        "This link is not valid",
        "It may have been altered or cut short. Nothing was changed.",
    )


def _verified(ctx: AppContext, token: str) -> LinkClaims:
    return verify_link(link_key(ctx.settings), token, now=ctx.clock())


def _options(ctx: AppContext) -> SnoozeOptions:
    hours, minutes = (int(p) for p in ctx.settings.snooze_tomorrow_at.split(":"))
    return SnoozeOptions(
        delay_s=ctx.settings.snooze_delay_s,
        tomorrow_at=datetime.min.time().replace(hour=hours, minute=minutes),
    )


def _zone(ctx: AppContext, reminder: ReminderRecord) -> ZoneInfo:
    profile = None if reminder.timezone else ctx.profiles.get(reminder.user_id)
    return zone_for(reminder.timezone, profile) or ZoneInfo("UTC")


def _when(record: ReminderRecord) -> str:
    """The local time of a one-time reminder, as the user reads it (seconds shown when
    the time has them: a snooze delay of 90 s lands on one)."""
    shape = "%Y-%m-%d %H:%M:%S" if record.start_local.second else "%Y-%m-%d %H:%M"
    return f"{record.start_local.strftime(shape)} ({record.timezone or 'your zone'})"


def _question(ctx: AppContext, claims: LinkClaims, title: str) -> tuple[str, str, str]:
    if claims.action is LinkAction.STOP:
        return "Stop this reminder?", f"“{title}” will not be sent again.", "Stop it"
    if claims.action is LinkAction.TOMORROW:
        at = ctx.settings.snooze_tomorrow_at
        return "Remind me tomorrow?", f"“{title}” will come again tomorrow at {at}.", "Snooze"
    later = delay_text(ctx.settings.snooze_delay_s)
    return "Remind me later?", f"“{title}” will come again in {later}.", "Snooze"


@router.api_route("/v1/links/{token}", methods=["GET", "HEAD"], response_class=HTMLResponse)
@in_worker_thread
def show_link(token: str, ctx: Ctx) -> HTMLResponse:
    """What the link will do, with a button that POSTs it; changes nothing. HEAD (link
    checkers, some mail scanners) answers the same status and headers without a body."""
    try:
        claims = _verified(ctx, token)
    except LinkError as exc:
        return _refused(exc)
    with ctx.connect(claims.user_id, reads_only=True) as conn:
        reminder = store.get(conn, user_id=claims.user_id, reminder_id=claims.reminder_id)
    if reminder is None:
        return _page(404, "This reminder no longer exists", "Nothing was changed.")
    if claims.action is not LinkAction.STOP and reminder.status == ReminderStatus.CANCELLED:
        return _page(200, "This reminder was stopped", f"“{reminder.title}” cannot be snoozed.")
    heading, text, button = _question(ctx, claims, reminder.title)
    return _page(200, heading, text, form=button)


@router.post("/v1/links/{token}", response_class=HTMLResponse)
@in_worker_thread
def use_link(token: str, ctx: Ctx) -> HTMLResponse:
    """Do what the link says (once per occurrence; again changes nothing). The body is
    not read: RFC 8058 §3.2's `List-Unsubscribe=One-Click` and a browser form's empty body
    are the same request here."""
    try:
        claims = _verified(ctx, token)
    except LinkError as exc:
        return _refused(exc)
    try:
        with ctx.connect(claims.user_id) as conn:
            reminder = store.get(conn, user_id=claims.user_id, reminder_id=claims.reminder_id)
            if reminder is None:
                raise NotFound("this reminder no longer exists")
            zone = _zone(ctx, reminder)
            outcome = apply_link(
                conn, claims, zone=zone, now=ctx.clock(), options=_options(ctx),
                config=ctx.schedule_config, quotas=Quotas.from_settings(ctx.settings),
            )  # fmt: skip
            conn.commit()
    except NotFound:
        return _page(404, "This reminder no longer exists", "Nothing was changed.")
    except QuotaExceeded as exc:
        API_LIMITED.labels(limit=exc.quota).inc()
        return _page(429, "Cannot snooze", f"{exc}. Nothing was changed.")
    except InfrastructureError:
        return _page(503, "Try again in a moment", "The service is busy. Nothing was changed.")
    return _done(outcome)


def _done(outcome: LinkOutcome) -> HTMLResponse:
    title = outcome.reminder.title
    if outcome.action is LinkAction.STOP:
        snoozes = " Its snooze is cancelled too." if outcome.snoozes_cancelled else ""
        if outcome.changed and outcome.reminder.status == ReminderStatus.CANCELLED:
            return _page(200, "Reminder stopped", f"“{title}” will not be sent again.{snoozes}")
        if outcome.changed:  # the reminder had ended; only its snooze was still to come
            return _page(
                200,
                "Snooze stopped",
                f"“{title}” is {outcome.reminder.status}, and its snooze is cancelled: "
                "nothing more will be sent.",
            )
        return _page(
            200,
            "Nothing to stop",
            f"“{title}” is already {outcome.reminder.status}. Nothing was changed.",
        )
    if outcome.stopped:
        return _page(
            200,
            "This reminder was stopped",
            f"“{title}” was stopped, so it cannot be snoozed. Nothing was changed.",
        )
    assert outcome.snooze is not None
    when = _when(outcome.snooze)
    if outcome.changed:
        return _page(200, "Snoozed", f"“{title}” will come again at {when}.")
    return _page(
        200, "Already snoozed", f"“{title}” was already snoozed, to {when}. Nothing was changed."
    )
