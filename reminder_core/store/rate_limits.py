"""Typed statements on `rate_limits` (`sql/rate_limits.sql`; docs/operations.md, "Fair
limits"). Every function runs on the caller's `Connection` and never commits."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime

from sqlalchemy import Connection

from reminder_core.store._statements import query, records, run


@dataclass(frozen=True, slots=True)
class Taken:
    """The outcome of `take`: `taken` True when the request fits the budget; `tat` the
    user's theoretical arrival time after the statement (aware UTC), None when unknown
    (refused against a row inserted by a concurrent request)."""

    tat: datetime | None
    taken: bool


@dataclass(frozen=True, slots=True)
class RateTake:
    """A take (`take`'s rule) to run inside another write's statement instead of in one of
    its own (`reminders.insert_within_bound`: one round trip fewer per create, issue 15).

    Attributes:
        emission_s: seconds one request costs (60 / requests per minute).
        tolerance_s: how far after now the TAT may be (burst x emission_s).
        clock: the take's time (aware UTC), read just before its statement is sent.
        record: called with the outcome as soon as the statement has run (the caller's
            bookkeeping: the response's RateLimit headers, the request counted once).
    """

    emission_s: float
    tolerance_s: float
    clock: Callable[[], datetime]
    record: Callable[[Taken], None]


def take(
    conn: Connection,
    *,
    user_id: str,
    now: datetime,
    emission_s: float,
    tolerance_s: float,
    autocommit: bool = False,
) -> Taken:
    """Take one request from `user_id`'s budget at `now` (aware UTC), GCRA: each request
    moves the TAT on by `emission_s` (60 / requests per minute), and is refused when the
    TAT would end up more than `tolerance_s` (burst x emission_s) after `now`; a refused
    request changes nothing (`rate_limit_take`).

    Side effects: inserts or updates the user's row, row-locked until the caller's
    transaction ends (commit at once), or, with `autocommit`, committed as the statement
    runs (`conn` must be outside a transaction; it is left so, in its isolation level).
    """
    rows = records(
        Taken,
        run(
            conn,
            query("rate_limit_take"),
            {
                "user_id": user_id,
                "take_now": now,
                "emission_s": emission_s,
                "tolerance_s": tolerance_s,
            },
            autocommit=autocommit,
        ),
    )
    return rows[0] if rows else Taken(tat=None, taken=False)
