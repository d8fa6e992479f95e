"""RFC 9457 problem details for every error; the only place HTTP status codes are chosen."""

from __future__ import annotations

import logging
from collections.abc import Sequence
from typing import Annotated, Any, NotRequired
from urllib.parse import quote

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse, Response
from pydantic import Field
from sqlalchemy import exc as sa_exc
from starlette.exceptions import HTTPException as StarletteHTTPException
from starlette.requests import ClientDisconnect
from typing_extensions import TypedDict  # pydantic needs this one's TypedDict on 3.11

from reminder_core.errors import (
    Conflict,
    DomainError,
    Forbidden,
    InfrastructureError,
    InvalidInput,
    MalformedBody,
    NotFound,
    PayloadTooLarge,
    PreconditionFailed,
    ProfileDataError,
    QuotaExceeded,
    Unauthenticated,
    UserMoving,
)
from reminder_core.metrics import API_LIMITED
from reminder_core.tokens import TokenError, verify_token

log = logging.getLogger(__name__)

PROBLEM_JSON = "application/problem+json"
#: The status a request is recorded with when its client left before sending its body
#: (nginx's 499 "client closed request"; no client ever reads it).
CLIENT_CLOSED_REQUEST = 499
TYPE_BASE = "/problems/"  # relative type URIs, RFC 9457 §3.1.1
#: Characters a URI path keeps unescaped (RFC 3986 §3.3 pchar and "/"; quote() never
#: escapes the unreserved "-._~").
_PATH_SAFE = "/:@!$&'()*+,;="


class RequestTooLarge(StarletteHTTPException):
    """The request body exceeds the configured limit (raised while the body is read).

    An HTTPException so that FastAPI's body parser re-raises it unchanged; any other
    exception raised while reading the body becomes a bare 400.
    """

    def __init__(self, detail: str) -> None:
        super().__init__(413, detail)


class FieldError(TypedDict):
    """One field at fault (an item of a problem's `errors` extension member)."""

    field: Annotated[
        str,
        Field(
            description="The request field: a body member (dotted for nested members,"
            " 'exdates.3' or 'exdates[3]' for an item), a query parameter or a header name;"
            " 'body' for the body as a whole.",
            examples=["start_local"],
        ),
    ]
    message: Annotated[str, Field(description="Why it is refused.", examples=["field required"])]


class Problem(TypedDict):
    """An RFC 9457 problem details object (`application/problem+json`): the body of every
    error response."""

    type: Annotated[
        str,
        Field(
            description="A URI reference naming the kind of problem, relative to the API"
            " ('/problems/validation'); 'about:blank' when it is only the status"
            " (RFC 9457 §3.1.1).",
            json_schema_extra={"format": "uri-reference"},
            examples=["/problems/validation"],
        ),
    ]
    title: Annotated[
        str,
        Field(
            description="Short summary of the kind of problem (RFC 9457 §3.1.3).",
            examples=["Invalid request"],
        ),
    ]
    status: Annotated[
        int,
        Field(
            ge=100, le=599, description="The HTTP status code (RFC 9457 §3.1.2).", examples=[422]
        ),
    ]
    detail: Annotated[
        str,
        Field(
            description="What went wrong with this request (RFC 9457 §3.1.4).",
            examples=["title: field required"],
        ),
    ]
    instance: NotRequired[
        Annotated[
            str,
            Field(
                description="The request path (RFC 9457 §3.1.5).",
                json_schema_extra={"format": "uri-reference"},
                examples=["/v1/reminders"],
            ),
        ]
    ]
    errors: NotRequired[
        Annotated[
            list[FieldError],
            Field(
                description="Extension member (RFC 9457 §3.2): the fields at fault, for"
                " a 422 (and a 400 for a body that is not JSON).",
                min_length=1,
            ),
        ]
    ]


#: (family, status, title, problem type slug) of each DomainError family; any other
#: DomainError is a 400 "Bad request".
_DOMAIN_PROBLEMS: tuple[tuple[type[DomainError], int, str, str], ...] = (
    (Unauthenticated, 401, "Unauthorized", "unauthorized"),
    (Forbidden, 403, "Forbidden", "forbidden"),
    (NotFound, 404, "Not found", "not-found"),
    (Conflict, 409, "Conflict", "conflict"),
    (PreconditionFailed, 412, "Precondition failed", "stale-version"),
    (PayloadTooLarge, 413, "Request too large", "too-large"),
    (MalformedBody, 400, "Malformed body", "malformed-body"),
    (QuotaExceeded, 429, "Quota exceeded", "quota-exceeded"),
)


def problem(
    status: int,
    title: str,
    detail: str,
    *,
    kind: str | None = None,
    errors: Sequence[dict[str, str]] | None = None,
    headers: dict[str, str] | None = None,
    instance: str | None = None,
) -> JSONResponse:
    """Build an RFC 9457 problem+json response, its body a `Problem`.

    Args:
        status: the HTTP status, repeated in the body's `status`.
        title, detail: the body's `title` and `detail`.
        kind: short slug appended to the problem type URI; None gives "about:blank".
        errors: per-field problems, each {"field": ..., "message": ...} (extension member).
        headers: extra response headers (WWW-Authenticate, Retry-After, Accept).
        instance: the request path as the app sees it (percent-decoded); the body's
            `instance` is it percent-encoded again, a URI reference (RFC 9457 §3.1.5:
            a path of non-ASCII characters is not one). None leaves it out.

    Returns:
        A JSONResponse with media type application/problem+json.
    """
    content: Problem = {
        "type": TYPE_BASE + kind if kind else "about:blank",
        "title": title,
        "status": status,
        "detail": detail,
    }
    if instance:
        content["instance"] = quote(instance, safe=_PATH_SAFE)
    if errors:
        content["errors"] = [FieldError(field=e["field"], message=e["message"]) for e in errors]
    return JSONResponse(content, status_code=status, media_type=PROBLEM_JSON, headers=headers)


def _field(loc: Sequence[int | str]) -> str:
    parts = [str(p) for p in loc]
    if parts and parts[0] in ("body", "query", "path", "header"):
        parts = parts[1:]
    return ".".join(parts) or "body"


def _message(err: dict[str, Any]) -> str:
    kind = err.get("type", "")
    if kind == "extra_forbidden":
        return "unknown field"
    if kind == "missing":
        return "field required"
    msg = str(err.get("msg", "invalid"))
    return msg.removeprefix("Value error, ")


def _auth_problem(request: Request) -> JSONResponse | None:
    """401 problem when a /v1 route is called without a valid bearer token, else None."""
    path = request.url.path
    if not path.startswith("/v1/") or path.startswith("/v1/webhooks/"):
        return None  # webhooks authenticate with provider signatures, not bearer tokens
    ctx = request.app.state.ctx
    header = request.headers.get("authorization", "")
    scheme, _, credentials = header.partition(" ")
    try:
        if scheme.lower() != "bearer" or not credentials.strip():
            raise TokenError("missing bearer token (Authorization: Bearer <token>)")
        verify_token(credentials.strip(), key=ctx.jwt_key, settings=ctx.settings)
    except TokenError as exc:
        return _token_problem(request, exc)
    return None


def _token_problem(request: Request, exc: TokenError) -> JSONResponse:
    # RFC 6750 §3.1: a request without bearer credentials gets a challenge with no error
    # code; a bearer token that fails verification gets error="invalid_token".
    scheme, _, credentials = request.headers.get("authorization", "").partition(" ")
    presented = scheme.lower() == "bearer" and bool(credentials.strip())
    return problem(
        401,
        "Unauthorized",
        str(exc),
        kind="unauthorized",
        headers={"WWW-Authenticate": 'Bearer error="invalid_token"' if presented else "Bearer"},
        instance=request.url.path,
    )


def install_error_handlers(app: FastAPI) -> None:
    """Map every exception to problem+json; unexpected ones are logged and answer 500."""

    @app.exception_handler(RequestValidationError)
    async def validation(request: Request, exc: RequestValidationError) -> JSONResponse:
        # FastAPI parses the body before it runs the auth dependency; an unauthenticated
        # caller gets 401, not feedback on its payload.
        denied = _auth_problem(request)
        if denied is not None:
            return denied
        content_type = request.headers.get("content-type", "")
        media = content_type.split(";", 1)[0].strip().lower()
        body_errors = any(e.get("loc", ("",))[0] == "body" for e in exc.errors())
        if (
            request.method in ("POST", "PATCH", "PUT")
            and content_type
            and not (media == "application/json" or media.endswith("+json"))
            and (body_errors or media != "text/calendar")  # the import reads its own body
        ):
            return problem(
                415,
                "Unsupported media type",
                f"send the request body as application/json, not {media or content_type!r}",
                kind="unsupported-media-type",
                headers={"Accept": "application/json"},
                instance=request.url.path,
            )
        errs = list(exc.errors())
        if any(e.get("type") == "json_invalid" for e in errs):
            return problem(
                400,
                "Malformed JSON",
                "the request body is not valid JSON",
                kind="malformed-json",
                errors=[{"field": "body", "message": "invalid JSON"}],
                instance=request.url.path,
            )
        fields = [{"field": _field(e.get("loc", ())), "message": _message(e)} for e in errs]
        detail = "; ".join(f"{f['field']}: {f['message']}" for f in fields)
        return problem(
            422,
            "Invalid request",
            detail,
            kind="validation",
            errors=fields,
            instance=request.url.path,
        )

    @app.exception_handler(InvalidInput)
    async def invalid_input(request: Request, exc: InvalidInput) -> JSONResponse:
        return problem(
            422,
            "Invalid request",
            f"{exc.field}: {exc.reason}",
            kind="validation",
            errors=[{"field": exc.field, "message": exc.reason}],
            instance=request.url.path,
        )

    @app.exception_handler(DomainError)
    async def domain(request: Request, exc: DomainError) -> JSONResponse:
        status, title, kind = next(
            ((s, t, k) for family, s, t, k in _DOMAIN_PROBLEMS if isinstance(exc, family)),
            (400, "Bad request", "bad-request"),
        )
        challenge = exc.challenge if isinstance(exc, Unauthenticated) else None
        if isinstance(exc, QuotaExceeded):
            API_LIMITED.labels(limit=exc.quota).inc()
        return problem(
            status,
            title,
            str(exc),
            kind=kind,
            headers={"WWW-Authenticate": challenge} if challenge else None,
            instance=request.url.path,
        )

    @app.exception_handler(TokenError)
    async def token(request: Request, exc: TokenError) -> JSONResponse:
        return _token_problem(request, exc)

    @app.exception_handler(RequestTooLarge)
    async def too_large(request: Request, exc: RequestTooLarge) -> JSONResponse:
        return problem(
            413, "Request too large", exc.detail, kind="too-large", instance=request.url.path
        )

    @app.exception_handler(StarletteHTTPException)
    async def http(request: Request, exc: StarletteHTTPException) -> JSONResponse:
        if exc.status_code == 400:
            # FastAPI's body parser answers 400 for a body it cannot decode (not UTF-8,
            # RFC 8259 §8.1); like malformed JSON, and only after authentication.
            denied = _auth_problem(request)
            if denied is not None:
                return denied
            return problem(
                400,
                "Malformed JSON",
                "the request body is not valid JSON",
                kind="malformed-json",
                errors=[{"field": "body", "message": "invalid JSON"}],
                instance=request.url.path,
            )
        return problem(
            exc.status_code,
            str(exc.detail),
            str(exc.detail),
            headers=dict(exc.headers or {}),
            instance=request.url.path,
        )

    @app.exception_handler(InfrastructureError)
    async def unavailable(request: Request, exc: InfrastructureError) -> JSONResponse:
        log.warning("dependency unavailable on %s: %s", request.url.path, exc)
        dependency = exc.dependency or "database or profile service"
        return problem(
            503,
            "Service unavailable",
            exc.detail
            if isinstance(exc, ProfileDataError)  # broken profile data: say what is broken
            else str(exc)
            if isinstance(exc, UserMoving)
            else f"a dependency ({dependency}) is unavailable; retry shortly",
            kind="unavailable",
            headers={"Retry-After": "5"},
            instance=request.url.path,
        )

    async def database_unavailable(request: Request, exc: Exception) -> JSONResponse:
        # Connection refused or lost, server shutting down, pool exhausted, statement
        # timeout: retryable outages, not defects (a 500 would read as a bug to clients).
        log.warning("database unavailable on %s: %s", request.url.path, exc)
        return problem(
            503,
            "Service unavailable",
            "the database is unavailable; retry shortly",
            kind="unavailable",
            headers={"Retry-After": "5"},
            instance=request.url.path,
        )

    for outage in (sa_exc.OperationalError, sa_exc.InterfaceError, sa_exc.TimeoutError):
        app.add_exception_handler(outage, database_unavailable)

    async def client_disconnected(request: Request, _exc: Exception) -> Response:
        # The client closed its connection before its request body arrived (a timeout,
        # a cancelled upload): nothing of the route ran and nobody reads an answer. Not a
        # server error: recorded as 499, nginx's "client closed request".
        log.info("client disconnected before its request body: %s %s", request.method,
                 request.url.path)  # fmt: skip
        return Response(status_code=CLIENT_CLOSED_REQUEST)

    app.add_exception_handler(ClientDisconnect, client_disconnected)

    @app.exception_handler(Exception)
    async def unexpected(request: Request, _exc: Exception) -> JSONResponse:
        log.exception("unhandled error on %s %s", request.method, request.url.path)
        return problem(
            500,
            "Internal error",
            "an unexpected error occurred; it has been logged",
            kind="internal",
            instance=request.url.path,
        )
