"""ASGI middleware: the per-user request rate limit of the /v1 API (docs/operations.md,
"Fair limits"), one budget per token subject shared by every API process.

The budget is a GCRA (generic cell rate algorithm, ITU-T I.371; the leaky bucket as a
meter): each request moves the user's theoretical arrival time (TAT) on by the emission
interval `60 / RATE_LIMIT_PER_MINUTE` seconds, and a request that would put the TAT more
than `RATE_LIMIT_BURST` intervals after now is refused. The TAT is one row per user in
PostgreSQL (`reminder_core.store.rate_limits`), moved by one atomic upsert, so several API
processes cannot overspend it. A refused request is answered 429 problem+json with
`Retry-After` (RFC 9110 §10.2.3, RFC 6585 §4); every limited response, refused or not,
carries `RateLimit-Policy` and `RateLimit` (draft-ietf-httpapi-ratelimit-headers-11:
Structured Field lists, `"<policy>";q=<quota>;w=<window s>` and `"<policy>";r=<remaining>;
t=<seconds until the quota is whole again>`).

Only bearer-authenticated /v1 requests with a valid token are counted: webhooks, health,
readiness, metrics and the console are not /v1-bearer paths, and a request without a
valid token is left to the route's 401. When the database cannot be reached the request
is let through unlimited (the route itself then answers 503 if it needs the database).
"""

from __future__ import annotations

import logging
import math
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime

from sqlalchemy import exc as sa_exc
from starlette.datastructures import Headers, MutableHeaders
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from reminder_api.deps import ROUTE_BODY_CHECK, AppContext, keep_for_route, principal_of
from reminder_api.errors import problem
from reminder_api.threads import ROUTE_THREADS
from reminder_core.errors import RateRefused
from reminder_core.metrics import API_LIMITED
from reminder_core.store import rate_limits
from reminder_core.store.rate_limits import RateTake, Taken
from reminder_core.tokens import TokenError

log = logging.getLogger(__name__)

#: The policy's name in `RateLimit-Policy` and `RateLimit`.
POLICY_NAME = "per-user"


@dataclass(frozen=True, slots=True)
class RatePolicy:
    """A GCRA budget: `per_minute` requests a minute (> 0), up to `burst` (>= 1) at once."""

    per_minute: int
    burst: int

    @property
    def emission_s(self) -> float:
        """Seconds one request costs: 60 / per_minute, to the microsecond (PostgreSQL
        keeps the TAT to the microsecond: a cost it would round at every take made 7 a
        minute in bursts of 7 refuse the seventh at one instant; adversarial trial,
        2026-12-06)."""
        return round(60.0 / self.per_minute, 6)

    @property
    def tolerance_s(self) -> float:
        """How far ahead of now the TAT may be after a request: burst x emission_s."""
        return self.burst * self.emission_s

    def policy_header(self) -> str:
        """`RateLimit-Policy`: the burst as quota, over the seconds it takes to refill
        (rounded up to whole seconds, as the draft's `w` is an Integer)."""
        return f'"{POLICY_NAME}";q={self.burst};w={_whole_seconds(self.tolerance_s)}'

    def headers(self, taken: Taken, now: datetime) -> dict[str, str]:
        """`RateLimit-Policy` and `RateLimit` after `taken` at `now` (aware UTC), and for
        a refused request `Retry-After` (whole seconds, at least 1): when one request
        fits again. An unknown TAT (a concurrent first request) counts as a spent
        budget."""
        # A TAT in the past is a full budget (a read of the row can be older than `now`).
        ahead_s = max(0.0, (taken.tat - now).total_seconds()) if taken.tat else self.tolerance_s
        remaining = max(0, math.floor((self.tolerance_s - ahead_s) / self.emission_s + 1e-9))
        reset_s = _whole_seconds(ahead_s)
        out = {
            "RateLimit-Policy": self.policy_header(),
            "RateLimit": f'"{POLICY_NAME}";r={remaining};t={reset_s}',
        }
        if not taken.taken:
            wait_s = ahead_s - self.tolerance_s + self.emission_s
            out["Retry-After"] = str(max(1, math.ceil(wait_s - 1e-9)))
        return out


def _whole_seconds(s: float) -> int:
    """`s` (>= 0) rounded up to whole seconds for a header, ignoring the microseconds a
    cost rounded to the microsecond adds up to (7 a minute: w=60, not 61)."""
    return max(0, math.ceil(round(s, 3)))


def is_limited_path(path: str) -> bool:
    """True for the bearer-authenticated API (/v1/...), except the provider webhooks."""
    return path.startswith("/v1/") and not path.startswith("/v1/webhooks/")


@dataclass(slots=True)
class PendingTake:
    """One counted request's take, done once: in the route's worker thread before the
    route body (`take_in_route_thread`), else by the middleware when the response starts.

    Attributes:
        clock: the app's clock (aware UTC), read once, as the take starts: after the
            request's wait for an in-flight slot, so that the takes' `now` follow the
            order they reach the database in and concurrent answers' `RateLimit` counts
            go down as their takes commit (adversarial trial, 2026-12-06: `r` was
            2, 1, 4, 1, 0 with `now` read on entering the middleware).
        now: the time of the take, None before it.
        taken: the outcome once taken; None before, or when the database could not be
            reached (`skipped`).
        skipped: the take was attempted and the database could not take it (unreachable,
            or read-only): the request is let through unlimited and answered without
            rate-limit headers.
    """

    policy: RatePolicy
    user_id: str
    clock: Callable[[], datetime]
    take: Callable[[RatePolicy, str, datetime, bool], Taken]
    now: datetime | None = None
    taken: Taken | None = None
    skipped: bool = False

    @property
    def done(self) -> bool:
        return self.taken is not None or self.skipped

    def check(self, *, keep: bool = True) -> None:
        """Take here, in the route's worker thread, before the route body runs (the
        `reminder_api.deps.ROUTE_BODY_CHECK` of the request): no thread hop of its own.
        With `keep`, the take's connection is left for the route body.

        Raises:
            RateRefused: the request is past the budget; the route must not run.
        """
        taken = self.run(keep=keep)
        if taken is not None and not taken.taken:
            raise RateRefused(self.user_id)

    def adopt(self) -> RateTake:
        """The take for the route's own first statement; its `clock` is read (and kept
        as the take's `now`) as that statement starts, so that concurrent takes' `now`
        follow the order they reach the database in, as `run`'s (adversarial trial,
        2026-12-06: read before the create's schedule was computed, `r` went 4, 2, 2, 1,
        0); `record` notes the outcome. Until then the take is not done: a route that
        fails before it is counted when its response starts."""
        return RateTake(
            emission_s=self.policy.emission_s,
            tolerance_s=self.policy.tolerance_s,
            clock=self._now,
            record=self._record,
        )

    def _now(self) -> datetime:
        self.now = now = self.clock()
        return now

    def _record(self, taken: Taken) -> None:
        self.taken = taken

    def run(self, *, keep: bool = False) -> Taken | None:
        """Take (blocking: call in a worker thread) unless done; the outcome, None when
        the database is unavailable (logged once). With `keep`, the connection the take
        used is left for the route body about to run (`reminder_api.deps.keep_for_route`)."""
        if not self.done:
            self.now = now = self.clock()
            try:
                self.taken = self.take(self.policy, self.user_id, now, keep)
            except (sa_exc.DBAPIError, sa_exc.TimeoutError) as exc:
                # Unreachable, or reachable and unable to write (a primary demoted to
                # read-only, a failover onto a standby): the request goes on unlimited,
                # and a route that needs the database answers for itself.
                log.warning("rate limit not checked (database unavailable): %s", exc)
                self.skipped = True
        return self.taken


class RateLimit:
    """Count each authenticated /v1 request against its user's budget; refuse with 429.

    The take runs where it costs least and still precedes every side effect: a route
    decorated with `in_worker_thread` (every /v1 route that touches the database) takes
    in its own worker thread before its body (`ROUTE_BODY_CHECK`); a request that never
    reaches a route body (refused by validation, authorisation or routing: nothing was
    done) is taken when its response starts, and a refused one has that response
    replaced by the 429. An undecorated route with side effects must run its body
    through `run_route_body` (tests/integration/test_api_limits.py checks that every /v1
    route does one or the other).

    Args:
        ctx: the app's context (engine, clock, token verification and its cache).
        policy: the budget; None turns the middleware into a pass-through
            (RATE_LIMIT_PER_MINUTE=0).

    Side effects: one upsert of the user's `rate_limits` row per counted request, one
    statement in autocommit (its own transaction: a request that fails still counts).
    """

    def __init__(self, app: ASGIApp, *, ctx: AppContext, policy: RatePolicy | None) -> None:
        self.app = app
        self.ctx = ctx
        self.policy = policy

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        policy = self.policy
        if policy is None or scope["type"] != "http" or not is_limited_path(scope["path"]):
            await self.app(scope, receive, send)
            return
        user_id = self._subject(scope)
        if user_id is None:  # the route answers 401
            await self.app(scope, receive, send)
            return
        pending = PendingTake(policy, user_id, self.ctx.clock, self._take)
        replaced = False

        async def send_counted(message: Message) -> None:
            nonlocal replaced
            if replaced:
                return  # the rest of a response refused after the fact
            if message["type"] == "http.response.start":
                if not pending.done:  # no route body ran: count the request now
                    await ROUTE_THREADS.run(pending.run)
                if pending.taken is not None and not pending.taken.taken:
                    replaced = True
                    await self._refuse(pending, scope, receive, send)
                    return
                if pending.taken is not None:
                    assert pending.now is not None  # set with taken
                    MutableHeaders(scope=message).update(policy.headers(pending.taken, pending.now))
            await send(message)

        token = ROUTE_BODY_CHECK.set(pending)
        try:
            await self.app(scope, receive, send_counted)
        except RateRefused:
            await self._refuse(pending, scope, receive, send)
        finally:
            ROUTE_BODY_CHECK.reset(token)

    async def _refuse(
        self, pending: PendingTake, scope: Scope, receive: Receive, send: Send
    ) -> None:
        """Answer the refused request 429 problem+json with `Retry-After` and the
        RateLimit headers."""
        assert pending.taken is not None
        assert pending.now is not None
        policy = pending.policy
        API_LIMITED.labels(limit="rate").inc()
        response = problem(
            429,
            "Too many requests",
            f"more than {policy.per_minute} requests a minute (bursts of {policy.burst});"
            " retry after the time Retry-After gives",
            kind="rate-limited",
            headers=policy.headers(pending.taken, pending.now),
            instance=scope["path"],
        )
        await response(scope, receive, send)

    def _subject(self, scope: Scope) -> str | None:
        """The `sub` of the request's valid bearer token (verified as the routes do, and
        cached there for them), else None."""
        try:
            principal = principal_of(Headers(scope=scope).get("authorization"), self.ctx)
        except TokenError:
            return None
        return principal.subject

    def _take(self, policy: RatePolicy, user_id: str, now: datetime, keep: bool) -> Taken:
        """Take one request from `user_id`'s budget at `now`, in autocommit (a statement
        committed as it runs: the request counts even when the route fails), on a
        connection checked out here and left outside a transaction, in the engine's
        isolation level. With `keep` (in the route's worker thread, before its body) the
        connection is left for the route (`keep_for_route`); else it goes back to the
        pool at once.

        Raises:
            sqlalchemy.exc.DBAPIError, sqlalchemy.exc.TimeoutError: no take (the caller
                lets the request through); no connection is kept.
        """
        engine = self.ctx.engine_for(user_id)
        conn = engine.connect()
        try:
            taken = rate_limits.take(
                conn, user_id=user_id, now=now, emission_s=policy.emission_s,
                tolerance_s=policy.tolerance_s, autocommit=True,
            )  # fmt: skip
        except BaseException:
            conn.close()
            raise
        if keep:
            keep_for_route(engine, conn)
        else:
            conn.close()
        return taken


def policy_of(per_minute: int, burst: int) -> RatePolicy | None:
    """The budget of RATE_LIMIT_PER_MINUTE and RATE_LIMIT_BURST; None when the limit is 0
    (off)."""
    return RatePolicy(per_minute=per_minute, burst=burst) if per_minute > 0 else None
