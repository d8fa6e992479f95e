"""Batch end, after the completer recorded every outcome: move the reminders past their
sent or failed occurrences and give back the rows of withdrawn sends (one transaction)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace
from datetime import datetime

from sqlalchemy import Connection, Engine

from reminder_core.domain.states import DeliveryStatus
from reminder_core.scheduling import ScheduleConfig
from reminder_core.services import reminders as reminder_services
from reminder_core.services.reminders import Advance
from reminder_core.store import delivery_log
from reminder_core.store.delivery_log import DeliveryOutcome
from reminder_core.text import storable_error
from sender.complete import OutcomeUnrecorded, Recorded
from sender.work import Decided, Outcome, SendResult, log

WITHDRAWN = "withdrawn: the reminder changed during its batch"


def finish_batch(
    engine: Engine, recorded: Sequence[Recorded], *, now: datetime, config: ScheduleConfig
) -> list[Decided]:
    """Advance each reminder whose occurrence the completer recorded `sent` or `failed`
    and did not finish itself (recurring ones: next occurrence computed from its current
    schedule, in the zone in force now; a newer user change is never overwritten,
    docs/design.md, "A cancel or change wins"), mark sent replays, and delete the rows of
    withdrawn sends that no provider call ever touched (else release them).

    A crash before this commits leaves a reminder `claimed` at an occurrence that is
    already terminal: the claim reaper re-drives it and the next sender moves it on
    without sending (sender.begin, "already terminal").

    Args:
        recorded: the batch's outcomes as the completer returned them.
        now: aware UTC, for updated_at and the advance.

    Returns:
        One Decided per outcome; a sent or failed one whose row was not recorded (its
        lease was taken over meanwhile) is BUSY: its current holder records it; one whose
        row the database refused (`Recorded.refused`) is RETRY with OutcomeUnrecorded,
        its message left to come back after its visibility timeout.

    Raises:
        sqlalchemy.exc.DBAPIError: nothing of this step was committed (see above).
    """
    advances: list[Advance] = []
    replays: list[SendResult] = []
    withdrawn: list[SendResult] = []
    decided: list[Decided] = []
    for item in recorded:
        result = item.result
        if result.withdrawn:
            withdrawn.append(result)
        elif item.refused:
            # Not recorded (the completer logged why): the message comes back after its
            # visibility timeout and the occurrence is decided again, as after a crash.
            unrecorded = OutcomeUnrecorded(
                f"{result.outcome.value} outcome not recorded: the database refused its row"
            )
            decided.append(
                Decided.of_result(replace(result, error=unrecorded, hide_for_s=None), Outcome.RETRY)
            )
            continue
        elif result.outcome in (Outcome.SENT, Outcome.FAILED) and not item.recorded:
            log.warning(
                "delivery lease lost: taken over, or the row was ended; its current holder"
                " records the outcome",
                extra={"reminder_id": result.begun.occurrence.reminder_id,
                       "run_time_utc": result.begun.chosen, "provider": result.provider},
            )  # fmt: skip
            decided.append(Decided.of_result(result, Outcome.BUSY))
            continue
        elif result.outcome in (Outcome.SENT, Outcome.FAILED):
            if not item.finished:  # a one-time reminder is finished by the flush itself
                advances.append(_advance(result))
            if result.outcome is Outcome.SENT and result.begun.occurrence.replay:
                replays.append(result)
        decided.append(Decided.of_result(result))
    if advances or withdrawn or replays:
        with engine.begin() as conn:
            reminder_services.advance_many(conn, advances, now=now, config=config)
            for result in replays:
                reminder_services.complete_replayed(
                    conn, reminder_id=result.begun.occurrence.reminder_id, now=now
                )
            _give_back(conn, withdrawn, now)
    return decided


def _advance(result: SendResult) -> Advance:
    begun = result.begun
    return Advance(
        reminder_id=begun.occurrence.reminder_id,
        occurrence_utc=begun.occurrence.run_time_utc,
        zone=begun.zone,
        after=begun.chosen,
        sent=result.outcome is Outcome.SENT,
        error=storable_error(str(result.error)) if result.error else None,
    )


def _give_back(conn: Connection, withdrawn: Sequence[SendResult], now: datetime) -> None:
    """Withdrawn sends were never attempted: their row goes, so the next receive decides
    the occurrence as if this batch had not begun it; a row an earlier attempt touched
    stays, released."""
    withdrawn = [r for r in withdrawn if not r.begun.leaseless]  # those have no row
    if not withdrawn:
        return
    delivery_log.withdraw_many(conn, [r.begun.lease for r in withdrawn])
    # A release: a `sending` outcome finishes no reminder, whatever it points at.
    delivery_log.complete_many(
        conn,
        [
            DeliveryOutcome(
                id=r.begun.delivery_id, run_time_utc=r.begun.chosen,
                lease_token=r.begun.lease.lease_token, status=DeliveryStatus.SENDING, sent_at=None,
                provider=None, provider_message_id=None, recipient=None, error=WITHDRAWN,
                attempts=0, reminder_id=r.begun.occurrence.reminder_id,
                occurrence_utc=r.begun.occurrence.run_time_utc,
            )
            for r in withdrawn
        ],
        now=now,
    )  # fmt: skip
