"""The plans PostgreSQL makes for the per-batch statements of the hot path, at the sizes a
burst gives the tables: each row of a batch is found through an index, never by reading
the whole table (docs/performance.md, "Plans that scan").

bench/end_to_end.py found three such plans (auto_explain, 30,000 occurrences): the
claim's update joined to its locked ids as a hash join over a sequential scan of every
reminder (20.6 ms a claim of 500, the largest single cost of an occurrence in
PostgreSQL), the queue's delete hashed the handles against a scan of queue_messages, and
the begin's check for a delivery row ran as one hashed scan of every delivery_log
partition. The plans are read with EXPLAIN on the statements as the store runs them, with
the parameters they are given; the tables are filled and analysed first.
"""

from __future__ import annotations

import json
import uuid
from datetime import datetime, timedelta

import pytest
from sqlalchemy import Connection, Engine, text

from reminder_core.clock import utcnow
from reminder_core.store._statements import id_array, query
from tests.support.workloads import insert_due

ROWS = 20_000
BATCH = 500


def plan(conn: Connection, name: str, params: dict[str, object]) -> str:
    """The plan of store statement `name` with `params`, as EXPLAIN prints it, in a
    transaction rolled back afterwards (EXPLAIN does not run the statement anyway)."""
    statement = query(name)
    rows = conn.execute(text("EXPLAIN (COSTS OFF) " + statement.text), params).all()
    return "\n".join(r[0] for r in rows)


def due_reminders(engine: Engine, now: datetime) -> None:
    """ROWS one-time reminders due over the ROWS seconds before `now`, analysed."""
    insert_due(engine, "plans", ROWS, first_due=now - timedelta(seconds=ROWS), spread_s=ROWS)
    with engine.begin() as conn:
        conn.execute(text("ANALYZE reminders"))


@pytest.mark.parametrize("name", ["reminder_claim_due_to_queue", "reminder_claim_due"])
def test_the_claim_updates_its_locked_rows_through_the_primary_key(db: Engine, name: str) -> None:
    now = utcnow()
    due_reminders(db, now)
    with db.begin() as conn:
        shown = plan(
            conn,
            name,
            {"horizon": now, "limit": BATCH, "worker": "w", "now": now, "queue": "reminders"},
        )
    assert "Index Scan using ix_reminders_due on reminders" in shown, shown
    assert "Index Scan using pk_reminders on reminders r" in shown, shown
    assert "Seq Scan on reminders" not in shown, shown
    assert "Hash Join" not in shown, shown


def test_the_queue_delete_finds_each_message_by_its_primary_key(db: Engine) -> None:
    with db.begin() as conn:
        ids = conn.execute(
            text(
                "INSERT INTO queue_messages (queue_name, body, visible_at, receipt_handle,"
                " receive_count) SELECT 'reminders', '{}', now(), gen_random_uuid(), 1"
                " FROM generate_series(1, :n) RETURNING id, receipt_handle"
            ),
            {"n": ROWS},
        ).all()
        conn.execute(text("ANALYZE queue_messages"))
        batch = ids[:: ROWS // BATCH]
        shown = plan(
            conn,
            "queue_message_delete_many",
            {
                "queue": "reminders",
                "ids": id_array([i for i, _ in batch]),
                "handles": "{" + ",".join(f'"{i}.{t}": 1' for i, t in batch) + "}",
            },
        )
    assert "Index Scan using pk_queue_messages on queue_messages q" in shown, shown
    assert "Seq Scan" not in shown, shown
    assert "Join" not in shown, shown
    assert "Nested Loop" not in shown, shown


def test_the_begin_probes_the_delivery_row_of_each_reminder(db: Engine) -> None:
    now = utcnow()
    due_reminders(db, now)
    with db.begin() as conn:
        conn.execute(
            text(
                "INSERT INTO delivery_log (reminder_id, user_id, run_time_utc, status, sent_at)"
                " SELECT id, user_id, next_run_utc, 'sent', next_run_utc FROM reminders"
            )
        )
        conn.execute(text("ANALYZE delivery_log"))
        filled = [
            name
            for (name,) in conn.execute(
                text("SELECT DISTINCT tableoid::regclass::text FROM delivery_log")
            )
        ]
        # A suppression list as large as the batch's recipients, analysed: the recipient
        # of each reminder is probed by the list's key, the list never read whole.
        conn.execute(
            text(
                "INSERT INTO suppressions (email, reason, created_at)"
                " SELECT 'user' || g || '@example.com', 'bounce', now()"
                " FROM generate_series(1, :n) AS g"
            ),
            {"n": ROWS},
        )
        conn.execute(text("ANALYZE suppressions"))
        ids = [r for (r,) in conn.execute(text("SELECT id FROM reminders LIMIT :n"), {"n": BATCH})]
        assert all(isinstance(i, uuid.UUID) for i in ids)
        recipients = json.dumps({str(i): f"user{n}@example.com" for n, i in enumerate(ids)})
        shown = plan(
            conn, "reminder_get_many_for_send", {"ids": id_array(ids), "recipients": recipients}
        )
    assert "Index Scan using pk_reminders on reminders r" in shown, shown
    assert (
        "Index Scan using pk_suppressions on suppressions s" in shown
        or "Index Only Scan using pk_suppressions on suppressions s" in shown
    ), shown
    assert "Seq Scan on suppressions" not in shown, shown
    # Per reminder, the unique key of each partition that holds rows is probed (run-time
    # pruning leaves the one partition of the occurrence; empty ones may be planned as
    # scans of nothing); no partition is read whole for the batch.
    assert filled, "the rows went into no partition"
    for partition in filled:
        assert f"Index Only Scan using {partition}_reminder_id_run_time_utc_key" in shown, shown
    assert "hashed SubPlan" not in shown, shown
