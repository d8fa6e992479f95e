"""The queue between the outbox and the senders: one interface, chosen by QUEUE_URL."""

from __future__ import annotations

from sqlalchemy import Engine

from reminder_core.queue.base import DeadLetter, Message, Queue, QueueDepth
from reminder_core.queue.postgres import PostgresQueue

__all__ = ["DeadLetter", "Message", "PostgresQueue", "Queue", "QueueDepth", "open_queue"]


def open_queue(
    queue_url: str,
    engine: Engine,
    *,
    max_receive_count: int,
    sqs_endpoint_url: str | None = None,
    aws_region: str | None = None,
    sqs_wait_time_s: int = 2,
) -> Queue:
    """Return the queue backend named by `queue_url`; nothing is called over the network.

    Args:
        queue_url: "postgres://<queue name>" for the PostgreSQL table backend;
            "sqs://<queue name>", or an SQS queue URL, for Amazon SQS (forms:
            `reminder_core.queue.sqs.sqs_target`).
        engine: the database engine (used by the PostgreSQL backend).
        max_receive_count: receives after which a message is dead-lettered (PostgreSQL;
            an SQS queue has it in its RedrivePolicy, set by `reminders queue create`).
        sqs_endpoint_url: SQS endpoint override (a local SQS-compatible server).
        aws_region: AWS region of the SQS queue (None: from the URL, else boto3's chain).
        sqs_wait_time_s: long-poll wait of an SQS receive, 0..20 seconds.

    Raises:
        ValueError: the URL names no known backend, or is malformed.
    """
    if queue_url.startswith(("postgres://", "postgresql://")):
        name = queue_url.split("://", 1)[1].strip("/") or "reminders"
        return PostgresQueue(engine, name=name, max_receive_count=max_receive_count)
    from reminder_core.queue.sqs import SqsQueue, sqs_client, sqs_target

    target = sqs_target(queue_url, endpoint_url=sqs_endpoint_url, region=aws_region)
    if target is not None:
        client = sqs_client(target, wait_time_s=sqs_wait_time_s)
        return SqsQueue(client, target.queue, wait_time_s=sqs_wait_time_s)
    raise ValueError(
        f"QUEUE_URL {queue_url!r} names no supported queue backend"
        " (postgres://NAME, sqs://NAME or an SQS queue URL)"
    )
