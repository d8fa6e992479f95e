"""Typed HTTP client (httpx) of the REST API's /v1/reminders and /v1/occurrences
(docs/api.md), used by the `reminders create|list|...` commands.

Errors (one root, `ClientError`):

    ClientError                 anything this client cannot hand back as a record
    ├── ApiError                the API answered 4xx/5xx: its RFC 9457 problem details
    ├── ApiUnreachable          no answer: connection refused, DNS, timeout
    └── UnexpectedResponse      a 2xx whose body is not the documented JSON
"""

from __future__ import annotations

import uuid
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import TypeVar

import httpx
from pydantic import BaseModel, ConfigDict, ValidationError

#: The API's maximum `limit` for a list or occurrence page (docs/api.md, "Endpoints").
MAX_PAGE = 100
DEFAULT_TIMEOUT_S = 10.0

JsonValue = str | int | bool | None | list[str] | dict[str, str | int]
Params = Mapping[str, str | int | list[str]]


# --------------------------------------------------------------------------- errors


class ClientError(Exception):
    """Root of this client's errors."""


@dataclass(frozen=True, slots=True)
class FieldError:
    """One entry of a problem's `errors` member: the field (dotted path, e.g.
    `misfire.max_lateness_s`) and why it was refused."""

    field: str
    message: str


class ApiError(ClientError):
    """The API refused the request (4xx) or failed (5xx); RFC 9457 problem details.

    Attributes:
        status: the HTTP status code.
        title: the problem's short summary ("Not found", "Unprocessable content", ...).
        detail: the explanation for this occurrence ("" when the body was not a problem).
        type: the problem type URI (relative, e.g. "/problems/not-found"; "about:blank").
        errors: per-field problems of a 422, in the API's order.
        retry_after_s: the `Retry-After` header in seconds (a 503), else None.
    """

    def __init__(
        self,
        status: int,
        title: str,
        detail: str = "",
        *,
        type: str = "about:blank",
        errors: Sequence[FieldError] = (),
        retry_after_s: float | None = None,
    ) -> None:
        self.status = status
        self.title = title
        self.detail = detail
        self.type = type
        self.errors = tuple(errors)
        self.retry_after_s = retry_after_s
        super().__init__(f"{status} {title}" + (f": {detail}" if detail else ""))

    @classmethod
    def from_response(cls, response: httpx.Response) -> ApiError:
        """The problem of a 4xx/5xx `response`; a body that is not problem+json (a proxy's
        HTML page) gives the reason phrase as title and the start of the body as detail."""
        retry_after = response.headers.get("Retry-After", "")
        retry_after_s = float(retry_after) if retry_after.isdigit() else None
        try:
            body = response.json()
        except ValueError:
            body = None
        if not isinstance(body, dict):
            return cls(
                response.status_code,
                response.reason_phrase or "HTTP error",
                response.text[:200].strip(),
                retry_after_s=retry_after_s,
            )
        errors = [
            FieldError(str(e.get("field", "")), str(e.get("message", "")))
            for e in body.get("errors") or ()
            if isinstance(e, dict)
        ]
        return cls(
            response.status_code,
            str(body.get("title") or response.reason_phrase or "HTTP error"),
            str(body.get("detail") or ""),
            type=str(body.get("type") or "about:blank"),
            errors=errors,
            retry_after_s=retry_after_s,
        )


class ApiUnreachable(ClientError):
    """No answer from the API (connection refused, unknown host, timeout): check that it
    runs and that the URL is right, or try again later."""


class InvalidApiUrl(ClientError, ValueError):
    """The API's URL cannot be used for a request (a host name IDNA refuses, such as
    `xn--zz`: trial helper-58's traceback)."""


class UnexpectedResponse(ClientError):
    """A success status whose body is not the JSON docs/api.md documents (a wrong URL
    pointing at another service, or a client older than the API)."""


# --------------------------------------------------------------------------- records


class Record(BaseModel):
    """A response record: immutable; members the API adds later are ignored."""

    model_config = ConfigDict(frozen=True, extra="ignore")


class Dst(Record):
    """DST policies: `nonexistent` "shift"|"skip", `ambiguous` "first"|"last"|"both"."""

    nonexistent: str
    ambiguous: str


class Misfire(Record):
    """Misfire policy "latest"|"skip"|"all" and its `max_lateness_s` (seconds)."""

    policy: str
    max_lateness_s: int


class Reminder(Record):
    """A reminder as GET /v1/reminders/{id} shows it (reminder_api ReminderOut).

    `version` is the ETag (pass it as `if_match`); instants are aware UTC datetimes;
    `start_local` and `exdates` are wall-clock text (`YYYY-MM-DDTHH:MM:SS`, dates when
    `all_day`); `timezone` None follows the user's profile zone.
    """

    id: uuid.UUID
    title: str
    body: str | None
    start_local: str
    timezone: str | None
    rrule: str | None
    exdates: list[str]
    all_day: bool
    dst: Dst
    misfire: Misfire
    status: str
    next_run_utc: datetime | None
    version: int
    client_request_id: str | None
    last_error: str | None
    paused_reason: str | None = None
    created_at: datetime
    updated_at: datetime


class ReminderPage(Record):
    """One page of GET /v1/reminders, newest first; `next_cursor` None on the last."""

    items: list[Reminder]
    next_cursor: str | None


class Occurrence(Record):
    """One upcoming occurrence: `run_time_utc` (None when DST `skip` dropped it), `local`
    (wall time with offset), `rule_local` (the rule's wall time), `shifted`, `skipped`."""

    run_time_utc: datetime | None
    local: str
    rule_local: str
    shifted: bool
    skipped: bool


class OccurrenceList(Record):
    """Upcoming occurrences, ascending, in `timezone` (the zone they were expanded in)."""

    timezone: str
    items: list[Occurrence]


@dataclass(frozen=True, slots=True)
class Created:
    """What POST /v1/reminders returned: the reminder, and whether it was an idempotent
    replay (200 `Idempotent-Replayed: true`: created earlier with the same key and body)."""

    reminder: Reminder
    replayed: bool


@dataclass(frozen=True, slots=True)
class Schedule:
    """When a reminder fires (the schedule members of a create or a preview body).

    Attributes:
        start_local: wall-clock `YYYY-MM-DDTHH:MM[:SS]`, or `YYYY-MM-DD` when all_day.
        timezone: IANA zone; None follows the user's profile zone.
        rrule: RFC 5545 RRULE text; None: one-time.
        exdates: wall-clock times of the rule to leave out.
        dst_nonexistent, dst_ambiguous: DST policies; None: the API's default.
    """

    start_local: str
    timezone: str | None = None
    rrule: str | None = None
    exdates: Sequence[str] = field(default_factory=tuple)
    all_day: bool = False
    dst_nonexistent: str | None = None
    dst_ambiguous: str | None = None

    def to_json(self) -> dict[str, JsonValue]:
        """The body members, leaving out those at the API's default."""
        body: dict[str, JsonValue] = {"start_local": self.start_local}
        if self.timezone is not None:
            body["timezone"] = self.timezone
        if self.rrule is not None:
            body["rrule"] = self.rrule
        if self.exdates:
            body["exdates"] = list(self.exdates)
        if self.all_day:
            body["all_day"] = True
        dst = _policy(nonexistent=self.dst_nonexistent, ambiguous=self.dst_ambiguous)
        if dst:
            body["dst"] = dst
        return body


def _policy(**members: str | int | None) -> dict[str, str | int]:
    """The members given (not None): a `dst` or `misfire` object merged by sub-field."""
    return {name: value for name, value in members.items() if value is not None}


class _Unset:
    def __repr__(self) -> str:
        return "UNSET"


#: "Leave this field as it is" in `update` (None means null: clear it).
UNSET = _Unset()

R = TypeVar("R", bound=Record)


# --------------------------------------------------------------------------- client


def _id(reminder_id: uuid.UUID | str) -> str:
    """`reminder_id` as a path segment: a UUID, in its canonical form.

    Raises:
        ValueError: not a UUID. It goes into the request's path, so `../calendar-feed`
            reached another endpoint (trial helper-57: `cancel` revoked the calendar
            feed).
    """
    if isinstance(reminder_id, uuid.UUID):
        return str(reminder_id)
    try:
        return str(uuid.UUID(reminder_id))
    except (ValueError, TypeError, AttributeError):
        raise ValueError(f"{reminder_id!r} is not a reminder id (a UUID)") from None


class ReminderClient:
    """The reminders of the user a bearer token speaks for, over HTTP.

    Args:
        base_url: the API root, e.g. "http://127.0.0.1:8000" (no /v1).
        token: the bearer token (a JWT; `reminders token --user ID` in development).
        timeout_s: seconds for connecting and for each read.
        transport: an httpx transport (tests of an edge: `httpx.MockTransport`); None:
            the network.

    Every method raises `ApiError` (the API refused or failed), `ApiUnreachable` (no
    answer) or `UnexpectedResponse` (a success body that is not the documented JSON).
    Use it as a context manager, or call `close()`.
    """

    def __init__(
        self,
        base_url: str,
        token: str,
        *,
        timeout_s: float = DEFAULT_TIMEOUT_S,
        transport: httpx.BaseTransport | None = None,
    ) -> None:
        self.base_url = base_url.rstrip("/")
        self._http = httpx.Client(
            base_url=self.base_url,
            headers={"Authorization": f"Bearer {token}", "Accept": "application/json"},
            timeout=timeout_s,
            transport=transport,
            trust_env=False,  # a proxy from the environment would not reach 127.0.0.1
        )

    def __enter__(self) -> ReminderClient:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        """Close the connection pool."""
        self._http.close()

    # ----------------------------------------------------------------- requests

    def _send(
        self,
        method: str,
        path: str,
        *,
        json: Mapping[str, object] | None = None,
        params: Params | None = None,
        headers: Mapping[str, str] | None = None,
    ) -> httpx.Response:
        try:
            response = self._http.request(method, path, json=json, params=params, headers=headers)
        except httpx.TimeoutException as exc:
            raise ApiUnreachable(f"no answer from {self.base_url} in time: {exc}") from exc
        except httpx.TransportError as exc:
            raise ApiUnreachable(f"cannot reach the API at {self.base_url}: {exc}") from exc
        except UnicodeError as exc:  # the host name, encoded for the request (idna)
            raise InvalidApiUrl(f"the API URL {self.base_url} cannot be used: {exc}") from exc
        if response.status_code >= 400:
            raise ApiError.from_response(response)
        return response

    def _record(self, response: httpx.Response, model: type[R]) -> R:
        try:
            return model.model_validate_json(response.content)
        except ValidationError as exc:
            raise UnexpectedResponse(
                f"{response.request.method} {response.request.url.path} answered"
                f" {response.status_code} with a body that is not a {model.__name__}:"
                f" {exc.errors()[0]['msg'] if exc.errors() else exc}"
            ) from None

    @staticmethod
    def _if_match(version: int | None) -> dict[str, str]:
        return {"If-Match": f'"{version}"'} if version is not None else {}

    # ----------------------------------------------------------------- reminders

    def create(
        self,
        title: str,
        schedule: Schedule,
        *,
        body: str | None = None,
        misfire_policy: str | None = None,
        max_lateness_s: int | None = None,
        idempotency_key: str | None = None,
    ) -> Created:
        """POST /v1/reminders: a one-time or recurring reminder.

        Args:
            idempotency_key: sent as `Idempotency-Key`: the same key and body return the
                reminder created first (`Created.replayed`); another body is a 409.

        Returns:
            The reminder (status "pending", `next_run_utc` its first occurrence).

        Raises:
            ApiError: 422 an invalid field or a user without a profile (`errors` names
                it); 409 the key reused with another body; 401 a bad token.
        """
        payload: dict[str, object] = {"title": title, **schedule.to_json()}
        if body is not None:
            payload["body"] = body
        misfire = _policy(policy=misfire_policy, max_lateness_s=max_lateness_s)
        if misfire:
            payload["misfire"] = misfire
        headers = {"Idempotency-Key": idempotency_key} if idempotency_key else {}
        response = self._send("POST", "/v1/reminders", json=payload, headers=headers)
        replayed = response.headers.get("Idempotent-Replayed", "").lower() == "true"
        return Created(self._record(response, Reminder), replayed)

    def list(
        self,
        *,
        status: Sequence[str] = (),
        limit: int = 50,
        cursor: str | None = None,
    ) -> ReminderPage:
        """GET /v1/reminders: one page, newest first.

        Args:
            status: only these statuses (any of them); empty: all.
            limit: page size, 1 to MAX_PAGE.
            cursor: `next_cursor` of the previous page; None: the first page.

        Raises:
            ApiError: 422 a bad status, limit or cursor.
        """
        params: Params = {
            "limit": limit,
            **({"status": [*status]} if status else {}),
            **({"cursor": cursor} if cursor else {}),
        }
        return self._record(self._send("GET", "/v1/reminders", params=params), ReminderPage)

    def iter_all(
        self, *, status: Sequence[str] = (), page_size: int = MAX_PAGE
    ) -> Iterator[Reminder]:
        """Every reminder (of `status`), newest first, following `next_cursor` page by
        page (one request per `page_size` reminders)."""
        cursor: str | None = None
        while True:
            page = self.list(status=status, limit=page_size, cursor=cursor)
            yield from page.items
            if page.next_cursor is None:
                return
            cursor = page.next_cursor

    def get(self, reminder_id: uuid.UUID | str) -> Reminder:
        """GET /v1/reminders/{id}.

        Raises:
            ApiError: 404 no such reminder (another user's too); 422 not a UUID.
        """
        return self._record(self._send("GET", f"/v1/reminders/{_id(reminder_id)}"), Reminder)

    def update(
        self,
        reminder_id: uuid.UUID | str,
        *,
        if_match: int | None = None,
        title: str | _Unset = UNSET,
        body: str | _Unset | None = UNSET,
        start_local: str | _Unset = UNSET,
        timezone: str | _Unset | None = UNSET,
        rrule: str | _Unset | None = UNSET,
        exdates: Sequence[str] | _Unset = UNSET,
        all_day: bool | _Unset = UNSET,
        dst_nonexistent: str | None = None,
        dst_ambiguous: str | None = None,
        misfire_policy: str | None = None,
        max_lateness_s: int | None = None,
    ) -> Reminder:
        """PATCH /v1/reminders/{id}: change only the fields given (JSON merge patch);
        None clears `body`, `timezone` (follow the profile again) and `rrule` (one-time).

        Args:
            if_match: the version last read (`Reminder.version`), sent as `If-Match`:
                the change applies only if nobody changed the reminder since; None:
                unconditional.

        Returns:
            The reminder after the change (its `version` bumped).

        Raises:
            ApiError: 412 `if_match` is stale (re-read, then retry); 404; 422 a bad field.
        """
        given: dict[str, object] = {
            name: [*value] if name == "exdates" and isinstance(value, Sequence) else value
            for name, value in (
                ("title", title),
                ("body", body),
                ("start_local", start_local),
                ("timezone", timezone),
                ("rrule", rrule),
                ("exdates", exdates),
                ("all_day", all_day),
                ("dst", _policy(nonexistent=dst_nonexistent, ambiguous=dst_ambiguous) or UNSET),
                ("misfire", _policy(policy=misfire_policy, max_lateness_s=max_lateness_s) or UNSET),
            )
            if not isinstance(value, _Unset)
        }
        response = self._send(
            "PATCH",
            f"/v1/reminders/{_id(reminder_id)}",
            json=given,
            headers=self._if_match(if_match),
        )
        return self._record(response, Reminder)

    def pause(self, reminder_id: uuid.UUID | str, *, if_match: int | None = None) -> Reminder:
        """POST /v1/reminders/{id}/pause: nothing is sent until resumed.

        Raises:
            ApiError: 409 a finished or cancelled reminder; 412 stale `if_match`; 404.
        """
        return self._transition(reminder_id, "pause", if_match)

    def resume(self, reminder_id: uuid.UUID | str, *, if_match: int | None = None) -> Reminder:
        """POST /v1/reminders/{id}/resume: a recurring reminder continues with its first
        occurrence from now.

        Raises:
            ApiError: 409 a reminder that is not paused; 412 stale `if_match`; 404.
        """
        return self._transition(reminder_id, "resume", if_match)

    def cancel(self, reminder_id: uuid.UUID | str, *, if_match: int | None = None) -> Reminder:
        """DELETE /v1/reminders/{id}: nothing more is sent; cancelling twice is fine.

        Raises:
            ApiError: 409 a finished reminder; 412 stale `if_match`; 404.
        """
        response = self._send(
            "DELETE", f"/v1/reminders/{_id(reminder_id)}", headers=self._if_match(if_match)
        )
        return self._record(response, Reminder)

    def _transition(
        self, reminder_id: uuid.UUID | str, action: str, if_match: int | None
    ) -> Reminder:
        response = self._send(
            "POST", f"/v1/reminders/{_id(reminder_id)}/{action}", headers=self._if_match(if_match)
        )
        return self._record(response, Reminder)

    # ----------------------------------------------------------------- occurrences

    def occurrences(self, reminder_id: uuid.UUID | str, *, limit: int = 10) -> OccurrenceList:
        """GET /v1/reminders/{id}/occurrences: the next `limit` (1 to MAX_PAGE)
        occurrences of a saved reminder; none for a finished or cancelled one.

        Raises:
            ApiError: 404; 422 a bad limit.
        """
        response = self._send(
            "GET", f"/v1/reminders/{_id(reminder_id)}/occurrences", params={"limit": limit}
        )
        return self._record(response, OccurrenceList)

    def preview(
        self, schedule: Schedule, *, limit: int = 10, from_utc: datetime | str | None = None
    ) -> OccurrenceList:
        """POST /v1/occurrences:preview: the first `limit` occurrences of an unsaved
        schedule at or after `from_utc` (an aware datetime or ISO 8601 text with an
        offset; None: now). Nothing is stored.

        Raises:
            ApiError: 422 as creating the reminder would be (`errors` names the field).
        """
        payload: dict[str, object] = {**schedule.to_json(), "limit": limit}
        if from_utc is not None:
            payload["from"] = from_utc if isinstance(from_utc, str) else from_utc.isoformat()
        response = self._send("POST", "/v1/occurrences:preview", json=payload)
        return self._record(response, OccurrenceList)
