"""Claim throughput: Coordinator.claim vs the same SQL run through raw psycopg.

Prints claims per second, p50/p99 latency per batch, and the ratio of our path to the
raw-SQL reference (1.0 = no overhead). Uses DATABASE_URL (else an embedded PostgreSQL)
and a scratch database that it drops afterwards.

    python bench/claim_throughput.py [--reminders 20000] [--batch 500]
"""

from __future__ import annotations

import argparse
import statistics
import time
from datetime import UTC, datetime
from importlib import resources

import psycopg
from sqlalchemy import Engine, text
from sqlalchemy.engine import make_url

from bench.support import scratch_database
from coordinator.service import Coordinator
from reminder_core.db.session import make_engine
from reminder_core.queue import PostgresQueue

NOW = datetime(2030, 1, 1, 12, tzinfo=UTC)


def reset(engine: Engine, n: int) -> None:
    with engine.begin() as conn:
        conn.execute(text("TRUNCATE outbox, queue_messages, delivery_log, reminders CASCADE"))
        conn.execute(
            text(
                "INSERT INTO reminders (user_id, title, start_local, timezone, next_run_utc)"
                " SELECT 'u' || (g % 1000), 'bench ' || g, '2030-01-01T11:00', 'UTC',"
                " :due - (g || ' ms')::interval FROM generate_series(1, :n) g"
            ),
            {"n": n, "due": NOW},
        )
        conn.execute(text("ANALYZE reminders"))


def summarize(name: str, n: int, latencies: list[float], total_s: float) -> float:
    lat = sorted(latencies)
    p99 = lat[min(len(lat) - 1, int(len(lat) * 0.99))]
    rate = n / total_s
    print(
        f"{name:<28} {rate:>10.0f} claims/s   p50 {statistics.median(lat) * 1000:7.2f} ms"
        f"   p99 {p99 * 1000:7.2f} ms   ({len(lat)} batches)"
    )
    return rate


def bench_ours(engine: Engine, n: int, batch: int) -> float:
    reset(engine, n)
    queue = PostgresQueue(engine, name="bench", max_receive_count=5)
    coordinator = Coordinator(engine, queue, lookahead_s=0, batch_size=batch, worker_id="bench")
    latencies: list[float] = []
    claimed = 0
    start = time.perf_counter()
    while True:
        t0 = time.perf_counter()
        got = len(coordinator.claim(NOW))
        latencies.append(time.perf_counter() - t0)
        claimed += got
        if got == 0:
            break
    total = time.perf_counter() - start
    assert claimed == n, (claimed, n)
    return summarize("Coordinator.claim", n, latencies, total)


def claim_sql() -> str:
    """The text of `reminder_claim_due` as the store ships it (the raw reference runs the
    very statement `reminders.claim_due` runs, without the store or SQLAlchemy)."""
    source = resources.files("reminder_core.store.sql").joinpath("reminders.sql").read_text()
    block = source.split("-- name: reminder_claim_due\n", 1)[1].split("-- name:", 1)[0]
    return block.strip().rstrip(";")


def bench_raw(engine: Engine, url: str, n: int, batch: int) -> float:
    reset(engine, n)
    sql = claim_sql().replace(":horizon", "%(horizon)s")
    for name in ("now", "limit", "worker"):
        sql = sql.replace(f":{name}", f"%({name})s")
    dsn = make_url(url).set(drivername="postgresql").render_as_string(hide_password=False)
    latencies: list[float] = []
    claimed = 0
    with psycopg.connect(dsn) as conn:
        start = time.perf_counter()
        while True:
            t0 = time.perf_counter()
            with conn.transaction(), conn.cursor() as cur:
                cur.execute(sql, {"horizon": NOW, "now": NOW, "limit": batch, "worker": "raw"})
                got = len(cur.fetchall())
            latencies.append(time.perf_counter() - t0)
            claimed += got
            if got == 0:
                break
        total = time.perf_counter() - start
    assert claimed == n, (claimed, n)
    return summarize("raw psycopg reference", n, latencies, total)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--reminders", type=int, default=20_000)
    parser.add_argument("--batch", type=int, default=500)
    args = parser.parse_args()

    with scratch_database() as url:
        engine = make_engine(url, pool_size=2)
        print(f"claiming {args.reminders} due reminders in batches of {args.batch}")
        raw = bench_raw(engine, url, args.reminders, args.batch)
        ours = bench_ours(engine, args.reminders, args.batch)
        print(f"ratio ours/raw: {ours / raw:.2f}")
        print(f"(for scale: 10M reminders/day is {10_000_000 / 86400:.0f}/s)")
        engine.dispose()


if __name__ == "__main__":
    main()
