"""Reminder CRUD as small functions over a Session; the caller owns the transaction."""

from __future__ import annotations

import uuid
from collections.abc import Sequence
from datetime import datetime
from typing import Any

from sqlalchemy import select, tuple_, update
from sqlalchemy.dialects.postgresql import insert
from sqlalchemy.orm import Session

from reminder_core.db.models import DeliveryLog, Reminder
from reminder_core.domain.states import CANCELLABLE, ReminderStatus


def get(session: Session, user_id: str, reminder_id: uuid.UUID) -> Reminder | None:
    """The user's reminder, or None (another user's reminder is None too)."""
    return session.scalars(
        select(Reminder).where(Reminder.id == reminder_id, Reminder.user_id == user_id)
    ).one_or_none()


def lock(session: Session, user_id: str, reminder_id: uuid.UUID) -> Reminder | None:
    """The user's reminder, row-locked (SELECT ... FOR UPDATE) until the caller commits."""
    return session.scalars(
        select(Reminder)
        .where(Reminder.id == reminder_id, Reminder.user_id == user_id)
        .with_for_update()
    ).one_or_none()


def get_by_request_id(session: Session, user_id: str, client_request_id: str) -> Reminder | None:
    """The reminder this user created with this idempotency key, or None."""
    return session.scalars(
        select(Reminder).where(
            Reminder.user_id == user_id, Reminder.client_request_id == client_request_id
        )
    ).one_or_none()


def insert_reminder(session: Session, values: dict[str, Any]) -> Reminder | None:
    """INSERT one reminder; None when (user_id, client_request_id) already exists.

    Side effects: one INSERT in the caller's transaction (not committed here).
    """
    stmt = (
        insert(Reminder)
        .values(**values)
        .on_conflict_do_nothing(index_elements=["user_id", "client_request_id"])
        .returning(Reminder)
    )
    return session.scalars(stmt).one_or_none()


def list_page(
    session: Session,
    user_id: str,
    *,
    limit: int,
    after: tuple[datetime, uuid.UUID] | None,
    statuses: Sequence[ReminderStatus] | None,
) -> list[Reminder]:
    """Up to `limit` reminders, newest first (created_at, id descending), after a cursor."""
    stmt = select(Reminder).where(Reminder.user_id == user_id)
    if after is not None:
        stmt = stmt.where(tuple_(Reminder.created_at, Reminder.id) < tuple_(*after))
    if statuses:
        stmt = stmt.where(Reminder.status.in_([s.value for s in statuses]))
    stmt = stmt.order_by(Reminder.created_at.desc(), Reminder.id.desc()).limit(limit)
    return list(session.scalars(stmt))


def cancel(
    session: Session, user_id: str, reminder_id: uuid.UUID, now: datetime
) -> Reminder | None:
    """Cancel a live reminder (pending, claimed or paused); bump its version.

    An occurrence already claimed but not sent is then recorded `cancelled` by the sender
    (docs/design.md, "A cancel or change wins"). Returns the updated reminder, or None
    when it was not cancellable.
    """
    stmt = (
        update(Reminder)
        .where(
            Reminder.id == reminder_id,
            Reminder.user_id == user_id,
            Reminder.status.in_([s.value for s in CANCELLABLE]),
        )
        .values(
            status=ReminderStatus.CANCELLED.value,
            next_run_utc=None,
            claimed_by=None,
            claimed_at=None,
            version=Reminder.version + 1,
            updated_at=now,
        )
        .returning(Reminder)
    )
    return session.scalars(
        stmt, execution_options={"synchronize_session": False, "populate_existing": True}
    ).one_or_none()


def deliveries_page(
    session: Session, reminder_id: uuid.UUID, *, limit: int, before: datetime | None
) -> list[DeliveryLog]:
    """Up to `limit` delivery rows of a reminder, newest occurrence first (run_time_utc
    descending, unique per reminder), those before `before` when given. The caller has
    checked that the reminder is the user's."""
    stmt = select(DeliveryLog).where(DeliveryLog.reminder_id == reminder_id)
    if before is not None:
        stmt = stmt.where(DeliveryLog.run_time_utc < before)
    stmt = stmt.order_by(DeliveryLog.run_time_utc.desc()).limit(limit)
    return list(session.scalars(stmt))
