"""The queue between the outbox and the senders: one interface, chosen by QUEUE_URL."""

from __future__ import annotations

from sqlalchemy import Engine

from reminder_core.queue.base import DeadLetter, Message, Queue, QueueDepth
from reminder_core.queue.postgres import PostgresQueue

__all__ = ["DeadLetter", "Message", "PostgresQueue", "Queue", "QueueDepth", "open_queue"]


def open_queue(queue_url: str, engine: Engine, *, max_receive_count: int) -> Queue:
    """Return the queue backend named by `queue_url`.

    Args:
        queue_url: "postgres://<queue name>" for the PostgreSQL table backend.
        engine: the database engine (used by the PostgreSQL backend).
        max_receive_count: receives after which a message is dead-lettered.

    Raises:
        ValueError: the URL names no known backend.
    """
    if queue_url.startswith(("postgres://", "postgresql://")):
        name = queue_url.split("://", 1)[1].strip("/") or "reminders"
        return PostgresQueue(engine, name=name, max_receive_count=max_receive_count)
    raise ValueError(f"QUEUE_URL {queue_url!r} names no supported queue backend (postgres://NAME)")
