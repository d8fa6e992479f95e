"""The PostgreSQL queue's receipt handles ("<id>.<token>", migration 0018): only the
current receive's handle deletes or moves its message, found by the message's id.

Against the real database (the `db` fixture's, migrated).
"""

from __future__ import annotations

import uuid

import pytest
from sqlalchemy import Engine, text

from reminder_core.clock import utcnow
from reminder_core.queue import PostgresQueue
from reminder_core.store.queue_messages import split_receipt_handle


def _live(db: Engine) -> list[tuple[int, int]]:
    """(id, receive_count) of every message of the test queue, by id."""
    with db.connect() as conn:
        rows = conn.execute(
            text("SELECT id, receive_count FROM queue_messages WHERE queue_name = 'h'"
                 " ORDER BY id")
        ).all()  # fmt: skip
    return [(int(a), int(b)) for a, b in rows]


def test_a_handle_names_its_message_and_only_its_token_moves_it(db: Engine) -> None:
    queue = PostgresQueue(db, name="h", max_receive_count=5)
    now = utcnow()
    queue.send_batch([{"n": 1}, {"n": 2}], now=now, delays_s=[0, 0])
    first, second = queue.receive(now=now, max_messages=2, visibility_timeout_s=60)
    (first_id, first_token), (second_id, second_token) = (
        split_receipt_handle(first.receipt_handle),
        split_receipt_handle(second.receipt_handle),
    )
    assert str(first_id) == first.message_id
    assert str(second_id) == second.message_id
    assert uuid.UUID(first_token) != uuid.UUID(second_token)

    # Another message's token under this id, a fresh token, this token under another id:
    # none is this receive's handle, and none deletes or shows anything.
    forged = [
        f"{first_id}.{second_token}",
        f"{first_id}.{uuid.uuid4()}",
        f"{second_id + 1000}.{first_token}",
    ]
    queue.delete(forged)
    for handle in forged:
        queue.change_visibility(handle, now=now, timeout_s=0)
    queue.change_visibility_batch([(h, 0) for h in forged], now=now)
    assert _live(db) == [(first_id, 1), (second_id, 1)]
    assert queue.receive(now=now, max_messages=2, visibility_timeout_s=60) == []

    queue.delete([first.receipt_handle])
    assert _live(db) == [(second_id, 1)]
    queue.change_visibility_batch([(second.receipt_handle, 0)], now=now)
    (again,) = queue.receive(now=now, max_messages=2, visibility_timeout_s=60)
    assert again.message_id == second.message_id
    assert again.receive_count == 2
    queue.delete([second.receipt_handle])  # stale now: received again since
    assert _live(db) == [(second_id, 2)]
    queue.delete([again.receipt_handle])
    assert _live(db) == []


TOKEN = "0192a4b5-6c7d-4e8f-9a0b-1c2d3e4f5a6b"


@pytest.mark.parametrize(
    "handle",
    [
        "",
        TOKEN,  # a handle of before 0018: the token alone
        f"12.{TOKEN.upper()}",  # the database writes lower case
        f"-12.{TOKEN}",
        f"12 .{TOKEN}",
        f"12.{TOKEN[:-1]}",
        f"{10**19}.{TOKEN}",  # more than a bigint
        f"{2**63}.{TOKEN}",  # one more than a bigint, in 19 digits (trial finding)
        "AQEBzbVv...an SQS receipt handle",
    ],
)
def test_a_handle_of_another_form_is_refused_before_the_database(handle: str) -> None:
    with pytest.raises(ValueError, match="not a receipt handle of the PostgreSQL queue"):
        split_receipt_handle(handle)


def test_a_handle_of_the_largest_bigint_id_is_split() -> None:
    assert split_receipt_handle(f"{2**63 - 1}.{TOKEN}") == (2**63 - 1, TOKEN)
    assert split_receipt_handle(f"1.{TOKEN}") == (1, TOKEN)
