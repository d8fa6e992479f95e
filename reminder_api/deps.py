"""Request-scoped dependencies: the app context, a database connection, the current user."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass
from datetime import datetime

from fastapi import Depends, Request
from fastapi.dependencies.models import Dependant
from fastapi.routing import APIRoute
from fastapi.security import HTTPAuthorizationCredentials, HTTPBearer
from sqlalchemy import Connection, Engine

from reminder_core.errors import InvalidInput
from reminder_core.profiles import ProfileSource
from reminder_core.scheduling import ScheduleConfig
from reminder_core.settings import Settings
from reminder_core.tokens import TokenError, verify_token


@dataclass
class AppContext:
    """Everything a request handler needs, built once in `create_app()`."""

    settings: Settings
    engine: Engine
    profiles: ProfileSource
    clock: Callable[[], datetime]
    jwt_key: str
    schedule_config: ScheduleConfig


def context(request: Request) -> AppContext:
    ctx: AppContext = request.app.state.ctx
    return ctx


def db_connection(ctx: AppContext = Depends(context)) -> Iterator[Connection]:
    """A connection per request, in a transaction that the route commits; anything not
    committed (an error) is rolled back when the connection is returned to the pool."""
    with ctx.engine.connect() as conn:
        yield conn


_bearer = HTTPBearer(auto_error=False, description="JWT from `reminders token --user ID`")


def current_user(
    creds: HTTPAuthorizationCredentials | None = Depends(_bearer),
    ctx: AppContext = Depends(context),
) -> str:
    """The user id (`sub`) of a valid bearer token.

    Raises:
        TokenError: missing, malformed, expired or foreign token (answered 401).
    """
    if creds is None or creds.scheme.lower() != "bearer" or not creds.credentials:
        raise TokenError("missing bearer token (Authorization: Bearer <token>)")
    return verify_token(creds.credentials, key=ctx.jwt_key, settings=ctx.settings)


def _query_names(route: APIRoute) -> frozenset[str]:
    """The query parameters `route` declares, its dependencies' included (a walk of a few
    objects, done only for a request that has a query string)."""
    names: set[str] = set()
    pending: list[Dependant] = [route.dependant]
    while pending:
        dependant = pending.pop()
        names.update(p.alias for p in dependant.query_params)
        pending.extend(dependant.dependencies)
    return frozenset(names)


def reject_unknown_query(request: Request) -> None:
    """Refuse a query parameter the endpoint does not declare, instead of ignoring it
    (issue 14: `POST /v1/occurrences:preview?limit=100000` was silently ignored).

    Raises:
        InvalidInput: (the parameter's name) answered 422.
    """
    if not request.query_params:
        return
    route = request.scope.get("route")
    if not isinstance(route, APIRoute):
        return
    declared = _query_names(route)
    for name in sorted(set(request.query_params) - declared):
        takes = ", ".join(sorted(declared)) if declared else "none"
        raise InvalidInput(
            name,
            f"is not a query parameter of {request.method} {route.path} (it takes: {takes}); "
            "body members go in the JSON body",
        )
