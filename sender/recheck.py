"""The mid-batch re-read: a cancel, pause or reschedule reaches sends not started yet."""

from __future__ import annotations

import threading
import time
import uuid
from collections.abc import Sequence
from datetime import datetime

from sqlalchemy import Engine
from sqlalchemy.exc import DBAPIError

from reminder_core.domain.states import ReminderStatus
from reminder_core.store import reminders
from sender.begin import still_due
from sender.work import Begun, log


class Recheck:
    """A batch's reminders as last read, while its sends go on.

    A send that starts more than `interval_s` after the last read reads the reminders of
    the sends not started yet again (one query, by one of the send threads, the others
    wait for it), so a slow provider and a large batch do not widen the window in which a
    cancel is missed. A replay is withdrawn when its reminder was cancelled or paused,
    any other occurrence when it is no longer the reminder's due one (the rules of the
    begin stage).

    Args:
        engine: database engine.
        begun: the batch's occurrences to send.
        interval_s: seconds after which a send reads again first.
    """

    def __init__(self, engine: Engine, begun: Sequence[Begun], *, interval_s: float) -> None:
        self._engine = engine
        self._waiting = {b.key: b for b in begun}  # not started yet
        self.interval_s = interval_s
        self._read_at = time.monotonic()  # just read by the begin stage
        self._withdrawn: set[tuple[uuid.UUID, datetime]] = set()
        self._lock = threading.Lock()

    def withdrawn(self, begun: Begun) -> bool:
        """True when `begun`'s reminder no longer wants its occurrence, as last read
        (reading again first when that read is older than `interval_s`); otherwise the
        send counts as started from now on and is not re-read again."""
        if time.monotonic() - self._read_at >= self.interval_s:
            with self._lock:
                if time.monotonic() - self._read_at >= self.interval_s:
                    self._reread()
        with self._lock:
            self._waiting.pop(begun.key, None)
            return begun.occurrence.key in self._withdrawn

    def _reread(self) -> None:
        """Read the waiting sends' reminders; a database error leaves the batch on its
        earlier read (the send goes ahead: the begin transaction checked it)."""
        waiting = list(self._waiting.values())
        ids = {b.occurrence.reminder_id for b in waiting}
        try:
            with self._engine.connect() as conn:
                states = {r.id: r for r in reminders.get_many_send_state(conn, ids)}
        except DBAPIError as exc:
            log.warning(
                "could not read the batch's reminders again; sending on the earlier read: %s",
                exc.orig if exc.orig is not None else exc,
            )
        else:
            for b in waiting:
                occ = b.occurrence
                reminder = states.get(occ.reminder_id)
                if (
                    reminder is None
                    or (
                        occ.replay
                        and reminder.status in (ReminderStatus.CANCELLED, ReminderStatus.PAUSED)
                    )
                    or (not occ.replay and not still_due(reminder, occ.run_time_utc))
                ):
                    self._withdrawn.add(occ.key)
        self._read_at = time.monotonic()
