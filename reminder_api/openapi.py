"""The API's OpenAPI document and its offline docs pages: problem+json error responses,
the bearer scheme, and the limits the running configuration enforces."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from fastapi import FastAPI
from fastapi.openapi.utils import get_openapi
from pydantic import TypeAdapter

from reminder_api.errors import PROBLEM_JSON, Problem
from reminder_api.schemas import MAX_EXDATES_IN_REQUEST
from reminder_core.settings import Settings

TITLE = "Reminders"
DESCRIPTION = """\
One-time and recurring reminders (RFC 5545 RRULE), emailed at their local due time.

A reminder's `start_local` is a wall-clock time read in its `timezone` (an IANA zone) or,
when that is omitted, in the user's profile timezone; occurrences are expanded in local
time, so 08:30 stays 08:30 across DST changes. Every `/v1` route but the provider
webhooks needs a bearer JWT whose `sub` is the user (`reminders token --user ID` makes
one in development); a user sees only their own reminders, and the `/v1/admin` routes
need the operator scope.

Every error is an RFC 9457 problem (`application/problem+json`); a refused request
stores nothing. Load shedding and an unreachable database answer 503 with
`Retry-After`.
"""

#: Where the docs pages load Swagger UI's and ReDoc's files from (served by the app).
DOCS_ASSETS_URL = "/docs/assets"

SCHEMA_REF = "#/components/schemas/{model}"
PROBLEM_REF = {"$ref": SCHEMA_REF.format(model="Problem")}

#: Status -> (description, example problem) of each error status the API answers with.
ERRORS: dict[int, tuple[str, Problem]] = {
    400: (
        "The body is not valid JSON (or not UTF-8).",
        {
            "type": "/problems/malformed-json",
            "title": "Malformed JSON",
            "status": 400,
            "detail": "the request body is not valid JSON",
            "instance": "/v1/reminders",
            "errors": [{"field": "body", "message": "invalid JSON"}],
        },
    ),
    401: (
        "No bearer token, or one that fails verification (`WWW-Authenticate: Bearer`,"
        ' with `error="invalid_token"` for a bad one, RFC 6750 §3.1).',
        {
            "type": "/problems/unauthorized",
            "title": "Unauthorized",
            "status": 401,
            "detail": "missing bearer token (Authorization: Bearer <token>)",
            "instance": "/v1/reminders",
        },
    ),
    403: (
        "A valid token without the scope this route needs.",
        {
            "type": "/problems/forbidden",
            "title": "Forbidden",
            "status": 403,
            "detail": "this needs a token with the reminders:admin scope",
            "instance": "/v1/admin/overview",
        },
    ),
    404: (
        "No such reminder, or another user's.",
        {
            "type": "/problems/not-found",
            "title": "Not found",
            "status": 404,
            "detail": "reminder 0b6f3a52-4c1e-4e8a-9a57-2f4ad1d2c8e1 not found",
            "instance": "/v1/reminders/0b6f3a52-4c1e-4e8a-9a57-2f4ad1d2c8e1",
        },
    ),
    409: (
        "The reminder's state does not allow this, or an idempotency key was already used"
        " with another body.",
        {
            "type": "/problems/conflict",
            "title": "Conflict",
            "status": 409,
            "detail": "reminder is cancelled; only live reminders can be paused",
            "instance": "/v1/reminders/0b6f3a52-4c1e-4e8a-9a57-2f4ad1d2c8e1/pause",
        },
    ),
    412: (
        "`If-Match` names a version that is no longer current: re-read and retry.",
        {
            "type": "/problems/stale-version",
            "title": "Precondition failed",
            "status": 412,
            "detail": 'If-Match "1" does not match the current version "2"; re-read the'
            " reminder and try again",
            "instance": "/v1/reminders/0b6f3a52-4c1e-4e8a-9a57-2f4ad1d2c8e1",
        },
    ),
    413: (
        "The body is over 64 KiB.",
        {
            "type": "/problems/too-large",
            "title": "Request too large",
            "status": 413,
            "detail": "request bodies are limited to 65536 bytes",
            "instance": "/v1/reminders",
        },
    ),
    415: (
        "The body is not `application/json`.",
        {
            "type": "/problems/unsupported-media-type",
            "title": "Unsupported media type",
            "status": 415,
            "detail": "send the request body as application/json, not 'text/plain'",
            "instance": "/v1/reminders",
        },
    ),
    422: (
        "A field, query parameter or header is refused; `errors` names each one and why.",
        {
            "type": "/problems/validation",
            "title": "Invalid request",
            "status": 422,
            "detail": "start_local: field required",
            "instance": "/v1/reminders",
            "errors": [{"field": "start_local", "message": "field required"}],
        },
    ),
    429: (
        "Past the user's request rate limit (`RATE_LIMIT_PER_MINUTE`, `RATE_LIMIT_BURST`):"
        " retry after `Retry-After` seconds. Or past a quota (`type`"
        " `/problems/quota-exceeded`, the quota named in `detail`, no `Retry-After`):"
        " nothing was stored.",
        {
            "type": "/problems/rate-limited",
            "title": "Too many requests",
            "status": 429,
            "detail": "more than 600 requests a minute (bursts of 100); retry after the time"
            " Retry-After gives",
            "instance": "/v1/reminders",
        },
    ),
    503: (
        "The server sheds load, or the database or the profile service is unavailable;"
        " retry after `Retry-After` seconds.",
        {
            "type": "/problems/unavailable",
            "title": "Service unavailable",
            "status": 503,
            "detail": "the database is unavailable; retry shortly",
            "instance": "/v1/reminders",
        },
    ),
}

#: Response headers that always come with an error status (reminder_api.errors,
#: reminder_api.overload).
ERROR_HEADERS: dict[int, dict[str, Any]] = {
    401: {
        "WWW-Authenticate": {
            "description": "The bearer challenge (RFC 6750 §3): `Bearer`, or"
            ' `Bearer error="invalid_token"` for a token that failed verification.',
            "required": True,
            "schema": {"type": "string"},
        }
    },
    415: {
        "Accept": {
            "description": "The media type the body must have: `application/json`.",
            "required": True,
            "schema": {"type": "string"},
        }
    },
    429: {
        "Retry-After": {
            "description": "Seconds to wait before retrying (RFC 9110 §10.2.3); absent when"
            " a quota, not the rate limit, refused the request.",
            "required": False,
            "schema": {"type": "integer", "minimum": 1},
        },
    },
    503: {
        "Retry-After": {
            "description": "Seconds to wait before retrying (RFC 9110 §10.2.3).",
            "required": True,
            "schema": {"type": "integer", "minimum": 0},
        }
    },
}

#: The request budget of the token's user, on every answer of a bearer-authenticated
#: operation while the rate limit is on (reminder_api.ratelimit;
#: draft-ietf-httpapi-ratelimit-headers).
RATE_LIMIT_HEADERS: dict[str, Any] = {
    "RateLimit-Policy": {
        "description": 'The user\'s budget: `"per-user";q=<burst>;w=<seconds to refill it>`.',
        "required": False,
        "schema": {"type": "string"},
    },
    "RateLimit": {
        "description": 'What is left of it: `"per-user";r=<requests left>;t=<seconds until'
        " it is whole again>`.",
        "required": False,
        "schema": {"type": "string"},
    },
}
ERROR_HEADERS[429] |= RATE_LIMIT_HEADERS

#: The `ETag` of a response that carries a reminder: its version, for `If-Match`.
ETAG_HEADER = {
    "ETag": {
        "description": 'The reminder\'s version as an entity tag (`"3"`), for `If-Match`.',
        "required": True,
        "schema": {"type": "string"},
    }
}

#: Answered by every bearer-authenticated route: the token check, the user's rate limit,
#: and the load shedding or database outage that any of them may meet.
AUTHENTICATED_ERRORS = (401, 429, 503)
#: Answered by every route with a JSON request body: FastAPI's body parser and BodyLimit.
BODY_ERRORS = (400, 413, 415, 422)


def problem_responses(*statuses: int) -> dict[int | str, dict[str, Any]]:
    """The `responses=` entries of a route for the error statuses it answers with.

    Args:
        statuses: HTTP statuses, each a key of `ERRORS`.

    Returns:
        {status: {"description": ..., "content": {"application/problem+json": ...}}},
        each with the `Problem` schema and an example.

    Raises:
        KeyError: a status the API never answers with.
    """
    return {status: _problem_response(status) for status in statuses}


def _problem_response(status: int) -> dict[str, Any]:
    description, example = ERRORS[status]
    response: dict[str, Any] = {
        "description": description,
        "content": {PROBLEM_JSON: {"schema": PROBLEM_REF, "example": example}},
    }
    if status in ERROR_HEADERS:
        response["headers"] = ERROR_HEADERS[status]
    return response


def install_openapi(app: FastAPI, settings: Settings) -> None:
    """Make `app.openapi()` (and so /openapi.json, /docs, /redoc) return `build_openapi`'s
    document, built once on first use.

    Args:
        app: the application, every route included.
        settings: the configuration whose limits the document states (MAX_EXDATES).
    """

    def openapi() -> dict[str, Any]:
        if app.openapi_schema is None:
            app.openapi_schema = build_openapi(app, settings)
        return app.openapi_schema

    app.openapi = openapi  # type: ignore[method-assign]  # FastAPI's documented override


def build_openapi(app: FastAPI, settings: Settings) -> dict[str, Any]:
    """The OpenAPI 3.1 document of `app`'s routes, made true to what the API answers:

    - the `Problem` schema (reminder_api.errors) for every error response, in place of
      FastAPI's `HTTPValidationError` (the API never answers with that shape);
    - 401, 429 and 503 on every bearer-authenticated operation, and the RateLimit
      headers on its successes; 400, 413, 415 and 422 on every
      one with a JSON body;
    - the bearer scheme stated as a JWT;
    - `exdates`' maxItems as enforced: the smaller of the parse bound and MAX_EXDATES.

    Returns:
        The document as JSON-ready dicts and lists.
    """
    doc = get_openapi(
        title=app.title,
        version=app.version,
        openapi_version=app.openapi_version,
        description=app.description,
        routes=app.routes,
        tags=app.openapi_tags,
    )
    schemas: dict[str, Any] = doc.setdefault("components", {}).setdefault("schemas", {})
    problem_schema = TypeAdapter(Problem).json_schema(ref_template=SCHEMA_REF)
    schemas.update(problem_schema.pop("$defs", {}))
    schemas["Problem"] = problem_schema
    for name in ("HTTPValidationError", "ValidationError"):
        schemas.pop(name, None)
    for scheme in doc["components"].get("securitySchemes", {}).values():
        if scheme.get("scheme") == "bearer":
            scheme["bearerFormat"] = "JWT"
    for operation in _operations(doc):
        _document_errors(operation)
    max_exdates = min(MAX_EXDATES_IN_REQUEST, settings.max_exdates)
    for schema in schemas.values():
        exdates = schema.get("properties", {}).get("exdates")
        for variant in _variants(exdates or {}):
            if variant.get("type") == "array":
                variant["maxItems"] = max_exdates
    return doc


def _operations(doc: dict[str, Any]) -> Iterator[dict[str, Any]]:
    for item in doc.get("paths", {}).values():
        for method, operation in item.items():
            if method in ("get", "put", "post", "delete", "patch", "head", "options"):
                yield operation


def _variants(schema: dict[str, Any]) -> list[dict[str, Any]]:
    """A schema and its anyOf members (a nullable field is anyOf [T, null])."""
    return [schema, *schema.get("anyOf", ())]


def _document_errors(operation: dict[str, Any]) -> None:
    responses: dict[str, Any] = operation["responses"]
    statuses: list[int] = []
    if operation.get("security"):
        statuses.extend(AUTHENTICATED_ERRORS)
        for code, response in responses.items():
            if int(code) < 400:
                response["headers"] = response.get("headers", {}) | RATE_LIMIT_HEADERS
    # FastAPI adds its own 422 to a route with parameters or a parsed body; ours is a
    # problem. A route that reads its body raw (the webhooks) has no 422 and states its
    # own errors.
    parsed = "422" in responses
    if parsed and "application/json" in operation.get("requestBody", {}).get("content", {}):
        statuses.extend(BODY_ERRORS)
    if parsed:
        statuses.append(422)
    for status in statuses:
        responses[str(status)] = _problem_response(status)
    for code, response in responses.items():
        if int(code) >= 400 and "content" not in response:  # stated by the route
            response["content"] = {PROBLEM_JSON: {"schema": PROBLEM_REF}}
    operation["responses"] = dict(sorted(responses.items()))


def docs_parameters() -> dict[str, Any]:
    """Swagger UI's configuration: no online validator badge (it would call
    validator.swagger.io), the token kept across reloads."""
    return {"validatorUrl": None, "persistAuthorization": True}
