"""Complete stage: a streaming completer that records each send's outcome within
milliseconds of the provider's answer, in group commits (docs/design.md, "Sender").

Model: River's batch completer (`internal/jobcompleter/job_completer.go`): outcomes are
buffered as the send threads report them and written by one thread, one statement per
flush, so a crash repeats at most the accepted sends of the flush under way, never those
of a whole batch.
"""

from __future__ import annotations

import threading
import time
import uuid
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from datetime import datetime

from sqlalchemy import Connection, Engine
from sqlalchemy.exc import DataError, DBAPIError, IntegrityError, StatementError
from tenacity import (
    Retrying,
    retry_if_exception,
    stop_after_delay,
    wait_exponential_jitter,
)

from reminder_core.domain.states import DeliveryStatus
from reminder_core.metrics import (
    COMPLETER_FLUSHED,
    COMPLETER_FLUSHES,
    COMPLETER_UNRECORDED,
    COMPLETER_WAIT,
)
from reminder_core.record import record
from reminder_core.store import delivery_log
from reminder_core.store.delivery_log import DeliveryOutcome
from reminder_core.text import (
    MAX_ERROR,
    MAX_MESSAGE_ID,
    escaped,
    storable_error,
    storable_message_id,
)
from sender.work import Outcome, SendResult, log

#: Seconds without an outcome after which the completer gives its connection back to the
#: pool (it keeps it across the batches of a busy sender: no checkout, no ping, per flush).
IDLE_RELEASE_S = 1.0
#: After a flush that took d seconds the completer rests d * d / REST_REFERENCE_S (at
#: most REST_MAX_S) before the next: as long as the flush took when that was 2.5 ms, ten
#: times as long when it took 25 ms. A flush takes 1-3 ms on an idle machine (the rest
#: stays under SENDER_FLUSH_INTERVAL_S: outcomes are written at once) and tens of ms when
#: the cores are saturated, where a statement per few outcomes cost up to a fifth of the
#: rate in bench/end_to_end.py: the busier the machine, the fewer and larger the flushes.
REST_REFERENCE_S = 0.0025
#: The longest rest: an outcome is never held longer than this plus a flush by the rule
#: (after one slow statement, say), nor past its batch's end.
REST_MAX_S = 1.0


class FlushFailed(Exception):
    """The completer could not record some outcomes within its retry budget: their rows
    stay `sending` under this sender's lease, which ends without a heartbeat, and the
    next receiver takes them over (a possible duplicate, counted)."""


class OutcomeUnrecorded(Exception):
    """The database refused the row of one outcome, even with its provider text escaped
    (Completer._write_each): the outcome was not recorded, and its message comes back
    after its visibility timeout, to be taken over once the lease ends."""


@record
class Recorded:
    """A send whose outcome the completer wrote (or found it could not: `recorded` False
    means the row's lease was taken over or the row was ended by someone else, or, with
    `refused`, that the database refused the row); with `finished`, the flush also
    finished its one-time reminder (`delivery_complete_many`)."""

    result: SendResult
    recorded: bool
    finished: bool = False  # its one-time reminder was finished by the same statement
    refused: bool = False  # the database refused its row (OutcomeUnrecorded)


@dataclass(frozen=True, slots=True)
class FlushStats:
    """Counters of a completer since it started (for the benchmark and logs).

    Attributes:
        flushes: statements written.
        results: outcomes recorded.
        wait_s: total seconds from answers to their commit (mean: wait_s / results).
        span_s: seconds from the first flush's start to the last one's.
    """

    flushes: int
    results: int
    wait_s: float
    span_s: float

    @property
    def mean_size(self) -> float:
        return self.results / self.flushes if self.flushes else 0.0

    @property
    def mean_interval_s(self) -> float:
        return self.span_s / (self.flushes - 1) if self.flushes > 1 else 0.0

    @property
    def mean_wait_s(self) -> float:
        return self.wait_s / self.results if self.results else 0.0


class Completer:
    """Group-commits send outcomes as they arrive.

    A flush starts as soon as an outcome is waiting, the previous flush started at least
    `flush_interval_s` ago and the thread has rested after that flush in proportion to its
    duration squared (see REST_REFERENCE_S: a slow flush means a busy machine), or at once
    when `flush_max` outcomes are waiting or the batch is over (`drain`): a lone answer is
    written within one statement's time, a busy sender writes at most one statement per
    interval, and none later than the batch's end. Each flush is one autocommit statement
    (`delivery_complete_many`) on a connection the completer keeps while busy: sent and
    failed rows completed, retried and released ones given back, each fenced by its own
    lease token (a row taken over meanwhile is left to its holder).

    A flush that fails is retried (exponential backoff with jitter) for up to
    `retry_budget_s`; after a failure whose commit is unknown, the rows that the failed
    attempt did record are found by the flush's timestamp and not recorded twice.

    Args:
        engine: database engine.
        flush_interval_s: seconds between the starts of two flushes at most.
        flush_max: outcomes that start a flush at once.
        clock: current time for the rows' updated_at, aware UTC.
        retry_budget_s: seconds a failing flush is retried for (then FlushFailed).
        rest_reference_s: the flush duration after which the rest equals the flush's
            own duration (the rest grows with the square of the flush's duration).
        rest_max_s: seconds the completer rests at most.
        name: thread name prefix.
    """

    def __init__(
        self,
        engine: Engine,
        *,
        flush_interval_s: float,
        flush_max: int,
        clock: Callable[[], datetime],
        retry_budget_s: float,
        rest_reference_s: float = REST_REFERENCE_S,
        rest_max_s: float = REST_MAX_S,
        name: str = "sender",
    ) -> None:
        self._engine = engine
        self.flush_interval_s = flush_interval_s
        self.rest_reference_s = rest_reference_s
        self.rest_max_s = rest_max_s
        self.flush_max = max(1, flush_max)
        self._clock = clock
        self.retry_budget_s = retry_budget_s
        self._name = name
        self._cond = threading.Condition()
        self._buffer: list[tuple[SendResult, float]] = []  # (result, answered at)
        self._done: list[Recorded] = []
        self._failure: BaseException | None = None
        self._flushing = False
        self._draining = False
        self._closing = False
        self._last_start = self._last_end = float("-inf")
        self._last_duration = 0.0
        self._thread: threading.Thread | None = None
        self._conn: Connection | None = None
        self._flushes = self._results = 0
        self._wait_s = 0.0
        self._first_start: float | None = None

    def submit(self, result: SendResult) -> None:
        """Buffer one outcome (thread-safe; called by the send threads as each send
        ends). Withdrawn sends are not written here: `drain` returns them as they are."""
        with self._cond:
            self._ensure_thread()
            self._buffer.append((result, time.monotonic()))
            # Wake the thread only when it may be waiting for this: the first outcome
            # (it waits for one), or flush_max of them (it waits out the interval);
            # a wake-up per outcome costs more CPU than the flush it would bring forward.
            if len(self._buffer) == 1 or len(self._buffer) >= self.flush_max:
                self._cond.notify_all()

    def drain(self) -> list[Recorded]:
        """Flush what is buffered now and wait for every flush; returns the outcomes
        handled since the last drain, in the order they were recorded.

        Raises:
            FlushFailed: some outcomes could not be written (the others are returned by
                the next drain).
        """
        with self._cond:
            self._draining = True
            self._cond.notify_all()
            while self._buffer or self._flushing:
                self._cond.wait()
            self._draining = False
            done, self._done = self._done, []
            failure, self._failure = self._failure, None
        if failure is not None:
            raise FlushFailed(str(failure)) from failure
        return done

    def stats(self) -> FlushStats:
        """The completer's counters so far."""
        with self._cond:
            span = self._last_start - self._first_start if self._first_start else 0.0
            return FlushStats(self._flushes, self._results, self._wait_s, max(0.0, span))

    def close(self) -> None:
        """Flush what is buffered, stop the thread, close the connection."""
        with self._cond:
            self._closing = True
            self._cond.notify_all()
        if self._thread is not None:
            self._thread.join()
        self._release_connection()

    # --- the completer thread ---------------------------------------------------------

    def _ensure_thread(self) -> None:
        if self._thread is None or not self._thread.is_alive():
            self._thread = threading.Thread(
                target=self._run, name=f"{self._name}-completer", daemon=True
            )
            self._thread.start()

    def _run(self) -> None:
        while True:
            with self._cond:
                taken = self._next_group()
                if taken is None:
                    return
                self._flushing = True
                started = self._last_start = time.monotonic()
                if self._first_start is None:
                    self._first_start = started
            try:
                recorded = self._flush([r for r, _ in taken])
                failure: BaseException | None = None
            except Exception as exc:  # reported by drain(); the thread carries on
                recorded, failure = [], exc
            committed = time.monotonic()
            with self._cond:
                self._flushing = False
                self._last_end, self._last_duration = committed, committed - started
                self._account(taken, recorded, failure, committed)
                self._cond.notify_all()

    def _next_group(self) -> list[tuple[SendResult, float]] | None:
        """Wait (holding the condition) for the next group to flush; None to stop."""
        while not self._buffer:
            if self._closing:
                return None
            if not self._cond.wait(IDLE_RELEASE_S) and not self._buffer:
                # Idle: give the connection back to the pool until outcomes come again.
                self._release_connection()
        # At most one flush per interval, and a rest that grows faster than the flushes'
        # length: when they take longer (a saturated machine), each carries more outcomes
        # for the same fixed cost.
        deadline = max(self._last_start + self.flush_interval_s, self._last_end + self._rest())
        while (
            len(self._buffer) < self.flush_max
            and not (self._draining or self._closing)
            and (left := deadline - time.monotonic()) > 0
        ):
            self._cond.wait(left)
        taken, self._buffer = self._buffer[: self.flush_max], self._buffer[self.flush_max :]
        return taken

    def _rest(self) -> float:
        """Seconds to rest after the last flush (REST_REFERENCE_S)."""
        d = self._last_duration
        return min(self.rest_max_s, d * d / self.rest_reference_s)

    def _account(
        self,
        taken: list[tuple[SendResult, float]],
        recorded: list[Recorded],
        failure: BaseException | None,
        committed: float,
    ) -> None:
        if failure is not None:
            self._failure = self._failure or failure
            return
        self._done.extend(recorded)
        written = [(r, at) for (r, at) in taken if _writes(r)]
        if written:
            self._flushes += 1
            self._results += len(written)
            COMPLETER_FLUSHES.inc()
            COMPLETER_FLUSHED.inc(len(written))
            for _, answered in written:
                self._wait_s += committed - answered
                COMPLETER_WAIT.observe(committed - answered)

    def _flush(self, results: Sequence[SendResult]) -> list[Recorded]:
        """Write `results` in one statement (retried on failure); withdrawn ones are
        returned unwritten (the batch end deletes or releases their rows).

        A statement PostgreSQL refuses for what a row holds (`refused`: a value out of
        range, a constraint, an index entry too large) would fail every retry, and with
        it every outcome beside that row: such a flush is written again row by row
        (`_write_each`), so that only the refused row is left unrecorded and the batch
        still settles (docs/design.md, "Sender")."""
        writes = [r for r in results if _writes(r)]
        recorded: dict[uuid.UUID, bool] = {}
        refused_ids: set[uuid.UUID] = set()
        if writes:
            now = self._clock()
            rows = [_row(r) for r in writes]
            recorded, refused_ids = self._write_flush(rows, now)
        done: list[Recorded] = []
        for r in results:
            if not _writes(r):
                done.append(Recorded(r, True))
            else:  # one lookup (a UUID's hash is computed in Python at each)
                finished = recorded.get(r.begun.delivery_id)
                if finished is None and refused_ids and r.begun.delivery_id in refused_ids:
                    done.append(Recorded(r, False, refused=True))
                else:
                    done.append(Recorded(r, finished is not None, finished is True))
        return done

    def _write_flush(
        self, rows: list[DeliveryOutcome], now: datetime
    ) -> tuple[dict[uuid.UUID, bool], set[uuid.UUID]]:
        """One statement for `rows`; after a failure, retried (`_write_again`) or, when
        `refused`, written row by row (`_write_each`), all within `retry_budget_s`.
        Returns ({delivery id recorded: whether its reminder was finished too}, {delivery
        id of each row the database refused}).

        Raises:
            sqlalchemy.exc.StatementError (DBAPIError): the database still failed at the
                deadline, or the statement failed otherwise than `refused`.
        """
        deadline = time.monotonic() + self.retry_budget_s
        try:
            return self._write(rows, now, check_earlier=False), set()
        except StatementError as exc:
            if not refused(exc):
                _log_failure(exc)
                try:
                    return self._write_again(rows, now, deadline), set()
                except StatementError as again:
                    if not refused(again):
                        raise
                    exc = again
            log.warning("completer flush refused by the database; writing its rows one by one:"
                        " %s", exc)  # fmt: skip
            return self._write_each(rows, now, deadline)

    def _write_again(
        self, rows: list[DeliveryOutcome], now: datetime, deadline: float
    ) -> dict[uuid.UUID, bool]:
        """Retry a failed flush (backoff with jitter, until `deadline` on the monotonic
        clock); each try first finds the rows an earlier one may have written (see
        `_write`). A `refused` statement is not retried: it would fail the same way.

        Raises:
            sqlalchemy.exc.DBAPIError: refused, or still failing at the deadline.
        """
        retrying = Retrying(
            retry=retry_if_exception(_retryable),
            stop=stop_after_delay(max(0.0, deadline - time.monotonic())),
            wait=wait_exponential_jitter(multiplier=0.05, max=2.0, jitter=0.05),
            before_sleep=lambda state: _log_failure(
                state.outcome.exception() if state.outcome is not None else None
            ),
            sleep=time.sleep,
            reraise=True,
        )
        for attempt in retrying:
            with attempt:
                return self._write(rows, now, check_earlier=True)
        raise AssertionError("tenacity ended without an outcome")  # pragma: no cover

    def _write_each(
        self, rows: list[DeliveryOutcome], now: datetime, deadline: float
    ) -> tuple[dict[uuid.UUID, bool], set[uuid.UUID]]:
        """Write `rows` one statement each, after a flush of them was `refused`. A row
        refused alone is written once more with its provider text `escaped` (printable
        ASCII); one refused even so is left unrecorded, logged and counted
        (reminders_completer_unrecorded_total): its row stays as it was (`sending` under
        this sender's lease, or none for a first send without one) and the batch end
        hands its message back (OutcomeUnrecorded). Returns (recorded, refused) as
        `_write_flush`.

        Raises:
            sqlalchemy.exc.StatementError (DBAPIError): the database failed otherwise
                until `deadline`.
        """
        recorded: dict[uuid.UUID, bool] = {}
        refused_ids: set[uuid.UUID] = set()
        for row in rows:
            error: StatementError | None = None
            for candidate in (row, _escaped(row)):
                try:
                    recorded |= self._write_again([candidate], now, deadline)
                    error = None
                    break
                except StatementError as exc:
                    if not refused(exc):
                        raise
                    error = exc
            if error is not None:
                refused_ids.add(row.id)
                COMPLETER_UNRECORDED.inc()
                log.error(
                    "completer cannot record an outcome: the database refuses its row, even"
                    " escaped; the row stays as it was and the message comes back after its"
                    " visibility timeout",
                    extra={"reminder_id": row.reminder_id, "run_time_utc": row.run_time_utc,
                           "status": row.status.value, "error": str(error.orig)},
                )  # fmt: skip
        return recorded, refused_ids

    def _write(
        self, rows: list[DeliveryOutcome], now: datetime, *, check_earlier: bool
    ) -> dict[uuid.UUID, bool]:
        """One statement on the completer's connection; returns {delivery id recorded:
        whether its reminder was finished too}."""
        try:
            conn = self._connection()
            earlier: dict[uuid.UUID, bool] = {}
            if check_earlier:
                # The failed attempt may have committed before its connection broke (its
                # reminders are then moved on at the batch end: finished False).
                found = delivery_log.list_recorded_at(conn, rows, now=now)
                earlier = dict.fromkeys(found, False)
            leased = [row for row in rows if row.id not in earlier and row.lease_token]
            first = [row for row in rows if row.id not in earlier and not row.lease_token]
            # One statement for each kind present (a flush of first sends alone, the
            # steady state on the PostgreSQL queue, is still one round trip).
            if leased:
                earlier |= delivery_log.complete_many(conn, leased, now=now)
            if first:
                earlier |= delivery_log.record_first_sends_many(conn, first, now=now)
            return earlier
        except StatementError as exc:
            if not refused(exc):  # a refused statement leaves an autocommit connection usable
                self._drop_connection()
            raise

    def _connection(self) -> Connection:
        if self._conn is None:
            self._conn = self._engine.connect().execution_options(isolation_level="AUTOCOMMIT")
        return self._conn

    def _release_connection(self) -> None:
        if self._conn is not None:
            self._conn.close()
            self._conn = None

    def _drop_connection(self) -> None:
        if self._conn is not None:
            try:
                self._conn.invalidate()
                self._conn.close()
            except Exception:  # already broken
                pass
            self._conn = None


def _log_failure(error: BaseException | None) -> None:
    log.warning("completer flush failed; retrying: %s", error)


#: SQLSTATE classes of a statement refused for what its rows hold (PostgreSQL docs,
#: Appendix A): 22 data exception (a value out of range, U+0000, invalid JSON text),
#: 23 integrity constraint violation, 54 program limit exceeded (an index entry too
#: large). Retrying the same rows fails the same way.
REFUSED_SQLSTATE_CLASSES = frozenset({"22", "23", "54"})


def refused(error: StatementError) -> bool:
    """True when `error` is PostgreSQL (or psycopg, before sending) refusing the
    statement's data (REFUSED_SQLSTATE_CLASSES, a client-side DataError, or text the
    connection's encoding cannot carry: a UnicodeError, which SQLAlchemy raises as a
    plain StatementError), not the connection or the server failing."""
    if isinstance(error.orig, UnicodeError):
        return True
    if not isinstance(error, DBAPIError) or error.connection_invalidated:
        return False
    if isinstance(error, DataError | IntegrityError):
        return True
    sqlstate = getattr(error.orig, "sqlstate", None)
    return isinstance(sqlstate, str) and sqlstate[:2] in REFUSED_SQLSTATE_CLASSES


def _retryable(error: BaseException) -> bool:
    return isinstance(error, DBAPIError) and not refused(error)


def _escaped(row: DeliveryOutcome) -> DeliveryOutcome:
    """`row` with its provider-supplied text as printable ASCII (`escaped`)."""
    pmid, error = row.provider_message_id, row.error
    return replace(
        row,
        provider_message_id=escaped(pmid, MAX_MESSAGE_ID) if pmid is not None else None,
        error=escaped(error, MAX_ERROR) if error is not None else None,
    )


def _writes(result: SendResult) -> bool:
    """The completer writes every outcome but a withdrawn send's (see `_flush`), and but
    a leaseless send handed back before any provider call (it has no row, and needs
    none: the next receive decides it afresh)."""
    if result.withdrawn:
        return False
    return not (
        result.begun.leaseless
        and result.outcome in (Outcome.RETRY, Outcome.RELEASED)
        and result.attempts == 0
        and result.pinned is None
    )


def _row(result: SendResult) -> DeliveryOutcome:
    """The `delivery_log.complete_many` row of one outcome (`record_first_sends_many`'s
    for a leaseless send: no lease token, the row's user and hold): SENT and FAILED
    complete the row; RETRY and RELEASED give its lease back (status stays `sending`)."""
    begun = result.begun
    receipt = result.receipt
    status = {
        Outcome.SENT: DeliveryStatus.SENT,
        Outcome.FAILED: DeliveryStatus.FAILED,
    }.get(result.outcome, DeliveryStatus.SENDING)
    return DeliveryOutcome(
        id=begun.delivery_id,
        run_time_utc=begun.chosen,
        lease_token=begun.lease_token,
        status=status,
        sent_at=result.sent_at,
        provider=receipt.provider if receipt else result.pinned,
        # Provider text as PostgreSQL can store it (reminder_core.text): a NUL or a lone
        # surrogate in an id or an error would make every retry of the flush fail.
        provider_message_id=storable_message_id(receipt.provider_message_id) if receipt else None,
        recipient=result.recipient if status is not DeliveryStatus.SENDING else None,
        error=_error_text(result),
        attempts=result.attempts,
        reminder_id=begun.occurrence.reminder_id,
        occurrence_utc=begun.occurrence.run_time_utc,
        user_id=begun.reminder.user_id if begun.leaseless else None,
        held_until=begun.held_until if begun.leaseless else None,
    )


def _error_text(result: SendResult) -> str | None:
    """The row's error: why it failed or was handed back (None when sent), as
    `storable_error` makes it."""
    if result.outcome is Outcome.SENT:
        return None
    if result.error is not None:
        return storable_error(str(result.error))
    return "shutting down" if result.outcome is Outcome.RELEASED else None
