"""Request-scoped dependencies: the app context, a database connection, the current user."""

from __future__ import annotations

import functools
import time
from collections.abc import Awaitable, Callable
from contextvars import ContextVar
from dataclasses import dataclass, field
from datetime import datetime
from typing import ParamSpec, Protocol, TypeVar

from cachetools import TTLCache
from fastapi import Request
from fastapi.dependencies.models import Dependant
from fastapi.openapi.models import HTTPBearer as HTTPBearerModel
from fastapi.routing import APIRoute
from fastapi.security.base import SecurityBase
from sqlalchemy import Connection, Engine

from reminder_api.threads import ROUTE_THREADS
from reminder_core.cell_directory import CellRouting
from reminder_core.cells import DEFAULT_CELL, cell_settings
from reminder_core.errors import Forbidden, InvalidInput, UserMoving
from reminder_core.profiles import ProfileSource
from reminder_core.queue import Queue, open_queue
from reminder_core.scheduling import ScheduleConfig
from reminder_core.settings import Settings
from reminder_core.store import cell_moves
from reminder_core.store.rate_limits import RateTake
from reminder_core.tokens import ADMIN_SCOPE, Principal, TokenError, verify_principal


@dataclass
class AppContext:
    """Everything a request handler needs, built once in `create_app()`."""

    settings: Settings
    engine: Engine
    profiles: ProfileSource
    clock: Callable[[], datetime]
    jwt_key: str
    schedule_config: ScheduleConfig
    #: token -> (subject, exp as Unix seconds) of tokens verified in the last minute: a
    #: client sends the same token on every request, and verifying it (HMAC, JSON, claims)
    #: was ~6% of a create's CPU (issue 15). A hit is still refused once `exp` passes.
    #: Used only on the event loop (`principal_of` runs there): no lock.
    verified_tokens: TTLCache[str, Principal] = field(
        default_factory=lambda: TTLCache(maxsize=10_000, ttl=60)
    )

    #: With CELLS: the directory and each cell's engine; None for one cell (`engine`).
    cells: CellRouting | None = None

    #: The queue the workers use (QUEUE_URL), opened on first use by the admin routes
    #: (depth, dead letters, replay); nothing is called over the network before.
    _queue: Queue | None = field(default=None, repr=False)
    _cell_queues: dict[str, Queue] = field(default_factory=dict, repr=False)

    def queue(self) -> Queue:
        """The queue of QUEUE_URL on this context's engine (built once, lazily)."""
        if self._queue is None:
            s = self.settings
            self._queue = open_queue(
                s.queue_url, self.engine, max_receive_count=s.max_receive_count,
                sqs_endpoint_url=s.sqs_endpoint_url, aws_region=s.aws_region,
                sqs_wait_time_s=0,
            )  # fmt: skip
        return self._queue

    def engine_for(self, user_id: str | None) -> Engine:
        """The engine of `user_id`'s cell (docs/design.md, "Cells"): `engine` with one cell
        or without a user (the admin routes: the first cell's).

        Raises:
            sqlalchemy.exc.OperationalError: a new user's cell could not be looked up.
        """
        if self.cells is None or user_id is None:
            return self.engine
        return self.cells.engine_for(user_id)

    def each_engine(self) -> list[Engine]:
        """Every cell's engine, in CELLS order (`engine` alone with one cell): for a lookup
        by a secret that does not say whose it is (the calendar feed's URL)."""
        if self.cells is None:
            return [self.engine]
        return [engine for _, engine in self.cells.all_engines()]

    def cell_scope(self, cell: str | None) -> tuple[Engine, Queue, Settings]:
        """The engine, queue and settings (DATABASE_URL, QUEUE_URL, CELL) of one cell, for
        the operators' routes' `cell` parameter; None: the first cell's (with CELLS,
        its settings name it). Queues are built once per cell, lazily.

        Raises:
            InvalidInput: (`cell`) no such cell, or a cell named without CELLS (but
                `default`).
        """
        if self.cells is None and cell in (None, DEFAULT_CELL):
            return self.engine, self.queue(), self.settings
        if cell is None:  # with CELLS: the first cell, named as such
            assert self.cells is not None
            cell = next(iter(self.cells.directory.cells))
        if self.cells is None or cell not in self.cells.directory.cells:
            known = ", ".join(self.cells.directory.cells) if self.cells else DEFAULT_CELL
            raise InvalidInput("cell", f"no such cell (the cells are: {known})")
        found = self.cells.directory.cells[cell]
        engine = self.cells.engine_of(found)
        queue = self._cell_queues.get(cell)
        if queue is None:
            s = self.settings
            queue = self._cell_queues.setdefault(
                cell,
                open_queue(
                    found.queue_url, engine, max_receive_count=s.max_receive_count,
                    sqs_endpoint_url=s.sqs_endpoint_url, aws_region=s.aws_region,
                    sqs_wait_time_s=0,
                ),
            )  # fmt: skip
        settings = cell_settings(self.settings.model_copy(update={"cell": cell}))
        return engine, queue, settings

    def connect(self, user_id: str | None = None, *, reads_only: bool = False) -> Connection:
        """A pooled connection for one request, used as `with ctx.connect(user_id) as conn:`
        inside the (sync) route, so that checkout, queries and return to the pool happen
        in the route's worker thread: one thread hop per request, and the event loop never
        waits on the pool or the database. The route commits; anything not committed (an
        error) is rolled back when the connection goes back to the pool.

        With CELLS, a request that may write first takes the user's shared move lock and
        reads their move marker in the transaction it then writes in (docs/design.md,
        "Moving a user between cells"): a user being moved gets UserMoving instead of a
        write to a cell being emptied, and is looked up afresh in the directory next time.

        Args:
            user_id: whose data the request reads or writes: the connection is to their
                cell (`engine_for`).
            reads_only: the request writes nothing (no move lock, no marker read: a
                reader during a move sees the rows as frozen).

        Raises:
            UserMoving: the user is being moved between cells (answered 503).
            sqlalchemy.exc.OperationalError: the database cannot be reached (answered 503).
        """
        engine = self.engine_for(user_id)
        kept = KEPT_CONNECTION.get()
        if kept is not None and kept[0] is engine:  # the rate limit's, left for this route
            KEPT_CONNECTION.set(None)
            conn = kept[1]
        else:
            release_kept()  # another cell's: never hold two connections for one request
            conn = engine.connect()
        if self.cells is None or user_id is None or reads_only:
            return conn
        try:
            cell_moves.lock_shared(conn, user_id=user_id)
            marker = cell_moves.get(conn, user_id=user_id)
        except BaseException:
            conn.close()
            raise
        if marker is not None:
            conn.close()
            self.cells.directory.forget(user_id)
            raise UserMoving(user_id, marker.to_cell)
        return conn


P = ParamSpec("P")
R = TypeVar("R")


class RouteBodyCheck(Protocol):
    """What a counted request must pass before its route's side effects: the rate
    limit's take (`reminder_api.ratelimit.PendingTake`)."""

    def check(self, *, keep: bool = True) -> None:
        """Take now, unless done (blocking: in the route's worker thread). With `keep`,
        the connection the take used is left for the route (`keep_for_route`).

        Raises:
            RateRefused: the request is past the budget; the route must not go on.
        """

    @property
    def skipped(self) -> bool:
        """The take was tried and the database could not do it: the request goes on
        unlimited."""

    def adopt(self) -> RateTake:
        """The take, to be run by the route's own first statement
        (`services.reminders.create`'s `take`) at the time its `clock` reads as that
        statement starts; until its outcome is recorded the request is counted when its
        response starts, as one that ran no route body."""


#: The check the current request must pass in its route's worker thread before the route
#: body runs, or None: the rate limit's take (`reminder_api.ratelimit`), done there to
#: save a thread hop of its own (issue 15). The worker thread runs in a copy of the
#: request's context, so it sees the value the middleware set.
ROUTE_BODY_CHECK: ContextVar[RouteBodyCheck | None] = ContextVar("route_body_check", default=None)

#: The request's check, left by `in_worker_thread_checking_in_body` to the route body
#: (`check_left_to_route`); None in any other route.
CHECK_LEFT_TO_ROUTE: ContextVar[RouteBodyCheck | None] = ContextVar(
    "check_left_to_route", default=None
)


def check_left_to_route() -> RouteBodyCheck | None:
    """The request's check, for a route decorated with `in_worker_thread_checking_in_body`
    to run itself before its first side effect (`check()`) or in its first statement
    (`adopt()`); None when the request has none (no rate limit, or not counted)."""
    return CHECK_LEFT_TO_ROUTE.get()


#: A pooled connection (with its engine) that the request's check checked out in the
#: route's worker thread and left for the route body: the route's first `ctx.connect` to
#: that engine takes it instead of a checkout of its own (one checkout per request, not
#: two: issue 15). What the route does not take is returned to the pool when the route
#: body ends (`_checked`).
KEPT_CONNECTION: ContextVar[tuple[Engine, Connection] | None] = ContextVar(
    "kept_connection", default=None
)


def keep_for_route(engine: Engine, conn: Connection) -> None:
    """Leave `conn` (of `engine`, outside any transaction) for the route body about to run
    in this worker thread (see KEPT_CONNECTION); call only from a ROUTE_BODY_CHECK."""
    release_kept()
    KEPT_CONNECTION.set((engine, conn))


def release_kept() -> None:
    """Return a kept connection the route did not take to the pool (none: nothing)."""
    kept = KEPT_CONNECTION.get()
    if kept is not None:
        KEPT_CONNECTION.set(None)
        kept[1].close()


def _checked(route: Callable[P, R], *args: P.args, **kwargs: P.kwargs) -> R:
    check = ROUTE_BODY_CHECK.get()
    if check is None:
        return route(*args, **kwargs)
    try:
        check.check()
        return route(*args, **kwargs)
    finally:
        release_kept()


def _checked_in_body(route: Callable[P, R], *args: P.args, **kwargs: P.kwargs) -> R:
    check = ROUTE_BODY_CHECK.get()
    if check is None:
        return route(*args, **kwargs)
    token = CHECK_LEFT_TO_ROUTE.set(check)
    try:
        return route(*args, **kwargs)
    finally:
        CHECK_LEFT_TO_ROUTE.reset(token)
        release_kept()


async def run_route_body(route: Callable[P, R], *args: P.args, **kwargs: P.kwargs) -> R:
    """Run the blocking `route(*args, **kwargs)` in a worker thread, after the request's
    `ROUTE_BODY_CHECK`: how a coroutine route runs its side effects (the calendar import).

    Raises:
        whatever the check raises (the route did not run), or the route raises.
    """
    return await ROUTE_THREADS.run(functools.partial(_checked, route, *args, **kwargs))


def in_worker_thread(route: Callable[P, R]) -> Callable[P, Awaitable[R]]:
    """Decorate a blocking (sync) route so that FastAPI sees a coroutine that runs the
    whole route in one worker thread, after the request's `ROUTE_BODY_CHECK`.

    FastAPI runs a sync route in a worker thread and then validates its return value in a
    second one (`serialize_response` with `is_coroutine=False`): two thread hops per
    request, ~0.2 ms of CPU each on this machine (issue 15). Decorated, the route body
    (connection checkout, queries, profile lookups: everything that blocks) runs in one
    thread, and the returned model is validated and serialized on the event loop (cheap:
    an instance of the response model is not validated again). Signature and annotations
    are the route's (`functools.wraps`: FastAPI reads the unwrapped function's).
    """

    @functools.wraps(route)
    async def offloaded(*args: P.args, **kwargs: P.kwargs) -> R:
        return await ROUTE_THREADS.run(functools.partial(_checked, route, *args, **kwargs))

    offloaded.runs_route_body_check = True  # type: ignore[attr-defined]
    return offloaded


def in_worker_thread_checking_in_body(route: Callable[P, R]) -> Callable[P, Awaitable[R]]:
    """`in_worker_thread`, with the request's `ROUTE_BODY_CHECK` left to the route body
    (`check_left_to_route`) instead of run before it: `POST /v1/reminders` runs the rate
    limit's take in its one statement (one round trip fewer per create, issue 15). The
    route must `check()` before its first side effect, or `adopt` the take into its first
    statement; one that fails first is counted when its response starts."""

    @functools.wraps(route)
    async def offloaded(*args: P.args, **kwargs: P.kwargs) -> R:
        return await ROUTE_THREADS.run(functools.partial(_checked_in_body, route, *args, **kwargs))

    offloaded.runs_route_body_check = True  # type: ignore[attr-defined]
    return offloaded


async def context(request: Request) -> AppContext:
    ctx: AppContext = request.app.state.ctx
    return ctx


#: Longer tokens are verified every time (a cache of huge keys would be a memory lever).
MAX_CACHED_TOKEN_CHARS = 2048

#: The bearer scheme's description in the OpenAPI document.
BEARER_DESCRIPTION = "JWT from `reminders token --user ID`"


def principal_of(authorization: str | None, ctx: AppContext) -> Principal:
    """The subject and scopes of the bearer token in an `Authorization` header value
    (RFC 6750 §2.1: `Bearer <token>`; the scheme case-insensitive, RFC 9110 §11.1),
    verified with `ctx.jwt_key` or found in `ctx.verified_tokens` (cached there,
    unexpired).

    Raises:
        TokenError: missing, malformed, expired or foreign token (answered 401).
    """
    scheme, _, token = (authorization or "").partition(" ")
    token = token.strip()
    if scheme.lower() != "bearer" or not token:
        raise TokenError("missing bearer token (Authorization: Bearer <token>)")
    cached = ctx.verified_tokens.get(token)
    if cached is not None and time.time() < cached.expires_at:
        return cached
    principal = verify_principal(token, key=ctx.jwt_key, settings=ctx.settings)
    if len(token) <= MAX_CACHED_TOKEN_CHARS:
        ctx.verified_tokens[token] = principal
    return principal


class _BearerDependency(SecurityBase):
    """The HTTP bearer scheme as one dependency without sub-dependencies: FastAPI solves
    each dependency of a request in its own recursive step (~25 µs each on this machine,
    issue 15), so the header is read and the token verified here instead of through
    HTTPBearer, a context dependency and a principal dependency. Being a SecurityBase
    named as HTTPBearer names itself, it is documented in OpenAPI as HTTPBearer was."""

    def __init__(self) -> None:
        self.model = HTTPBearerModel(description=BEARER_DESCRIPTION)
        self.scheme_name = "HTTPBearer"


class _CurrentUser(_BearerDependency):
    async def __call__(self, request: Request) -> str:
        """The user id (`sub`) of the request's valid bearer token.

        Raises:
            TokenError: missing, malformed, expired or foreign token (answered 401).
        """
        ctx: AppContext = request.app.state.ctx
        return principal_of(request.headers.get("authorization"), ctx).subject


class _CurrentAdmin(_BearerDependency):
    async def __call__(self, request: Request) -> Principal:
        """The principal of a valid bearer token with the operator scope
        (`reminders:admin`, `reminders token --admin`).

        Raises:
            TokenError: missing, malformed, expired or foreign token (answered 401).
            Forbidden: a valid token without that scope (answered 403).
        """
        ctx: AppContext = request.app.state.ctx
        principal = principal_of(request.headers.get("authorization"), ctx)
        if not principal.admin:
            raise Forbidden(f"this needs a token with the {ADMIN_SCOPE} scope")
        return principal


#: `Depends(current_user)`: the user id (`sub`) of the request's valid bearer token
#: (TokenError, answered 401, without one).
current_user = _CurrentUser()
#: `Depends(current_admin)`: the Principal of a valid bearer token with the operator
#: scope (TokenError 401 without a valid token, Forbidden 403 without the scope).
current_admin = _CurrentAdmin()


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


async def reject_unknown_query(request: Request) -> None:
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
