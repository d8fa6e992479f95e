"""The rate limit's take as the middleware schedules it (reminder_api.ratelimit.PendingTake)
and the headers of a take (RatePolicy.headers).

Sources: draft-ietf-httpapi-ratelimit-headers-11 (`r` is the quota units left, never more
than the policy's quota `q`); the GCRA as docs/operations.md ("Fair limits") states it: a
TAT at or before now means the whole burst is available."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from reminder_api.ratelimit import PendingTake, RatePolicy
from reminder_core.store.rate_limits import Taken

T0 = datetime(2031, 5, 4, 12, 0, tzinfo=UTC)


def test_the_take_reads_the_clock_when_it_runs_not_when_the_request_arrived() -> None:
    # Adversarial trial, 2026-12-06: `now` was read on entering the middleware, before the
    # wait for an in-flight slot, so concurrent answers' `r` were not monotonic.
    times = [T0]
    seen: list[datetime] = []

    def take(_policy: RatePolicy, _user_id: str, now: datetime, _keep: bool) -> Taken:
        seen.append(now)
        return Taken(tat=now + timedelta(seconds=1), taken=True)

    pending = PendingTake(RatePolicy(60, 3), "u1", lambda: times[0], take)
    times[0] = T0 + timedelta(seconds=0.4)  # the request waited for a slot
    pending.run()
    assert seen == [T0 + timedelta(seconds=0.4)]
    assert pending.now == T0 + timedelta(seconds=0.4)
    pending.run()  # done once
    assert seen == [T0 + timedelta(seconds=0.4)]


def test_remaining_never_exceeds_the_quota() -> None:
    policy = RatePolicy(per_minute=5, burst=5)  # 12 s a request, 5 at once
    # A TAT in the past: the whole burst, not more.
    stale = policy.headers(Taken(tat=T0 - timedelta(seconds=30), taken=False), T0)
    assert stale["RateLimit"] == '"per-user";r=5;t=0'
    # A refused take at the edge: TAT 60 s ahead (5 x 12 s), nothing left; one request
    # fits again when the TAT is 48 s ahead, in 12 s.
    edge = policy.headers(Taken(tat=T0 + timedelta(seconds=60), taken=False), T0)
    assert edge["RateLimit"] == '"per-user";r=0;t=60'
    assert edge["Retry-After"] == "12"
