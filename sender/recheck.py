"""The mid-batch re-read: a cancel, pause or reschedule reaches sends not started yet."""

from __future__ import annotations

import math
import threading
import time
from collections.abc import Sequence

from sqlalchemy import Engine
from sqlalchemy.exc import DBAPIError

from reminder_core.domain.states import ReminderStatus
from reminder_core.store import reminders
from sender.begin import still_due
from sender.work import Begun, log

#: The fewest sends one re-read covers (a first re-read knows no send rate yet).
MIN_CHUNK = 32
#: A re-read covers the sends expected to start within this many intervals after it (at
#: the rate they started since the last one): a margin for a rate that rises.
CHUNK_INTERVALS = 2.0


class Recheck:
    """A batch's reminders as last read, while its sends go on.

    No send starts on a read of its reminder older than `interval_s` (the begin
    transaction's read counts as the first): a send whose last read is older reads again
    first (one query, by one of the send threads, the others wait for it), so a slow
    provider and a large batch do not widen the window in which a cancel is missed. A
    re-read covers that send and the next ones not started yet, as many as are expected to
    start within `CHUNK_INTERVALS` intervals at the rate sends have been starting (at least
    `MIN_CHUNK`): reading every send not started yet, as a first version did, read most
    rows of a large batch several times, and a send the chunk misses reads again itself.
    A replay is withdrawn when its reminder was cancelled or paused, any other occurrence
    when it is no longer the reminder's due one (the rules of the begin stage).

    Args:
        engine: database engine.
        begun: the batch's occurrences to send, in the order their sends start (roughly:
            with several send threads a later one may start first).
        interval_s: seconds after which a send reads again first.
    """

    def __init__(self, engine: Engine, begun: Sequence[Begun], *, interval_s: float) -> None:
        self._engine = engine
        self.interval_s = interval_s
        now = time.monotonic()  # just read by the begin stage
        self._order = list(begun)
        self._next = 0  # in _order: no send before this one is still waiting
        # The sends not started yet, by idempotency key (a str: its hash is cached, a
        # UUID's is computed in Python on every lookup): when their reminder was last read.
        self._read_at = dict.fromkeys((b.key for b in begun), now)
        self._withdrawn: set[str] = set()  # idempotency keys
        self._started = 0  # sends started so far
        self._rate_from = (now, 0)  # (monotonic time, sends started) of the last re-read
        self._lock = threading.Lock()

    def withdrawn(self, begun: Begun) -> bool:
        """True when `begun`'s reminder no longer wants its occurrence, as last read
        (reading again first when that read is older than `interval_s`); otherwise the
        send counts as started from now on and is not re-read again.

        Side effects: may run one query (`reminders.get_many_send_state`); a database
        error is logged and the send goes ahead on the earlier read.
        """
        key = begun.key
        with self._lock:
            self._started += 1
            read_at = self._read_at.pop(key, None)
            if read_at is not None and time.monotonic() - read_at >= self.interval_s:
                self._reread(begun)
            return key in self._withdrawn

    def _chunk(self, first: Begun) -> list[Begun]:
        """`first` and the next sends not started yet, in start order, as many as are
        expected to start within CHUNK_INTERVALS intervals (at least MIN_CHUNK)."""
        now = time.monotonic()
        since, started = self._rate_from
        size = chunk_size(self._started - started, now - since, self.interval_s)
        self._rate_from = (now, self._started)
        order, waiting = self._order, self._read_at
        while self._next < len(order) and order[self._next].key not in waiting:
            self._next += 1
        chunk = [first]
        for b in order[self._next :]:
            if len(chunk) >= size:
                break
            if b.key in waiting:
                chunk.append(b)
        return chunk

    def _reread(self, first: Begun) -> None:
        """Read the reminders of `first` and of the chunk of sends after it (`_chunk`);
        a database error leaves them on their earlier read (the send goes ahead: the
        begin transaction checked it)."""
        chunk = self._chunk(first)
        read_at = time.monotonic()  # the read reflects the database from this instant on
        try:
            with self._engine.connect() as conn:
                # A statement of its own (no BEGIN and ROLLBACK round trips; docs/design.md,
                # "Statements of a batch"): a read that takes no locks.
                found = reminders.get_many_send_state(
                    conn, [b.occurrence.reminder_id for b in chunk], autocommit=True
                )
        except DBAPIError as exc:
            log.warning(
                "could not read the batch's reminders again; sending on the earlier read: %s",
                exc.orig if exc.orig is not None else exc,
            )
        else:
            states = {r.id.int: r for r in found}  # UUID.int: a C hash, not UUID.__hash__
            for b in chunk:
                occ = b.occurrence
                reminder = states.get(occ.reminder_id.int)
                if (
                    reminder is None
                    or (
                        occ.replay
                        and reminder.status in (ReminderStatus.CANCELLED, ReminderStatus.PAUSED)
                    )
                    or (not occ.replay and not still_due(reminder, occ.run_time_utc))
                ):
                    self._withdrawn.add(b.key)
        waiting = self._read_at
        for b in chunk[1:]:  # `first` has started: it is no longer waiting
            waiting[b.key] = read_at


def chunk_size(started: int, elapsed_s: float, interval_s: float) -> int:
    """How many sends one re-read covers: those expected to start within CHUNK_INTERVALS
    intervals of `interval_s` seconds, at the rate of the `started` sends of the last
    `elapsed_s` seconds (≥ 0), and at least MIN_CHUNK."""
    rate = started / max(elapsed_s, 1e-3)  # sends per second
    return max(MIN_CHUNK, math.ceil(rate * interval_s * CHUNK_INTERVALS))
