"""POST /v1/occurrences:preview: the occurrences of a schedule that is not saved."""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Depends

from reminder_api.deps import AppContext, context, current_user
from reminder_api.routes.reminders import zone_of
from reminder_api.schedules import occurrence_list, parse_schedule
from reminder_api.schemas import OccurrenceList, PreviewRequest
from reminder_core.scheduling import first_run, schedule_of

router = APIRouter(prefix="/v1", tags=["occurrences"])


@router.post("/occurrences:preview", response_model=OccurrenceList)
def preview_occurrences(
    payload: PreviewRequest,
    user_id: Annotated[str, Depends(current_user)],
    ctx: Annotated[AppContext, Depends(context)],
) -> OccurrenceList:
    """The next `limit` occurrences from now of the given schedule (nothing is stored),
    each with its UTC instant, local wall time with offset and DST flags. Invalid input
    answers 422 exactly as creating the reminder would."""
    stored = parse_schedule(
        start_local=payload.start_local,
        all_day=payload.all_day,
        rrule=payload.rrule,
        exdates=payload.exdates,
        dst=payload.dst,
    )
    zone = zone_of(ctx, user_id, payload.timezone)
    config = ctx.schedule_config
    schedule = schedule_of(stored, config)
    now = ctx.clock()
    first_run(schedule, zone, now, config)  # refused exactly as creating it would be
    return occurrence_list(schedule, zone, now, payload.limit, config)
