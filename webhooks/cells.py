"""Which cell a provider event belongs to (docs/design.md, "Cells"; issue 18): the cell
whose delivery it is about, found from what the event carries.

In order: the `cell` message tag the sender set (SES EmailTags, Resend tags; present on
SES event-publishing records and Resend webhooks), when it names a configured cell; else
the cell holding the occurrence named by the `idempotency_key` tag (ACCEPTED events), or
the delivery with the event's provider message id (bounces, complaints); else the first
cell, where an event about an email nobody knows is stored (UNMATCHED) as with one cell.
"""

from __future__ import annotations

import uuid

from sqlalchemy import Connection, Engine

from reminder_core.cell_directory import CellRouting
from reminder_core.domain.localtime import parse_idempotency_key
from reminder_core.store import reminders
from reminder_core.suppression import find_delivery
from webhooks.events import EventKind, WebhookEvent


def cell_engine(routing: CellRouting, event: WebhookEvent) -> Engine:
    """The engine of the cell `event` is about (see the module docstring).

    Side effects: one indexed read per cell probed (none with a known `cell` tag).

    Raises:
        sqlalchemy.exc.OperationalError: a probed cell's database is unreachable (the
            request answers 503 and the provider retries).
    """
    engines = routing.all_engines()
    if event.cell is not None:
        for cell, engine in engines:
            if cell.name == event.cell:
                return engine
    for _, engine in engines:
        with engine.connect() as conn:
            if _knows(conn, event):
                return engine
    return engines[0][1]


def _knows(conn: Connection, event: WebhookEvent) -> bool:
    """True when this cell holds what `event` is about."""
    if event.kind is EventKind.ACCEPTED and event.idempotency_key:
        occurrence = parse_idempotency_key(event.idempotency_key)
        if occurrence is not None:
            return bool(reminders.get_many_send_state(conn, [uuid.UUID(occurrence[0])]))
    return find_delivery(conn, event.provider, event.provider_message_id) is not None
