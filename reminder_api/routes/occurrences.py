"""POST /v1/occurrences:preview: the occurrences of a schedule that is not saved."""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Body, Depends

from reminder_api.deps import (
    AppContext,
    context,
    current_user,
    in_worker_thread,
    reject_unknown_query,
)
from reminder_api.routes.reminders import zone_of
from reminder_api.schedules import occurrence_list, parse_schedule_in
from reminder_api.schemas import OccurrenceList, PreviewRequest
from reminder_core.scheduling import accepted_schedule

router = APIRouter(prefix="/v1", tags=["occurrences"], dependencies=[Depends(reject_unknown_query)])


PREVIEW_EXAMPLES = {
    "dst": {
        "summary": "Three days across New York's spring-forward night (02:30 shifted)",
        "value": {
            "start_local": "2031-03-08T02:30",
            "timezone": "America/New_York",
            "rrule": "FREQ=DAILY;COUNT=3",
        },
    },
    "from": {
        "summary": "Twenty weekday occurrences from an instant",
        "value": {
            "start_local": "2031-12-01T08:30",
            "timezone": "Europe/Paris",
            "rrule": "FREQ=WEEKLY;BYDAY=MO,TU,WE,TH,FR",
            "from": "2032-03-01T00:00:00Z",
            "limit": 20,
        },
    },
}


@router.post("/occurrences:preview", response_model=OccurrenceList, summary="Preview a schedule")
@in_worker_thread
def preview_occurrences(
    payload: Annotated[PreviewRequest, Body(openapi_examples=PREVIEW_EXAMPLES)],
    user_id: Annotated[str, Depends(current_user)],
    ctx: Annotated[AppContext, Depends(context)],
) -> OccurrenceList:
    """The first `limit` occurrences at or after `from` (default: now) of the given
    schedule (nothing is stored), each with its UTC instant, local wall time with offset
    and DST flags. Invalid input answers 422 as creating the reminder then would; `limit`
    and `from` are body members (a query parameter is refused)."""
    stored = parse_schedule_in(payload)
    zone = zone_of(ctx, user_id, payload.timezone)
    config = ctx.schedule_config
    after = payload.from_utc or ctx.clock()
    schedule, _ = accepted_schedule(stored, zone, after, config)  # refused as a create would be
    return occurrence_list(schedule, zone, after, payload.limit, config)
