"""Move one user between cells: freeze, drain, copy, switch, resume, verify, clean up
(docs/design.md, "Moving a user between cells"; issue 18).

A user's rows live in exactly one cell at a time as far as anything acting on them is
concerned: the old cell's reminders are frozen (paused, paused_reason 'cell-move') and
drained (no claim in flight, no live delivery lease) before the copy, and the new cell's copies
stay frozen until the directory points at the new cell. So no occurrence is claimed in
both cells, and none is lost: an occurrence due during the move is claimed by the new
cell once resumed (late by the move's seconds, under its misfire policy).

API writes are kept out by a `cell_moves` marker in the cell's own database, read by
each write after taking the user's shared advisory lock (reminder_api.deps): a process
whose directory cache still names the old cell is answered 503 with Retry-After there,
never writes to a cell being emptied. Every step can be run again: a move interrupted
anywhere is finished by running it again, or, before the switch, undone with `abort`.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import datetime, timedelta

from sqlalchemy import Connection, Engine

from reminder_core.cell_directory import CellDirectory
from reminder_core.cells import Cell
from reminder_core.clock import utcnow
from reminder_core.errors import Conflict, NotFound, ReminderError
from reminder_core.store import cell_assignments, cell_loads, cell_moves
from reminder_core.store import reminders as reminder_store
from reminder_core.store.cell_moves import UserRowsSummary

log = logging.getLogger("reminders.cell_move")

#: A quiet-hours hold ending later than the drain's deadline plus this (seconds) is
#: frozen where it is; one ending sooner is waited for like any claim (its message could
#: come back, and be recorded, between the freeze and the copy).
HELD_MARGIN_S = 120.0


class DrainTimeout(ReminderError):
    """The user's occurrences in flight did not finish within the drain timeout; the move
    was undone (nothing copied, the reminders live again in their cell)."""


class MoveFailed(ReminderError):
    """The copy did not match its source (the new cell's transaction was rolled back)."""


@dataclass(frozen=True, slots=True)
class MoveReport:
    """What a move did.

    Attributes:
        user_id: who moved.
        from_cell: the cell they lived in (None: nothing to do, they live in `to_cell`).
        to_cell: where they live now.
        frozen: reminders paused for the move and resumed in `to_cell`.
        copied: the source's rows as copied (counts and digests), checked equal in the
            new cell before the switch.
        seconds: the move's duration.
    """

    user_id: str
    from_cell: str | None
    to_cell: str
    frozen: int
    copied: UserRowsSummary | None
    seconds: float


class CellMove:
    """Moves users between the cells of `directory`.

    Args:
        directory: the cell directory (its engine writes the switch).
        engine_of: each cell's engine.
        cache_ttl_s: how long API processes trust a cached cell (CELL_CACHE_TTL_S), plus
            the longest an API request may wait for a pooled connection after its lookup
            (DB_POOL_TIMEOUT_S): after the switch the old cell's rows and marker are kept
            this long (plus a second), so a stale reader still finds them and a stale
            writer is refused there.
        delivery_lease_s: DELIVERY_LEASE_S: a `sending` row locked more recently is in a
            sender's hands.
        drain_timeout_s: how long to wait for claimed occurrences to finish before
            undoing the move.
        poll_interval_s: seconds between drain checks.
        progress: called with one line per step (the CLI prints them).
        clock: now, aware UTC.
        sleep: waits, seconds (tests pass a recorder).
    """

    def __init__(
        self,
        directory: CellDirectory,
        engine_of: Callable[[Cell], Engine],
        *,
        cache_ttl_s: float,
        delivery_lease_s: float,
        drain_timeout_s: float = 300.0,
        poll_interval_s: float = 0.2,
        progress: Callable[[str], None] = lambda _line: None,
        clock: Callable[[], datetime] = utcnow,
        sleep: Callable[[float], None] = time.sleep,
    ) -> None:
        self.directory = directory
        self.engine_of = engine_of
        self.cache_ttl_s = cache_ttl_s
        self.delivery_lease_s = delivery_lease_s
        self.drain_timeout_s = drain_timeout_s
        self.poll_interval_s = poll_interval_s
        self.progress = progress
        self.clock = clock
        self.sleep = sleep

    # -- the move ---------------------------------------------------------------------

    def move(self, user_id: str, to: str) -> MoveReport:
        """Move `user_id` to the cell named `to`, or finish an interrupted move there.

        One move of a user runs at a time (a session lock on the user in the directory's
        database, released if the mover dies); a move first finishes what an earlier one
        left (resumes a switched copy, deletes a switched move's old rows).

        Returns:
            What was done (`from_cell` None: the user already lived there, nothing to do).

        Side effects: commits in the old cell (freeze, later deletion of the user's rows),
            the new cell (copy, resume) and the directory (switch, cell_loads); waits up
            to `drain_timeout_s` plus `cache_ttl_s` + 1 seconds.

        Raises:
            NotFound: `to` is not a cell, or the user has no cell (never seen).
            Conflict: another move of this user is running, or one to another cell is in
                progress, or the two cells are at different migrations.
            DrainTimeout: occurrences still in flight at the deadline (move undone).
            MoveFailed: the copy differed from its source (nothing switched).
            sqlalchemy.exc.OperationalError: a database is unreachable (run it again).
        """
        started = time.monotonic()
        target = self._cell(to)
        with self._exclusive(user_id):
            current = self._current(user_id)
            resumed, cleaned = self._finish_leftovers(user_id, current)
            if current.name == target.name:
                with self.engine_of(current).connect() as conn:
                    pending = cell_moves.get(conn, user_id=user_id)
                if pending is not None:  # a move out of `current`, not switched yet
                    raise Conflict(
                        f"{user_id} lives in {current.name}, frozen by a move to"
                        f" {pending.to_cell} in progress: finish it (`reminders cells move"
                        f" {user_id} --to {pending.to_cell}`) or undo it (--abort)"
                    )
                if not resumed and not cleaned:
                    self.progress(f"{user_id} lives in {target.name} already: nothing to do")
                    return MoveReport(user_id, None, target.name, 0, None, self._since(started))
                with self.engine_of(target).connect() as conn:
                    summary = cell_moves.summary(conn, user_id=user_id)
                self.progress(f"finished the move of {user_id} to {target.name}")
                source_name = cleaned[0].name if cleaned else None
                return MoveReport(
                    user_id, source_name, target.name, len(resumed), summary, self._since(started)
                )
            source = current
            self._check_schemas(source, target)
            frozen = self._freeze_and_drain(user_id, source, target)
            copied = self._copy(user_id, source, target)
            with self.directory.engine.begin() as conn:
                self._switch(conn, user_id, source, target)
            self.directory.forget(user_id)
            self.progress(f"switched: the directory names cell {target.name} for {user_id}")
            resumed = self._resume(user_id, target)
            self._clean_up_after_ttl(user_id, [source])
        self.progress(
            f"moved {user_id} from {source.name} to {target.name}: {copied.reminders}"
            f" reminders, {copied.deliveries} delivery rows, {len(resumed)} resumed"
        )
        return MoveReport(
            user_id, source.name, target.name, max(frozen, len(resumed)), copied,
            self._since(started),
        )  # fmt: skip

    def abort(self, user_id: str) -> bool:
        """Undo a move of `user_id` that has not switched yet: the old cell's frozen
        reminders live again, a partial copy in the new cell is deleted. False when no
        move was in progress.

        Raises:
            Conflict: another move of this user is running (stop it first), or the move
                has switched already (run the move again to finish it).
            NotFound: the user has no cell.
        """
        with self._exclusive(user_id):
            current = self._current(user_id)
            with self.engine_of(current).connect() as conn:
                marker = cell_moves.get(conn, user_id=user_id)
            switched = [
                cell for cell, m in self._markers_elsewhere(user_id, current)
                if m.to_cell == current.name
            ]  # fmt: skip
            if (marker is not None and marker.from_cell != current.name) or switched:
                raise Conflict(
                    f"the move of {user_id} to cell {current.name} has switched already: run"
                    f" `reminders cells move {user_id} --to {current.name}` to finish it"
                )
            if marker is None:  # what an interrupted undo may have left elsewhere
                stale = [
                    cell for cell, m in self._markers_elsewhere(user_id, current)
                    if m.from_cell == current.name
                ]  # fmt: skip
                return any([self._delete_partial_copy(user_id, current.name, c) for c in stale])
            self._undo(user_id, current, marker.to_cell)
        return True

    @contextmanager
    def _exclusive(self, user_id: str) -> Iterator[None]:
        """Hold `user_id`'s mover lock for the block (Conflict when another move holds
        it)."""
        with self.directory.engine.connect() as conn:
            locked = cell_moves.try_lock(conn, user_id=user_id)
            conn.commit()  # a session lock: it outlives the transaction
            if not locked:
                raise Conflict(
                    f"another `reminders cells move` of {user_id} is running: wait for it to"
                    " end (or stop it, then run the move again to finish it)"
                )
            try:
                yield
            finally:
                cell_moves.unlock(conn, user_id=user_id)
                conn.commit()

    def _undo(self, user_id: str, source: Cell, to_cell: str) -> None:
        """Whatever a copy left in `to_cell` deleted, then the frozen reminders of
        `source` as they were and its marker gone (in that order: interrupted between
        the two, the source's marker says the move is still to undo)."""
        target = self.directory.cells.get(to_cell)
        if target is not None:
            self._delete_partial_copy(user_id, source.name, target)
        with self.engine_of(source).begin() as conn:
            cell_moves.lock(conn, user_id=user_id)
            cell_moves.undo(conn, user_id=user_id, now=self.clock())
            reminder_store.due_notify(conn)
            cell_moves.delete(conn, user_id=user_id)
        self.progress(f"move of {user_id} to {to_cell} undone; they stay in {source.name}")

    def _delete_partial_copy(self, user_id: str, from_cell: str, target: Cell) -> bool:
        """Delete the user's rows and marker in `target` when they are a copy from the
        cell `from_cell` that was never switched to; False when there was none."""
        with self.engine_of(target).begin() as conn:
            cell_moves.lock(conn, user_id=user_id)
            marker = cell_moves.get(conn, user_id=user_id)
            if marker is None or marker.from_cell != from_cell:
                return False
            self._delete_rows(conn, user_id)
            cell_moves.delete(conn, user_id=user_id)
        self.progress(f"deleted an unswitched copy of {user_id} from {target.name}")
        return True

    def _markers_elsewhere(
        self, user_id: str, current: Cell
    ) -> list[tuple[Cell, cell_moves.CellMoveMarker]]:
        """The move markers of `user_id` in the cells other than `current`."""
        found = []
        for cell in self.directory.cells.values():
            if cell.name != current.name:
                with self.engine_of(cell).connect() as conn:
                    marker = cell_moves.get(conn, user_id=user_id)
                if marker is not None:
                    found.append((cell, marker))
        return found

    def _finish_leftovers(self, user_id: str, current: Cell) -> tuple[list[object], list[Cell]]:
        """Finish what earlier moves into `current` (where the directory says the user
        lives) left: a copy switched but not resumed is resumed, the old cells of
        switched moves are cleaned up (after the cache wait), and copies out of
        `current` that no move in progress will switch to (an undo interrupted) are
        deleted. Returns (the reminders resumed, the cells cleaned).

        Any cell but `current` holding the user's rows is stale: the directory is the
        truth, and every move marks the cells it writes.
        """
        with self.engine_of(current).connect() as conn:
            marker = cell_moves.get(conn, user_id=user_id)
        resumed: list[object] = []
        if marker is not None and marker.from_cell != current.name:
            resumed = self._resume(user_id, current)
        moving_to = (
            marker.to_cell if marker is not None and marker.from_cell == current.name else None
        )
        old = []
        for cell, m in self._markers_elsewhere(user_id, current):
            if cell.name != m.to_cell:  # the source of a move that switched away from it
                old.append(cell)
            elif not (m.from_cell == current.name and cell.name == moving_to):
                # A copy never switched to (the directory names `current`), and not the
                # copy of the move in progress: what an interrupted undo left.
                self._delete_partial_copy(user_id, m.from_cell, cell)
        if old:
            self._clean_up_after_ttl(user_id, old)
        return resumed, old

    @staticmethod
    def _since(started: float) -> float:
        return time.monotonic() - started

    def _cell(self, name: str) -> Cell:
        cell = self.directory.cells.get(name)
        if cell is None:
            known = ", ".join(self.directory.cells)
            raise NotFound(f"no cell {name!r} (CELLS has: {known})")
        return cell

    def _current(self, user_id: str) -> Cell:
        self.directory.forget(user_id)
        cell = self.directory.cell_of(user_id, assign=False)
        if cell is None:
            raise NotFound(f"user {user_id!r} has no cell (never seen by the API)")
        return cell

    def _check_schemas(self, source: Cell, target: Cell) -> None:
        versions = {}
        for cell in (source, target):
            with self.engine_of(cell).connect() as conn:
                versions[cell.name] = cell_moves.schema_version(conn)
        if versions[source.name] != versions[target.name]:
            raise Conflict(
                f"cells {source.name} and {target.name} are at different migrations"
                f" ({versions[source.name]} and {versions[target.name]}): run"
                " `reminders migrate` first"
            )

    def _freeze_and_drain(self, user_id: str, source: Cell, target: Cell) -> int:
        """Mark the user moving in `source` (waiting out their API writes in progress),
        then freeze their reminders until nothing of theirs is in flight; returns how
        many were frozen. On timeout the move is undone (DrainTimeout)."""
        engine = self.engine_of(source)
        now = self.clock()
        with engine.begin() as conn:
            cell_moves.lock(conn, user_id=user_id)
            marker = cell_moves.insert(
                conn, user_id=user_id, from_cell=source.name, to_cell=target.name, now=now
            )
        if marker.to_cell != target.name or marker.from_cell != source.name:
            raise Conflict(
                f"a move of {user_id} from {marker.from_cell} to {marker.to_cell} is in"
                f" progress since {marker.started_at.isoformat()}: finish it (`reminders"
                f" cells move {user_id} --to {marker.to_cell}`) or undo it (--abort)"
            )
        self.progress(f"frozen: API writes of {user_id} in cell {source.name} answer 503")
        deadline = time.monotonic() + self.drain_timeout_s
        held_after = now + timedelta(seconds=self.drain_timeout_s + HELD_MARGIN_S)
        frozen: set[object] = set()
        while True:
            now = self.clock()
            cutoff = now - timedelta(seconds=self.delivery_lease_s)
            with engine.begin() as conn:
                frozen.update(
                    cell_moves.pause(
                        conn, user_id=user_id, held_after=held_after, lease_cutoff=cutoff,
                        now=now,
                    )
                )  # fmt: skip
                left = cell_moves.in_flight(conn, user_id=user_id, lease_cutoff=cutoff, now=now)
            if left.drained:
                self.progress(f"drained: {len(frozen)} reminders paused for the move")
                return len(frozen)
            if time.monotonic() >= deadline:
                self._undo(user_id, source, target.name)
                raise DrainTimeout(
                    f"{left.claimed} reminders of {user_id} still claimed,"
                    f" {left.sending} still being sent and {left.receiving} messages still"
                    f" held by a sender after {self.drain_timeout_s:g} s (a"
                    " sender may have died: its claims are re-driven after"
                    " CLAIM_TIMEOUT_S); the move was undone, run it again later"
                )
            self.sleep(self.poll_interval_s)

    def _copy(self, user_id: str, source: Cell, target: Cell) -> UserRowsSummary:
        """Copy the user's rows (MOVED_TABLES) from the frozen source into `target` in
        one transaction, replacing what an interrupted copy left there, marked moving
        there too; the copy's summary must equal the source's."""
        snapshot = self.engine_of(source).execution_options(isolation_level="REPEATABLE READ")
        with snapshot.connect() as conn:  # one snapshot for the summary and the rows
            before = cell_moves.summary(conn, user_id=user_id)
            exported = self._export(conn, user_id)
            conn.rollback()
        with self.engine_of(target).begin() as conn:
            cell_moves.lock(conn, user_id=user_id)
            self._delete_rows(conn, user_id)
            cell_moves.import_webhook_endpoints(conn, rows=exported["webhook_endpoints"])
            cell_moves.import_reminders(conn, rows=exported["reminders"])
            cell_moves.import_delivery_log(conn, rows=exported["delivery_log"])
            cell_moves.import_calendar_feeds(conn, rows=exported["calendar_feeds"])
            cell_moves.insert(
                conn, user_id=user_id, from_cell=source.name, to_cell=target.name,
                now=self.clock(),
            )  # fmt: skip
            after = cell_moves.summary(conn, user_id=user_id)
            if after != before:
                raise MoveFailed(
                    f"the copy of {user_id} in {target.name} differs from {source.name}"
                    f" ({after} vs {before}); nothing was switched"
                )
        self.progress(
            f"copied to {target.name}: {before.reminders} reminders, {before.deliveries}"
            f" delivery rows, {before.calendar_feeds} calendar feed,"
            f" {before.webhook_endpoints} webhook endpoints (checked equal)"
        )
        return before

    @staticmethod
    def _export(conn: Connection, user_id: str) -> dict[str, str]:
        return {
            "webhook_endpoints": cell_moves.export_webhook_endpoints(conn, user_id=user_id),
            "reminders": cell_moves.export_reminders(conn, user_id=user_id),
            "delivery_log": cell_moves.export_delivery_log(conn, user_id=user_id),
            "calendar_feeds": cell_moves.export_calendar_feeds(conn, user_id=user_id),
        }

    @staticmethod
    def _delete_rows(conn: Connection, user_id: str) -> None:
        cell_moves.delete_reminders(conn, user_id=user_id)
        cell_moves.delete_webhook_endpoints(conn, user_id=user_id)
        cell_moves.delete_calendar_feeds(conn, user_id=user_id)
        cell_moves.delete_rate_limits(conn, user_id=user_id)
        cell_moves.delete_live_reminder_bounds(conn, user_id=user_id)

    def _switch(self, conn: Connection, user_id: str, source: Cell, target: Cell) -> None:
        if cell_assignments.move(
            conn, user_id=user_id, from_cell=source.name, to_cell=target.name, now=self.clock()
        ):
            cell_loads.add(conn, cell=source.name, users=-1)
            cell_loads.add(conn, cell=target.name, users=1)

    def _resume(self, user_id: str, target: Cell) -> list[object]:
        with self.engine_of(target).begin() as conn:
            cell_moves.lock(conn, user_id=user_id)
            if cell_moves.get(conn, user_id=user_id) is None:
                return []
            resumed = cell_moves.resume(conn, user_id=user_id, now=self.clock())
            reminder_store.due_notify(conn)
            cell_moves.delete(conn, user_id=user_id)
        self.progress(f"resumed in {target.name}: {len(resumed)} reminders live again")
        return list(resumed)

    def _clean_up_after_ttl(self, user_id: str, sources: list[Cell]) -> None:
        """Wait until no API process can still route `user_id` to one of `sources` from
        its cache, then delete their rows, queue messages and marker there."""
        wait_s = self.cache_ttl_s + 1.0
        self.progress(f"waiting {wait_s:g} s for API caches (CELL_CACHE_TTL_S) to expire")
        self.sleep(wait_s)
        for source in sources:
            with self.engine_of(source).begin() as conn:
                cell_moves.lock(conn, user_id=user_id)
                self._delete_rows(conn, user_id)
                cell_moves.delete_queue_messages(conn, user_id=user_id)
                cell_moves.delete(conn, user_id=user_id)
            self.progress(f"deleted {user_id}'s rows from {source.name}")
