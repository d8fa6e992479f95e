"""Request and response bodies (pydantic); unknown fields are refused."""

from __future__ import annotations

import uuid
from datetime import datetime

from pydantic import BaseModel, ConfigDict, Field, field_validator

from reminder_core.domain.states import ReminderStatus

MAX_TITLE = 200
MAX_BODY = 10_000
MAX_REQUEST_ID = 200


def _no_nul(value: str | None) -> str | None:
    # PostgreSQL text cannot hold U+0000; refuse it here rather than fail on INSERT.
    if value is not None and "\x00" in value:
        raise ValueError("must not contain NUL characters")
    return value


class ReminderCreate(BaseModel):
    """Body of POST /v1/reminders (one-time reminder)."""

    model_config = ConfigDict(extra="forbid", str_strip_whitespace=False)

    title: str = Field(min_length=1, max_length=MAX_TITLE, examples=["Call the dentist"])
    body: str | None = Field(default=None, max_length=MAX_BODY)
    start_local: str = Field(
        description="Local date-time without offset, 'YYYY-MM-DDTHH:MM[:SS]'.",
        examples=["2026-12-24T09:00"],
    )
    timezone: str | None = Field(
        default=None,
        description="IANA zone; omitted: follow the user's profile timezone.",
        examples=["Europe/Paris"],
    )
    client_request_id: str | None = Field(
        default=None,
        min_length=1,
        max_length=MAX_REQUEST_ID,
        description="Idempotency key (or send the Idempotency-Key header).",
    )

    @field_validator("title")
    @classmethod
    def _title(cls, value: str) -> str:
        if not value.strip():
            raise ValueError("must not be blank")
        _no_nul(value)
        return value

    @field_validator("body", "timezone", "client_request_id", "start_local")
    @classmethod
    def _text(cls, value: str | None) -> str | None:
        return _no_nul(value)


class ReminderOut(BaseModel):
    """A reminder as the API shows it."""

    id: uuid.UUID
    title: str
    body: str | None
    start_local: str
    timezone: str | None = Field(description="Fixed zone, or null when following the profile.")
    status: ReminderStatus
    next_run_utc: datetime | None
    version: int
    client_request_id: str | None
    last_error: str | None
    created_at: datetime
    updated_at: datetime


class ReminderPage(BaseModel):
    """One page of GET /v1/reminders, newest first."""

    items: list[ReminderOut]
    next_cursor: str | None = Field(
        description="Pass as ?cursor= for the next page; null at the end."
    )
