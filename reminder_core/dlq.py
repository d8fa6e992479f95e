"""Dead-letter queue operations behind `reminders dlq` (list, replay, purge)."""

from __future__ import annotations

import time
from collections.abc import Callable, Collection, Sequence
from dataclasses import dataclass, field, replace
from datetime import datetime, timedelta

from sqlalchemy import Engine

from reminder_core.domain.states import DeliveryStatus
from reminder_core.messages import MalformedMessage, OccurrenceMessage
from reminder_core.queue import DeadLetter, Queue
from reminder_core.store import delivery_log

#: Seconds between two passes while waiting for held dead letters.
POLL_S = 1.0
#: Most dead letters one pass reads (the SQS backend scans at most 10,000).
_SCAN_LIMIT = 100_000
#: While the count of held letters does not change, progress is reported this often.
_PROGRESS_EVERY_S = 10.0
#: Delivery states of an occurrence the provider accepted: its dead letter is not replayed.
_DELIVERED = frozenset({DeliveryStatus.SENT, DeliveryStatus.BOUNCED, DeliveryStatus.COMPLAINED})

Progress = Callable[[int, float], None]
"""Called while waiting: (dead letters still held by another reader, seconds left)."""

OnePass = Callable[[frozenset[str] | None, datetime], tuple[Collection[str], Collection[str]]]
"""One pass of an operation: (ids still to act on, None: every letter; now) -> (ids of the
letters its scan saw, ids it acted on)."""


@dataclass(frozen=True, slots=True)
class Unreached:
    """Dead letters a `replay` or `purge` could not act on.

    Attributes:
        missing_ids: ids asked for that are not in the dead-letter queue, in the order
            asked.
        held: dead letters known to exist that it could not reach because another reader
            held them invisible (SQS hides a received message for its visibility timeout)
            until the wait was over; always 0 on PostgreSQL.
        held_ids: the ids of those that are known (asked for, or seen by a scan before
            another reader took them), in the order asked or seen; `held` may count more.
        waited_s: seconds the operation took, waiting included.
    """

    missing_ids: tuple[str, ...] = ()
    held: int = 0
    held_ids: tuple[str, ...] = ()
    waited_s: float = 0.0


@dataclass(frozen=True, slots=True)
class ReplayReport:
    """redriven: messages sent back to the queue; already_done: dead letters whose
    occurrence had been delivered meanwhile (deleted, not sent again); malformed: dead
    letters that are no occurrence message (`messages.MalformedMessage`: nothing could ever
    send them; deleted); unreached: what it could not act on."""

    redriven: int
    already_done: int
    malformed: int = 0
    unreached: Unreached = field(default_factory=Unreached)

    @property
    def missing(self) -> int:
        """How many ids asked for are not in the dead-letter queue."""
        return len(self.unreached.missing_ids)

    @property
    def missing_ids(self) -> tuple[str, ...]:
        """The ids asked for that are not in the dead-letter queue, in the order asked."""
        return self.unreached.missing_ids


@dataclass(frozen=True, slots=True)
class PurgeReport:
    """purged: dead letters deleted; unreached: what it could not delete."""

    purged: int
    unreached: Unreached = field(default_factory=Unreached)


def replay(
    engine: Engine,
    queue: Queue,
    message_ids: Sequence[str] | None,
    *,
    now: datetime,
    lease_s: float = 0.0,
    wait_s: float = 0.0,
    progress: Progress | None = None,
) -> ReplayReport:
    """Send dead letters back to the queue, safely.

    An occurrence that was delivered after all (its delivery row is `sent`, `bounced` or
    `complained`) is not sent again: its dead letter is deleted. A body that is no
    occurrence message is deleted too. Otherwise the delivery row becomes `sending` with no
    lease and the message is redriven, marked as a replay (the sender then sends exactly
    that occurrence, unless its reminder was cancelled or paused meanwhile).

    Dead letters known to exist but held invisible by another reader (see `_sweep`) are
    waited for, up to `wait_s` seconds, trying again every `POLL_S` seconds; those still
    held then are reported in `unreached.held`.

    Args:
        message_ids: dead-letter ids to replay; None for all of them.
        now: aware UTC, when it starts (later passes add the time elapsed).
        lease_s: DELIVERY_LEASE_S; a `sending` row locked less than this long ago is held
            by a live sender and left to it (the replayed message waits out the lease).
        wait_s: seconds to wait, at most, for held dead letters (0: one pass, no wait).
        progress: called while waiting (see `Progress`).

    Side effects: commits the delivery rows' changes before each redrive; moves and
    deletes dead letters.

    Raises:
        InfrastructureError: the queue could not be used; what was done stays done.
    """
    replayer = _Replayer(engine, queue, lease_s)
    unreached = _sweep(queue, message_ids, replayer, now=now, wait_s=wait_s, progress=progress)
    return ReplayReport(
        redriven=replayer.redriven,
        already_done=replayer.already_done,
        malformed=replayer.malformed,
        unreached=unreached,
    )


def list_dead_letters(queue: Queue, *, limit: int = 1000) -> list[DeadLetter]:
    """The dead letters, oldest first."""
    return queue.dead_letters(limit=limit)


def purge(
    queue: Queue,
    message_ids: Sequence[str] | None,
    *,
    now: datetime,
    wait_s: float = 0.0,
    progress: Progress | None = None,
) -> PurgeReport:
    """Delete dead letters (None: all). Their occurrences stay recorded as `failed`.

    Held dead letters are waited for as by `replay` (same arguments).

    Raises:
        InfrastructureError: the queue could not be used; what was deleted stays deleted.
    """
    purger = _Purger(queue)
    unreached = _sweep(queue, message_ids, purger, now=now, wait_s=wait_s, progress=progress)
    return PurgeReport(purged=purger.purged, unreached=unreached)


# --- passes --------------------------------------------------------------------------


class _Replayer:
    """The passes of one `replay`, counting what they did."""

    def __init__(self, engine: Engine, queue: Queue, lease_s: float) -> None:
        self._engine = engine
        self._queue = queue
        self._lease_s = lease_s
        self.redriven = self.already_done = self.malformed = 0

    def __call__(
        self, pending: frozenset[str] | None, now: datetime
    ) -> tuple[list[str], list[str]]:
        letters = self._queue.dead_letters(limit=_SCAN_LIMIT)
        chosen = [d for d in letters if pending is None or d.message_id in pending]
        redrive, delivered, malformed = self._prepare(chosen, now)
        moved = self._queue.redrive(redrive, now=now)
        dropped = self._queue.delete_dead_letters(delivered + malformed)
        self.redriven += len(moved)
        self.already_done += len(set(dropped).intersection(delivered))
        self.malformed += len(set(dropped).intersection(malformed))
        return [d.message_id for d in letters], moved + dropped

    def _prepare(
        self, letters: list[DeadLetter], now: datetime
    ) -> tuple[list[str], list[str], list[str]]:
        """Sort letters into (to redrive, delivered meanwhile, malformed); ready the
        delivery row of each one to redrive (committed)."""
        redrive: list[str] = []
        delivered: list[str] = []
        malformed: list[str] = []
        with self._engine.begin() as conn:
            for letter in letters:
                try:
                    reminder_id, run_time = OccurrenceMessage.decode(letter.body).key
                except MalformedMessage:
                    malformed.append(letter.message_id)
                    continue
                status = delivery_log.get_status(
                    conn, reminder_id=reminder_id, run_time_utc=run_time
                )
                if status in _DELIVERED:
                    delivered.append(letter.message_id)
                    continue
                delivery_log.prepare_replay(
                    conn,
                    reminder_id=reminder_id,
                    run_time_utc=run_time,
                    now=now,
                    lease_cutoff=now - timedelta(seconds=self._lease_s),
                )
                redrive.append(letter.message_id)
        return redrive, delivered, malformed


class _Purger:
    """The passes of one `purge`, counting what they deleted."""

    def __init__(self, queue: Queue) -> None:
        self._queue = queue
        self.purged = 0

    def __call__(
        self,
        pending: frozenset[str] | None,
        now: datetime,  # noqa: ARG002  # a purge changes no row
    ) -> tuple[list[str], list[str]]:
        if pending is None:
            deleted = self._queue.delete_dead_letters(None)
            seen = deleted
        else:
            seen = [d.message_id for d in self._queue.dead_letters(limit=_SCAN_LIMIT)]
            deleted = self._queue.delete_dead_letters([i for i in seen if i in pending])
        self.purged += len(deleted)
        return seen, deleted


# --- waiting for held letters ----------------------------------------------------------


def _sweep(
    queue: Queue,
    wanted: Sequence[str] | None,
    one_pass: OnePass,
    *,
    now: datetime,
    wait_s: float,
    progress: Progress | None,
    poll_s: float = POLL_S,
    clock: Callable[[], float] = time.monotonic,
    sleep: Callable[[float], None] = time.sleep,
) -> Unreached:
    """Run `one_pass` until it has reached every dead letter known to exist, or until
    `wait_s` seconds are over (a pass every `poll_s` seconds, the last one at the end).

    SQS cannot receive a message another reader holds (received, for its visibility
    timeout; AWS SQS Developer Guide, "visibility timeout"), so a scan does not see it.
    Before each pass the DLQ's held count is read (`QueueDepth.dead_lettered_held`: SQS's
    ApproximateNumberOfMessagesNotVisible, while this process holds none): the letters held
    before the first pass are known to exist and waited for, until as many new letters have
    been seen since; an id asked for and not seen is waited for while any are. On
    PostgreSQL nothing is ever held, so this is one pass.
    """
    start = clock()
    tally = Tally(wanted)
    reported: tuple[int, float] | None = None
    at = now  # the first pass at `now` itself, the later ones as much later as they run
    while True:
        held_before = queue.depth(now=at).dead_lettered_held
        seen, acted = one_pass(tally.pending(), at)
        unreached = tally.add(held_before, seen, acted)
        elapsed = clock() - start
        if not unreached.held or elapsed >= wait_s:
            return replace(unreached, waited_s=elapsed)
        if progress is not None and (
            reported is None
            or reported[0] != unreached.held
            or clock() - reported[1] >= _PROGRESS_EVERY_S
        ):
            progress(unreached.held, wait_s - elapsed)
            reported = (unreached.held, clock())
        sleep(min(poll_s, wait_s - elapsed))  # the last pass at the end of the wait
        at = now + timedelta(seconds=clock() - start)


class Tally:
    """What the passes of one `replay` or `purge` have reached, and what is still out of
    reach (pure: `_sweep` feeds it one pass at a time).

    Args:
        wanted: the ids asked for (None: every dead letter).
    """

    def __init__(self, wanted: Sequence[str] | None) -> None:
        self._wanted = None if wanted is None else tuple(dict.fromkeys(wanted))
        self._seen: dict[str, None] = {}  # ids any scan saw, in the order first seen
        self._done: set[str] = set()
        self._hidden: int | None = None  # held before the first pass, not seen since

    def pending(self) -> frozenset[str] | None:
        """The ids asked for not acted on yet (None: every letter)."""
        return None if self._wanted is None else frozenset(self._wanted) - self._done

    def add(self, held_before: int, seen: Collection[str], acted: Collection[str]) -> Unreached:
        """Count one pass: `held_before` letters were held when it began; its scan saw
        `seen`, and it acted on `acted`. Returns what is out of reach after it."""
        new = [i for i in seen if i not in self._seen]
        if self._hidden is None:
            self._hidden = held_before
        else:  # a letter seen for the first time is (likely) one that was held
            self._hidden = max(0, self._hidden - len(new))
        self._seen.update(dict.fromkeys(new))
        self._done.update(acted)
        hidden = min(held_before, self._hidden)
        just_seen = set(seen)

        def taken(i: str) -> bool:
            # Seen, then not acted on: another reader took it between the scan and the
            # act. Held (back later) or gone (that reader replayed or purged it): waited
            # for while the DLQ counts held letters, or while this pass saw it.
            return i in self._seen and i not in self._done and (held_before > 0 or i in just_seen)

        if self._wanted is None:
            held_ids = tuple(i for i in self._seen if taken(i))
            return Unreached(held=hidden + len(held_ids), held_ids=held_ids)
        pending = [i for i in self._wanted if i not in self._done]
        held_ids = tuple(i for i in pending if taken(i) or (i not in self._seen and hidden))
        missing = tuple(i for i in pending if i not in held_ids)
        return Unreached(missing_ids=missing, held=len(held_ids), held_ids=held_ids)
