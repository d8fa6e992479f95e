"""iCalendar (RFC 5545) in and out: a user's reminders as a VCALENDAR feed, and the
events of an .ics file read into reminder fields (docs/api.md, "Calendar feed and
import"). Pure code: no HTTP, no SQL; the caller validates what it reads and stores it.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import UTC, date, datetime, time, timedelta, tzinfo
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

import icalendar

from reminder_core.errors import InvalidInput, MalformedBody
from reminder_core.store.reminders import ReminderRecord

PRODID = "-//reminders//calendar feed//EN"
#: How often a subscribed client should fetch the feed again (RFC 7986 §5.7).
REFRESH_INTERVAL = timedelta(hours=1)
#: Years of zone transitions each VTIMEZONE covers past the latest start or now; a client
#: that knows the TZID (an IANA name) uses its own zone data beyond.
VTIMEZONE_YEARS_AHEAD = 10
#: Events (VEVENT and VTODO with DTSTART) one import may hold (docs/api.md).
MAX_IMPORT_EVENTS = 500


# --------------------------------------------------------------------------------------
# Out: the feed
# --------------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class FeedEntry:
    """One reminder of a feed and the zone its wall-clock times are read in (its own
    `timezone`, else the user's profile zone)."""

    reminder: ReminderRecord
    zone: ZoneInfo


def feed_calendar(
    entries: Sequence[FeedEntry], *, all_day_local_time: time, now: datetime
) -> bytes:
    """The VCALENDAR of `entries` (RFC 5545 §3.4), CRLF-separated UTF-8 octets.

    One VEVENT per entry (§3.6.1): UID the reminder id, SUMMARY its title, DESCRIPTION
    its body, DTSTAMP its last change (§3.8.7.2: no METHOD, so "last revised"), DTSTART
    its `start_local` with the zone's TZID (a DATE for an all-day reminder), RRULE and
    EXDATE as stored (EXDATEs are wall-clock times of the rule, §3.8.5.1), and a VALARM
    (§3.6.6, ACTION:DISPLAY) at the start, or at `all_day_local_time` into an all-day
    event's day. One VTIMEZONE (§3.6.5) per zone used, from the zone's data (icalendar's
    `add_missing_timezones`), from the earliest start to VTIMEZONE_YEARS_AHEAD past the
    latest start or `now` (aware UTC).

    The DTSTART of a time skipped or repeated by a DST change is read by RFC 5545 §3.3.5
    (the offset before the gap; the first of two readings), which is what the default
    `dst` policies do; a reminder with `skip`, `last` or `both` fires differently from
    what a calendar shows on those nights (docs/api.md).
    """
    cal = icalendar.Calendar()
    cal.add("prodid", PRODID)
    cal.add("version", "2.0")
    cal.add("calscale", "GREGORIAN")
    cal.add("x-wr-calname", "Reminders")
    cal.add("refresh-interval", REFRESH_INTERVAL, parameters={"VALUE": "DURATION"})
    cal.add("x-published-ttl", REFRESH_INTERVAL)
    for entry in entries:
        cal.add_component(_event(entry, all_day_local_time))
    if entries:
        starts = [e.reminder.start_local.date() for e in entries]
        last = max(*starts, now.date())
        cal.add_missing_timezones(
            first_date=min(starts) - timedelta(days=1),
            # The 1st of the month: a 29 February start has no such day 10 years on.
            last_date=last.replace(year=min(last.year + VTIMEZONE_YEARS_AHEAD, 9999), day=1),
        )
    return bytes(cal.to_ical())


def _event(entry: FeedEntry, all_day_local_time: time) -> icalendar.Event:
    r, zone = entry.reminder, entry.zone
    event = icalendar.Event()
    event.add("uid", str(r.id))
    event.add("dtstamp", r.updated_at.astimezone(UTC))
    event.add("summary", r.title)
    if r.body:
        event.add("description", r.body)
    if r.all_day:
        event.add("dtstart", r.start_local.date())
        trigger = datetime.combine(date.min, all_day_local_time) - datetime.min
    else:
        event.add("dtstart", r.start_local.replace(tzinfo=zone))
        trigger = timedelta(0)
    if r.rrule:
        event.add("rrule", icalendar.vRecur.from_ical(r.rrule))
    if r.exdates:
        excluded = [d.date() if r.all_day else d.replace(tzinfo=zone) for d in r.exdates]
        event.add("exdate", excluded)
    alarm = icalendar.Alarm()
    alarm.add("action", "DISPLAY")
    alarm.add("description", r.title)
    alarm.add("trigger", trigger)
    event.add_component(alarm)
    return event


# --------------------------------------------------------------------------------------
# In: the events of an .ics file
# --------------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class ImportedEvent:
    """The reminder fields read from one event, in the create route's textual forms.

    Attributes:
        index: the event's position among the file's events (VEVENT and VTODO with
            DTSTART, in file order), from 0.
        uid: its UID, None if it has none.
        title: SUMMARY (None: none given); body: DESCRIPTION.
        start_local: DTSTART's wall-clock time 'YYYY-MM-DDTHH:MM:SS', or its date
            'YYYY-MM-DD' when `all_day`.
        timezone: the IANA zone of DTSTART's TZID, "UTC" for a UTC time; None for a
            floating time or a date (the user's profile zone, RFC 5545 §3.3.5 form #1).
        rrule: the RRULE's text, None for a one-time event.
        exdates: EXDATEs as wall-clock times (dates) in the start's zone, as `start_local`.
    """

    index: int
    uid: str | None
    title: str | None
    body: str | None
    start_local: str
    all_day: bool
    timezone: str | None
    rrule: str | None
    exdates: tuple[str, ...]


@dataclass(frozen=True, slots=True)
class EventRefusal:
    """An event that cannot become a reminder: its `index` and `uid` (as in
    `ImportedEvent`), the property at fault and why."""

    index: int
    uid: str | None
    field: str
    reason: str


class _Refused(Exception):
    def __init__(self, field: str, reason: str) -> None:
        super().__init__(f"{field}: {reason}")
        self.field = field
        self.reason = reason


#: Properties this engine cannot represent: refused rather than silently dropped.
_UNSUPPORTED = {
    "RDATE": "extra dates (RDATE) are not supported; use RRULE",
    "RECURRENCE-ID": "a changed occurrence of another event (RECURRENCE-ID) is not supported",
    "EXRULE": "EXRULE is deprecated (RFC 5545 Appendix A) and not supported",
}


def read_events(
    body: bytes, *, floating_zone: ZoneInfo | None, max_events: int = MAX_IMPORT_EVENTS
) -> list[ImportedEvent | EventRefusal]:
    """The events of an iCalendar file, in file order: one `ImportedEvent` per VEVENT
    or VTODO with a DTSTART, or an `EventRefusal` saying why it cannot be one (a VTODO
    without DTSTART is not an event and is left out).

    Args:
        body: the file, UTF-8 (RFC 5545 §3.1.4).
        floating_zone: the zone a floating start is read in (the user's profile zone), to
            turn its UTC or zoned EXDATEs into wall-clock times; None: refuse those.
        max_events: at most this many events.

    Raises:
        MalformedBody: not UTF-8, or not an iCalendar object icalendar can parse.
        InvalidInput: ("body") no event, or more than `max_events`.
    """
    calendar = _parse(body)
    components = [
        c for c in calendar.walk() if c.name == "VEVENT" or (c.name == "VTODO" and "DTSTART" in c)
    ]
    if not components:
        raise InvalidInput("body", "holds no VEVENT (nor VTODO with DTSTART) to import")
    if len(components) > max_events:
        raise InvalidInput(
            "body", f"holds {len(components)} events; an import takes at most {max_events}"
        )
    results: list[ImportedEvent | EventRefusal] = []
    for index, component in enumerate(components):
        uid = str(component["UID"]) if "UID" in component else None
        try:
            results.append(_imported(index, uid, component, floating_zone))
        except _Refused as refused:
            results.append(EventRefusal(index, uid, refused.field, refused.reason))
    return results


def _parse(body: bytes) -> icalendar.Component:
    try:
        # "utf-8-sig": a byte-order mark (Outlook and Windows tools write one) is not
        # content; RFC 5545 §3.1.4 only says the charset is UTF-8.
        text = body.decode("utf-8-sig")
    except UnicodeDecodeError:
        raise MalformedBody("the body is not UTF-8 text (RFC 5545 §3.1.4)") from None
    try:
        calendars = icalendar.Calendar.from_ical(text, multiple=True)
    except Exception as exc:  # icalendar raises ValueError and others on broken input
        raise MalformedBody(f"the body is not an iCalendar object: {exc}") from None
    if len(calendars) != 1 or calendars[0].name != "VCALENDAR":
        raise MalformedBody("the body must be exactly one VCALENDAR object (RFC 5545 §3.4)")
    calendar: icalendar.Component = calendars[0]
    return calendar


def _imported(
    index: int, uid: str | None, c: icalendar.Component, floating_zone: ZoneInfo | None
) -> ImportedEvent:
    broken = list(getattr(c, "errors", ()))
    if broken:
        name, reason = broken[0]
        raise _Refused(str(name), str(reason))
    for name, reason in _UNSUPPORTED.items():
        if name in c:
            raise _Refused(name, reason)
    if "DTSTART" not in c:
        raise _Refused("DTSTART", "required: an event without a start cannot remind")
    start = _when(c["DTSTART"], "DTSTART")
    all_day = not isinstance(start, datetime)
    zone_name = (
        _zone_name(start.tzinfo, c["DTSTART"].params) if isinstance(start, datetime) else None
    )
    zone = ZoneInfo(zone_name) if zone_name else floating_zone
    rules: object = c.get("RRULE")
    if isinstance(rules, list):
        raise _Refused("RRULE", "more than one RRULE (RFC 5545 §3.6.1: SHOULD NOT occur)")
    rrule = bytes(rules.to_ical()).decode() if isinstance(rules, icalendar.vRecur) else None  # type: ignore[no-untyped-call]
    return ImportedEvent(
        index=index,
        uid=uid,
        title=str(c["SUMMARY"]) if "SUMMARY" in c else None,
        body=str(c["DESCRIPTION"]) if "DESCRIPTION" in c else None,
        start_local=_local_text(start, all_day, zone, "DTSTART"),
        all_day=all_day,
        timezone=zone_name,
        rrule=rrule,
        exdates=tuple(_local_text(d, all_day, zone, "EXDATE") for d in _exdates(c)),
    )


def _zone_name(tz: tzinfo | None, params: dict[str, str]) -> str | None:
    """The IANA name of a DTSTART's zone: None floating, "UTC" for `Z`.

    icalendar resolves a TZID that is an IANA name, or a Windows zone name it knows, to a
    `ZoneInfo`; a zone defined only by the file's VTIMEZONE is refused (its rules could
    not follow the IANA changes a reminder lives through).
    """
    if tz is None:
        if params.get("TZID"):  # icalendar leaves a TZID it cannot resolve floating
            raise _Refused(
                "DTSTART", f"TZID {params['TZID']!r} is not an IANA zone name this engine knows"
            )
        return None
    key = getattr(tz, "key", None)
    if isinstance(key, str):
        try:
            ZoneInfo(key)
        except (ZoneInfoNotFoundError, ValueError):
            pass
        else:
            return key
    raise _Refused(
        "DTSTART",
        f"TZID {params.get('TZID', str(tz))!r} is not an IANA zone name this engine knows",
    )


def _when(prop: object, field: str) -> date | datetime:
    """The date or date-time of a parsed DTSTART or EXDATE value."""
    value = getattr(prop, "dt", None)
    if not isinstance(value, date):
        raise _Refused(field, "must be a DATE or DATE-TIME value (RFC 5545 §3.3.4, §3.3.5)")
    return value


def _exdates(c: icalendar.Component) -> list[date | datetime]:
    listed: object = c.get("EXDATE")
    if listed is None:
        return []
    groups = listed if isinstance(listed, list) else [listed]
    return [_when(v, "EXDATE") for group in groups for v in getattr(group, "dts", ())]


def _local_text(value: date | datetime, all_day: bool, zone: ZoneInfo | None, field: str) -> str:
    """`value` as the create route's wall-clock text in `zone` (dates as dates)."""
    if all_day:
        if isinstance(value, datetime):
            raise _Refused(field, "a date-time on an all-day (DATE) event (RFC 5545 §3.8.5.1)")
        return value.isoformat()
    if not isinstance(value, datetime):
        raise _Refused(field, "a DATE on a timed event (RFC 5545 §3.8.5.1: same value type)")
    if value.tzinfo is not None:
        if zone is None:
            raise _Refused(field, "a zoned time on a floating event, and no profile zone")
        value = value.astimezone(zone).replace(tzinfo=None)
    return value.isoformat(timespec="seconds")
