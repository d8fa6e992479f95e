"""What to do with occurrences that are already due when the sender gets to them.

Pure code (docs/design.md, "Missed runs"). The sender lists every due occurrence of a
reminder, oldest first, from the one in hand up to `now`, and this module decides which
one to send now and which to record as `missed`:

- `latest` (default): send the latest due occurrence; every older one is missed. After
  downtime a daily reminder sends one email, never a burst.
- `skip`: anything more than `max_lateness_s` late is missed; the oldest one within the
  cap is sent (the next ones follow as they come due). An occurrence held by quiet hours
  is late from the hold's end.
- `all`: send the oldest; the others follow one by one, oldest first.
"""

from __future__ import annotations

import itertools
from collections.abc import Sequence
from datetime import datetime
from typing import Literal

from reminder_core.record import record

MisfirePolicy = Literal["latest", "skip", "all"]


@record
class MisfirePlan:
    """send: the occurrence to send now (None: nothing); missed: occurrences to record."""

    send: datetime | None
    missed: tuple[datetime, ...]


def plan_misfire(
    policy: MisfirePolicy,
    due: Sequence[datetime],
    *,
    now: datetime,
    max_lateness_s: float,
    held_until: datetime | None = None,
) -> MisfirePlan:
    """Decide which due occurrence to send.

    Args:
        policy: the reminder's misfire policy.
        due: due occurrences, ascending, non-empty, each <= `now` or the first one a little
            ahead (aware UTC).
        now: aware UTC.
        max_lateness_s: lateness cap for `skip`, seconds.
        held_until: aware UTC; the user's quiet hours held these occurrences until then
            (reminder_core.domain.quiet_hours): the lateness of one due earlier counts
            from `held_until`, so a hold is never read as a misfire.

    Returns:
        The plan; `send` is one of `due` or None, `missed` the ones before it (all of
        them when `send` is None, for `skip`).

    Raises:
        ValueError: `due` is empty or unsorted.
    """
    if not due:
        raise ValueError("due must not be empty")
    if any(b <= a for a, b in itertools.pairwise(due)):
        raise ValueError("due must be strictly ascending")
    if policy == "all":
        return MisfirePlan(send=due[0], missed=())
    if policy == "latest":
        return MisfirePlan(send=due[-1], missed=tuple(due[:-1]))

    def lateness_s(d: datetime) -> float:
        since = max(d, held_until) if held_until is not None else d
        return (now - since).total_seconds()

    late = tuple(d for d in due if lateness_s(d) > max_lateness_s)
    rest = due[len(late) :]
    return MisfirePlan(send=rest[0] if rest else None, missed=late)
