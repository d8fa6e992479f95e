"""What the links in emails do (docs/design.md, "Links in emails"): snooze one occurrence
or stop the reminder, each idempotent on the occurrence the link came with."""

from __future__ import annotations

import hashlib
import math
from dataclasses import dataclass
from datetime import UTC, datetime, time, timedelta
from zoneinfo import ZoneInfo

from sqlalchemy import Connection

from reminder_core.domain.states import CANCELLABLE, ReminderStatus
from reminder_core.errors import NotFound
from reminder_core.links import LinkAction, LinkClaims
from reminder_core.quotas import Quotas
from reminder_core.scheduling import ScheduleConfig, StoredSchedule
from reminder_core.services import reminders as reminder_services
from reminder_core.store import reminders as store
from reminder_core.store.reminders import ReminderRecord


@dataclass(frozen=True, slots=True)
class SnoozeOptions:
    """When the snooze links bring a reminder back: `delay_s` seconds after the click,
    or at `tomorrow_at` local time the next day (SNOOZE_DELAY_S, SNOOZE_TOMORROW_AT)."""

    delay_s: float
    tomorrow_at: time


@dataclass(frozen=True, slots=True)
class LinkOutcome:
    """What using a link did.

    Attributes:
        action: the link's action.
        changed: False when it had been used before (or there was nothing left to do):
            nothing was written now.
        reminder: the reminder the email was about, as it is now.
        snooze: the one-time reminder of the extra occurrence (snooze actions), made now
            or by an earlier use of a link of the same occurrence.
        snoozes_cancelled: (STOP) how many live snoozes of the reminder were cancelled now.
    """

    action: LinkAction
    changed: bool
    reminder: ReminderRecord
    snooze: ReminderRecord | None = None
    snoozes_cancelled: int = 0

    @property
    def stopped(self) -> bool:
        """(snooze actions) The reminder, or the snooze made earlier, was stopped: nothing
        will come of this link."""
        return self.reminder.status == ReminderStatus.CANCELLED or (
            self.snooze is not None and self.snooze.status == ReminderStatus.CANCELLED
        )


def snooze_key(claims: LinkClaims) -> str:
    """The idempotency key (`client_request_id`) of the snooze of one occurrence: every
    snooze link of an email shares it, so the first one used wins and the others do
    nothing."""
    return f"snooze:{claims.reminder_id}:{claims.occurrence:%Y%m%dT%H%M%SZ}"


def snooze_at(
    action: LinkAction, options: SnoozeOptions, zone: ZoneInfo, now: datetime
) -> datetime:
    """The naive local reading in `zone` of the extra occurrence: `now` + delay (rounded
    up to the second), or tomorrow's `tomorrow_at` (the local date after `now`'s)."""
    if action is LinkAction.TOMORROW:
        day = now.astimezone(zone).date() + timedelta(days=1)
        return datetime.combine(day, options.tomorrow_at)
    at = datetime.fromtimestamp(math.ceil(now.timestamp() + options.delay_s), UTC)
    return at.astimezone(zone).replace(tzinfo=None)


def apply_link(
    conn: Connection,
    claims: LinkClaims,
    *,
    zone: ZoneInfo,
    now: datetime,
    options: SnoozeOptions,
    config: ScheduleConfig,
    quotas: Quotas,
) -> LinkOutcome:
    """Do what a verified link says, in the caller's transaction.

    - STOP cancels the reminder (`services.reminders.cancel`) and every live snooze a link
      of it made (a one-time reminder whose last occurrence was snoozed is `completed`,
      but its snooze would still come); with nothing live left to cancel, `changed` is
      False.
    - SNOOZE / TOMORROW create one one-time reminder (`snoozed_from` the reminder, the same
      title and body, in `zone` fixed) at `snooze_at`, idempotent on `snooze_key`: a
      second use of any snooze link of that occurrence changes nothing, and neither does
      one of a stopped (cancelled) reminder (`LinkOutcome.stopped`).

    Args:
        zone: the reminder's zone, else its user's profile zone.
        now: aware UTC.

    Raises:
        NotFound: the reminder no longer exists.
        QuotaExceeded: the snooze would put the user over QUOTA_LIVE_REMINDERS.
    """
    reminder = store.get(conn, user_id=claims.user_id, reminder_id=claims.reminder_id)
    if reminder is None:
        raise NotFound("this reminder no longer exists")
    if claims.action is LinkAction.STOP:
        snoozes = store.cancel_snoozes(
            conn, user_id=claims.user_id, snoozed_from=reminder.id, now=now
        )
        if reminder.status not in CANCELLABLE:
            return LinkOutcome(claims.action, bool(snoozes), reminder, None, len(snoozes))
        cancelled = reminder_services.cancel(
            conn, user_id=claims.user_id, reminder_id=claims.reminder_id, now=now
        )
        return LinkOutcome(claims.action, True, cancelled, None, len(snoozes))
    key = snooze_key(claims)
    earlier = store.get_by_request_id(conn, user_id=claims.user_id, client_request_id=key)
    if earlier is not None or reminder.status == ReminderStatus.CANCELLED:
        # Used before, or the reminder was stopped: a stopped reminder is not snoozed
        # back to life (`stopped` tells the page).
        return LinkOutcome(claims.action, False, reminder, earlier)
    local = snooze_at(claims.action, options, zone, now)
    draft = reminder_services.ReminderDraft(
        user_id=claims.user_id,
        content=reminder_services.ReminderContent(
            title=reminder.title,
            body=reminder.body,
            schedule=StoredSchedule(
                start_local=local,
                all_day=False,
                rrule=None,
                exdates=(),
                nonexistent="shift",
                ambiguous="first",
            ),
            timezone=zone.key,
            misfire_policy="latest",
            max_lateness_s=reminder.max_lateness_s,
        ),
        client_request_id=key,
        request_fingerprint=hashlib.sha256(key.encode()).hexdigest(),
        snoozed_from=reminder.id,
    )
    created = reminder_services.create(
        conn, draft, zone=zone, now=now, config=config, quotas=quotas
    )
    return LinkOutcome(claims.action, not created.replayed, reminder, created.reminder)
