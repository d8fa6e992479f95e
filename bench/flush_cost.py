"""What the streaming completer's flush costs PostgreSQL per row, beside the same row
mutations in plain statements, and what each part of them costs (issue 15).

The flush of first sends without a lease (`delivery_record_first_sends_many`: insert the
delivery row with its outcome, finish the one-time reminder, in one statement) is the
largest per-row statement of an occurrence. On a scratch database migrated like
production, with `--reminders` one-time reminders `claimed` as the coordinator leaves
them, each round runs every variant below once on its own batch of `--batch` distinct
reminders, in turn (the machine's drift weighs on all alike), on one autocommit
connection, and prints the median wall time per row of each (one client, nothing else
running: the server's time plus one round trip per statement):

    flush        the statement as shipped (rows read with json_to_recordset)
    flush_jsonb  the same with jsonb_to_recordset, as before 2026-12-07
    plain        its two mutations as plain statements in one transaction: INSERT ... SELECT
                 FROM json_to_recordset, then UPDATE reminders WHERE id = ANY(array)
    decode       json_to_recordset of the rows alone (SELECT count(*))
    insert       the plain INSERT alone
    insert_bare  the same INSERT into a copy of delivery_log without its indexes
    update       the plain UPDATE alone
    update_nouser  the same after ix_reminders_user_created is dropped (measured last, as
                 its own rounds: the index the API lists a user's reminders by)

Usage: python -m bench.flush_cost [--reminders 150000] [--batch 500]
"""

from __future__ import annotations

import argparse
import statistics
import time
import uuid
from collections.abc import Sequence
from datetime import datetime

from sqlalchemy import Connection, Row, text

from bench.end_to_end import seed
from bench.support import scratch_database
from reminder_core.clock import utcnow
from reminder_core.db.session import make_engine
from reminder_core.domain.states import DeliveryStatus
from reminder_core.store._statements import id_array, json_rows, query

COLUMNS = (
    "id uuid, reminder_id uuid, user_id text, run_time_utc timestamptz, status text,"
    " sent_at timestamptz, provider text, provider_message_id text, recipient text,"
    " attempts int"
)
INSERT = (
    "INSERT INTO {table} (id, reminder_id, user_id, run_time_utc, status, sent_at, provider,"
    " provider_message_id, recipient, attempt_count, created_at, updated_at)"
    " SELECT u.id, u.reminder_id, u.user_id, u.run_time_utc, u.status, u.sent_at, u.provider,"
    " u.provider_message_id, u.recipient, u.attempts, :now, :now"
    f" FROM json_to_recordset(CAST(:rows AS json)) AS u({COLUMNS})"
)
UPDATE = (
    "UPDATE reminders SET status = 'completed', next_run_utc = NULL, claimed_by = NULL,"
    " claimed_at = NULL, last_error = NULL, updated_at = :now"
    " WHERE id = ANY(CAST(:ids AS uuid[]))"
)
VARIANTS = ("flush", "flush_jsonb", "plain", "decode", "insert", "insert_bare", "update")


def outcome_rows(batch: Sequence[Row[tuple[uuid.UUID, str, datetime]]], now: datetime) -> str:
    """The flush's :rows for `batch` (id, user_id, next_run_utc), each sent, as the
    completer builds them (`delivery_log._outcome_rows`)."""
    return json_rows(
        {
            "id": uuid.uuid4(),
            "run_time_utc": r.next_run_utc,
            "lease_token": None,
            "status": DeliveryStatus.SENT.value,
            "sent_at": now,
            "provider": "in-process",
            "provider_message_id": f"m-{r.id}",
            "recipient": "b@example.com",
            "error": None,
            "attempts": 1,
            "reminder_id": r.id,
            "occurrence_utc": r.next_run_utc,
            "user_id": r.user_id,
            "held_until": None,
        }
        for r in batch
    )


def run_variant(
    conn: Connection, variant: str, batch: Sequence[Row[tuple[uuid.UUID, str, datetime]]]
) -> float:
    """Seconds per row of `variant` on `batch` (see the module docstring)."""
    now = utcnow()
    rows = outcome_rows(batch, now)
    ids = id_array(r.id for r in batch)
    shipped = query("delivery_record_first_sends_many").text
    started = time.perf_counter()
    if variant in ("flush", "flush_jsonb"):
        statement = shipped
        if variant == "flush_jsonb":
            statement = shipped.replace(
                "json_to_recordset(CAST(:rows AS json))", "jsonb_to_recordset(CAST(:rows AS jsonb))"
            )
        finished = conn.execute(text(statement), {"rows": rows, "now": now}).all()
        if len(finished) != len(batch) or not all(f.finished for f in finished):
            raise SystemExit(f"{variant}: {len(finished)} of {len(batch)} recorded and finished")
    elif variant == "decode":
        conn.execute(
            text(f"SELECT count(*) FROM json_to_recordset(CAST(:rows AS json)) AS u({COLUMNS})"),
            {"rows": rows},
        )
    else:
        conn.exec_driver_sql("BEGIN")
        if variant in ("plain", "insert", "insert_bare"):
            table = "delivery_log_bare" if variant == "insert_bare" else "delivery_log"
            conn.execute(text(INSERT.format(table=table)), {"rows": rows, "now": now})
        if variant in ("plain", "update", "update_nouser"):
            conn.execute(text(UPDATE), {"ids": ids, "now": now})
        conn.exec_driver_sql("COMMIT")
    return (time.perf_counter() - started) / len(batch)


def split_of(batches: int) -> int:
    """How many of `batches` go to the alternated variants (two thirds, whole rounds of
    VARIANTS); the rest measure the update without the per-user index."""
    return (batches * 2 // 3) // len(VARIANTS) * len(VARIANTS)


def batch_count(reminders: int, batch: int) -> int:
    return -(-reminders // batch) if batch > 0 else 0


#: The fewest batches that give each alternated variant one warm-up and one measured
#: round, and the update without the index two rounds (statistics.median needs one value).
MIN_BATCHES = next(
    b for b in range(1, 10_000) if split_of(b) >= 2 * len(VARIANTS) and b - split_of(b) >= 2
)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--reminders", type=int, default=150_000)
    parser.add_argument("--batch", type=int, default=500)
    args = parser.parse_args()
    if args.batch < 1 or batch_count(args.reminders, args.batch) < MIN_BATCHES:
        parser.error(
            f"--reminders {args.reminders:,} in batches of {args.batch} make"
            f" {batch_count(args.reminders, args.batch)} batches; each variant needs a"
            f" warm-up round and a measured one: at least {MIN_BATCHES} batches"
            f" (--reminders {MIN_BATCHES * max(1, args.batch):,} or more at this batch)"
        )
    with scratch_database("reminders_flushcost") as url:
        engine = make_engine(url, pool_size=2)
        now = utcnow()
        n = args.reminders
        seed(engine, n)  # n one-time reminders of one user, all due
        with engine.connect().execution_options(isolation_level="AUTOCOMMIT") as conn:
            conn.execute(
                text(
                    "UPDATE reminders SET status = 'claimed', claimed_by = 'c', claimed_at = :now"
                ),
                {"now": now},
            )
            conn.execute(
                text("CREATE TABLE delivery_log_bare (LIKE delivery_log INCLUDING DEFAULTS)")
            )
            conn.execute(text("VACUUM ANALYZE reminders"))
            rows = conn.execute(
                text("SELECT id, user_id, next_run_utc FROM reminders ORDER BY random()")
            ).all()
            batches = [rows[i : i + args.batch] for i in range(0, len(rows), args.batch)]
            per_row: dict[str, list[float]] = {v: [] for v in (*VARIANTS, "update_nouser")}
            # Two thirds of the batches for the alternated variants, the rest for the
            # update once the per-user index is gone; the first round of each warms up.
            split = split_of(len(batches))
            for i, batch in enumerate(batches[:split]):
                variant = VARIANTS[i % len(VARIANTS)]
                seconds = run_variant(conn, variant, batch)
                if i >= len(VARIANTS):
                    per_row[variant].append(seconds)
            conn.execute(text("DROP INDEX ix_reminders_user_created"))
            for i, batch in enumerate(batches[split:]):
                seconds = run_variant(conn, "update_nouser", batch)
                if i:
                    per_row["update_nouser"].append(seconds)
        engine.dispose()
    print(f"{n:,} claimed one-time reminders, batches of {args.batch}; µs per row, median"
          " (10th-90th percentile) of the rounds")  # fmt: skip
    for variant, values in per_row.items():
        if not values:
            continue
        values.sort()
        low, high = values[len(values) // 10], values[len(values) * 9 // 10]
        print(f"  {variant:<14} {statistics.median(values) * 1e6:6.1f}"
              f"   ({low * 1e6:.1f}-{high * 1e6:.1f}, {len(values)} rounds)")  # fmt: skip
    flush = statistics.median(per_row["flush"])
    plain = statistics.median(per_row["plain"])
    print(f"  flush / plain: {flush / plain:.2f}")


if __name__ == "__main__":
    main()
