"""Request and response bodies (pydantic); unknown fields are refused."""

from __future__ import annotations

import re
import uuid
from datetime import UTC, datetime
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator
from pydantic.config import JsonDict

from reminder_core.domain.localtime import MAX_YEAR, MIN_YEAR
from reminder_core.domain.states import DeliveryStatus, ReminderStatus

MAX_TITLE = 200
MAX_BODY = 10_000
MAX_REQUEST_ID = 200
MAX_RRULE_CHARS = 1024
#: Parse bound of `exdates`; the configured MAX_EXDATES (default 100) is checked later, and
#: the OpenAPI document states the smaller of the two (reminder_api.openapi).
MAX_EXDATES_IN_REQUEST = 1000


def _no_nul(value: str | None) -> str | None:
    # PostgreSQL text cannot hold U+0000; refuse it here rather than fail on INSERT.
    if value is not None and "\x00" in value:
        raise ValueError("must not contain NUL characters")
    return value


#: Control characters (C0 and DEL): none in a one-line value (a title, an idempotency key).
CONTROL = re.compile(r"[\x00-\x1f\x7f]")
_CONTROL_BUT_LAYOUT = re.compile(r"[\x00-\x08\x0b\x0c\x0e-\x1f\x7f]")


def _one_line(value: str | None) -> str | None:
    """A title becomes an email Subject: no control characters at all."""
    if value is not None and CONTROL.search(value):
        raise ValueError("must not contain control characters (newlines, tabs, NUL, ...)")
    return value


def _text_block(value: str | None) -> str | None:
    """A body may hold newlines and tabs, but no other control characters."""
    if value is not None and _CONTROL_BUT_LAYOUT.search(value):
        raise ValueError("must not contain control characters other than newline and tab")
    return value


class Strict(BaseModel):
    """A request body: unknown members are refused, and values are not coerced (pydantic
    strict mode: `"all_day": "yes"` or `"max_lateness_s": "600"` is a 422, not true/600;
    issue 14)."""

    model_config = ConfigDict(extra="forbid", strict=True)


class DstPolicy(Strict):
    """What to do with local times that DST makes disappear or repeat."""

    # The rules: docs/design.md, "DST policies" (the class docstring is the API's text).

    nonexistent: Literal["shift", "skip"] = Field(
        default="shift",
        description="A time in the spring-forward gap: 'shift' fires it with the offset "
        "before the gap (RFC 5545 §3.3.5), 'skip' drops it (RFC 5545 §3.3.10).",
    )
    ambiguous: Literal["first", "last", "both"] = Field(
        default="first",
        description="A time that occurs twice at fall-back: fire at the first, the last, or both.",
    )


class MisfirePolicy(Strict):
    """What to do with occurrences found already due after downtime or a backlog."""

    policy: Literal["latest", "skip", "all"] = Field(
        default="latest",
        description="'latest': send only the latest due occurrence, record older ones as "
        "missed; 'skip': record anything later than max_lateness_s as missed; 'all': send "
        "every occurrence, oldest first.",
    )
    max_lateness_s: int = Field(default=3600, ge=0, le=30 * 86400)


class ScheduleIn(Strict):
    """When a reminder fires."""

    start_local: str = Field(
        description="Local date-time without offset, 'YYYY-MM-DDTHH:MM[:SS]'; a date "
        "'YYYY-MM-DD' for an all-day reminder.",
        examples=["2026-12-24T09:00"],
    )
    timezone: str | None = Field(
        default=None,
        description="IANA zone; omitted: follow the user's profile timezone.",
        examples=["Europe/Paris"],
    )
    rrule: str | None = Field(
        default=None,
        max_length=MAX_RRULE_CHARS,
        description="RFC 5545 RRULE, with or without 'RRULE:'; omitted: one-time.",
        examples=["FREQ=WEEKLY;BYDAY=MO,WE"],
    )
    exdates: list[str] = Field(
        default_factory=list,
        max_length=MAX_EXDATES_IN_REQUEST,
        description="Local date-times (dates for all-day reminders) to leave out.",
    )
    all_day: bool = Field(
        default=False, description="Fires at the configured local time (default 09:00)."
    )
    dst: DstPolicy = Field(default_factory=DstPolicy)

    @field_validator("timezone", "start_local", "rrule")
    @classmethod
    def _text(cls, value: str | None) -> str | None:
        return _no_nul(value)

    @field_validator("exdates")
    @classmethod
    def _exdates(cls, value: list[str]) -> list[str]:
        for item in value:
            _no_nul(item)
        return value


class ReminderCreate(ScheduleIn):
    """Body of POST /v1/reminders."""

    title: str = Field(min_length=1, max_length=MAX_TITLE, examples=["Call the dentist"])
    body: str | None = Field(default=None, max_length=MAX_BODY)
    misfire: MisfirePolicy = Field(default_factory=MisfirePolicy)
    client_request_id: str | None = Field(
        default=None,
        min_length=1,
        max_length=MAX_REQUEST_ID,
        description="Idempotency key (or send the Idempotency-Key header).",
    )
    webhook_endpoint_id: uuid.UUID | None = Field(
        default=None,
        strict=False,  # a UUID's text, as JSON carries it
        description="Deliver as a signed HTTP POST to this webhook endpoint of yours"
        " (POST /v1/webhook-endpoints) instead of by email.",
    )

    @field_validator("title")
    @classmethod
    def _title(cls, value: str) -> str:
        if not value.strip():
            raise ValueError("must not be blank")
        _one_line(value)
        return value

    @field_validator("body")
    @classmethod
    def _body(cls, value: str | None) -> str | None:
        return _text_block(value)

    @field_validator("client_request_id")
    @classmethod
    def _plain(cls, value: str | None) -> str | None:
        return _one_line(value)


class ReminderPatch(Strict):
    """Body of PATCH /v1/reminders/{id}: only the fields given change; null clears body,
    timezone (follow the profile again) and rrule (one-time)."""

    title: str | None = Field(default=None, min_length=1, max_length=MAX_TITLE)
    body: str | None = Field(default=None, max_length=MAX_BODY)
    start_local: str | None = None
    timezone: str | None = None
    rrule: str | None = Field(default=None, max_length=MAX_RRULE_CHARS)
    exdates: list[str] | None = Field(default=None, max_length=MAX_EXDATES_IN_REQUEST)
    all_day: bool | None = None
    dst: DstPolicy | None = None
    misfire: MisfirePolicy | None = None

    @field_validator("title")
    @classmethod
    def _title(cls, value: str | None) -> str | None:
        if value is not None and not value.strip():
            raise ValueError("must not be blank")
        return _one_line(value)

    @field_validator("body")
    @classmethod
    def _body(cls, value: str | None) -> str | None:
        return _text_block(value)

    @field_validator("start_local", "timezone", "rrule")
    @classmethod
    def _text(cls, value: str | None) -> str | None:
        return _no_nul(value)

    @field_validator("exdates")
    @classmethod
    def _exdates(cls, value: list[str] | None) -> list[str] | None:
        for item in value or ():
            _no_nul(item)
        return value


def parse_instant(value: str) -> datetime:
    """An ISO 8601 instant with a UTC offset, years 1900-2999 (the range of start_local,
    docs/api.md "Refusals"); a JSON number is not one (strict types).

    Raises:
        ValueError: with the reason (pydantic answers it as a 422 naming the field).
    """
    try:
        parsed = datetime.fromisoformat(value)
    except ValueError:
        raise ValueError("must be an ISO 8601 instant, e.g. 2027-03-01T00:00:00Z") from None
    if parsed.utcoffset() is None:
        raise ValueError("must be an instant with a UTC offset, e.g. 2027-03-01T00:00:00Z")
    if not MIN_YEAR <= parsed.year <= MAX_YEAR:
        raise ValueError(f"must be within the years {MIN_YEAR} to {MAX_YEAR}")
    return parsed


class PreviewRequest(ScheduleIn):
    """Body of POST /v1/occurrences:preview: a schedule that is not saved."""

    limit: int = Field(default=10, ge=1, le=100, description="How many occurrences.")
    from_: str | None = Field(
        default=None,
        alias="from",
        max_length=40,
        description="List the occurrences at or after this instant: ISO 8601 / RFC 3339 "
        "with a UTC offset (e.g. 2027-03-01T00:00:00Z), any year from 1900 to 2999, past or "
        "future; omitted: now.",
        examples=["2027-03-01T00:00:00Z"],
    )

    @field_validator("from_")
    @classmethod
    def _instant(cls, value: str | None) -> str | None:
        if value is None:
            return None
        parse_instant(value)
        return value

    @property
    def from_utc(self) -> datetime | None:
        """`from` as an aware UTC datetime (validated), or None."""
        return parse_instant(self.from_).astimezone(UTC) if self.from_ is not None else None


REMINDER_EXAMPLE: JsonDict = {
    "id": "0b6f3a52-4c1e-4e8a-9a57-2f4ad1d2c8e1",
    "title": "Standup",
    "body": None,
    "start_local": "2031-12-01T08:30:00",
    "timezone": "Europe/Paris",
    "rrule": "FREQ=WEEKLY;BYDAY=MO,TU,WE,TH,FR",
    "exdates": ["2031-12-25T08:30:00"],
    "all_day": False,
    "dst": {"nonexistent": "shift", "ambiguous": "first"},
    "misfire": {"policy": "latest", "max_lateness_s": 3600},
    "status": "pending",
    "next_run_utc": "2031-12-01T07:30:00Z",
    "version": 1,
    "client_request_id": None,
    "last_error": None,
    "paused_reason": None,
    "created_at": "2031-11-20T10:00:00Z",
    "updated_at": "2031-11-20T10:00:00Z",
}


class ReminderOut(BaseModel):
    """A reminder as the API shows it."""

    model_config = ConfigDict(json_schema_extra={"examples": [REMINDER_EXAMPLE]})

    id: uuid.UUID
    title: str
    body: str | None
    start_local: str
    timezone: str | None = Field(description="Fixed zone, or null when following the profile.")
    rrule: str | None
    exdates: list[str]
    all_day: bool
    dst: DstPolicy
    misfire: MisfirePolicy
    status: ReminderStatus
    next_run_utc: datetime | None
    version: int
    client_request_id: str | None
    last_error: str | None
    paused_reason: str | None = Field(
        default=None,
        description="Why the system paused it (the recipient address is on the suppression"
        " list after a bounce or complaint); null for a pause by the user.",
    )
    snoozed_from: uuid.UUID | None = Field(
        default=None, description="The reminder whose email's snooze link made this one."
    )
    webhook_endpoint_id: uuid.UUID | None = Field(
        default=None, description="The webhook endpoint it is delivered to; null: by email."
    )
    created_at: datetime
    updated_at: datetime


class ReminderPage(BaseModel):
    """One page of GET /v1/reminders, newest first."""

    items: list[ReminderOut]
    next_cursor: str | None = Field(
        description="Pass as ?cursor= for the next page; null at the end."
    )


class OccurrenceOut(BaseModel):
    """One upcoming occurrence."""

    run_time_utc: datetime | None = Field(description="When it fires; null when skipped.")
    local: str = Field(description="Local wall time with offset, e.g. 2027-03-14T03:30:00-04:00")
    rule_local: str = Field(description="The rule's wall time (differs when shifted).")
    shifted: bool = Field(description="DST moved it: its wall time does not exist that day.")
    skipped: bool = Field(description="DST dropped it (policy 'skip').")


class OccurrenceList(BaseModel):
    """Upcoming occurrences, ascending."""

    model_config = ConfigDict(
        json_schema_extra={
            "examples": [
                {
                    "timezone": "America/New_York",
                    "items": [
                        {
                            "run_time_utc": "2031-03-08T07:30:00Z",
                            "local": "2031-03-08T02:30:00-05:00",
                            "rule_local": "2031-03-08T02:30:00",
                            "shifted": False,
                            "skipped": False,
                        },
                        {
                            "run_time_utc": "2031-03-09T07:30:00Z",
                            "local": "2031-03-09T03:30:00-04:00",
                            "rule_local": "2031-03-09T02:30:00",
                            "shifted": True,
                            "skipped": False,
                        },
                    ],
                }
            ]
        }
    )

    timezone: str
    items: list[OccurrenceOut]


class DeliveryOut(BaseModel):
    """What happened to one occurrence of a reminder (its `delivery_log` row)."""

    reminder_id: uuid.UUID = Field(
        description="The reminder it belongs to: this one, or the one-time reminder a"
        " snooze link in one of its emails made."
    )
    run_time_utc: datetime = Field(description="The occurrence (its due instant, UTC).")
    status: DeliveryStatus = Field(
        description="'sending' while in flight; then 'sent', 'failed', 'bounced', "
        "'complained' (the provider reported a hard bounce or a spam complaint after "
        "sending), 'suppressed' (not sent: the address is on the suppression list), "
        "'cancelled' or 'missed' (not sent: misfire policy)."
    )
    provider: str | None = Field(description="Email provider that took it, if any.")
    attempt_count: int = Field(description="Provider calls made for it.")
    error: str | None = Field(description="Why it failed, bounced or was not sent.")
    sent_at: datetime | None = Field(description="When the provider accepted it.")
    held_until: datetime | None = Field(
        default=None,
        description="The end of the user's quiet hours that held it (it was due at"
        " `run_time_utc` and sent at `sent_at`); null when it was not held.",
    )
    updated_at: datetime


class DeliveryPage(BaseModel):
    """One page of GET /v1/reminders/{id}/deliveries, newest occurrence first."""

    items: list[DeliveryOut]
    next_cursor: str | None = Field(
        description="Pass as ?cursor= for the next page; null at the end."
    )
