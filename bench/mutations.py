"""What each row mutation of an occurrence costs, and what fewer would reach (issue 15).

`bench/end_to_end.py`'s raw-SQL reference does an occurrence's row mutations on this
project's schema, set-based, with no Python in between: claim + queue message, receive,
delivery row inserted `sent` (a first send without a lease), reminder completed, queue
message deleted. This benchmark runs that reference step by step on a scratch database
(migrated like production) and prints each step's share of the time and of the WAL, then
runs variants, each beside `../shared/bench/pg_limit.py` in the same run:

- `as shipped`: the five steps above.
- `under a lease`: every send under a lease, as before first sends without a lease
  (and still for SES, SMTP, SQS and retries): the delivery row inserted `sending`, then
  updated `sent`.
- `reminder once too`: the claim also completes the reminder in the same update (one
  update of `reminders` per occurrence instead of two).

The last variant is a measurement of what a further state-machine change would buy, not
a shipped design: `claimed` is what the claim rescuer, quiet-hours holds and a move's
drain read (docs/performance.md).

Usage: python -m bench.mutations [--n 30000] [--repeat 2]
"""

from __future__ import annotations

import argparse
import time
from collections.abc import Sequence
from pathlib import Path

import psycopg
from sqlalchemy import Engine

from bench.end_to_end import (
    DELIVERY_ONCE,
    LEASED_RAW_STEPS,
    RAW_BATCH,
    RAW_STEPS,
    pg_limit_rate,
    seed,
    wal_lsn,
)
from bench.support import libpq_url, scratch_database, spread
from reminder_core.db.session import make_engine

STEP_NAMES = (
    "claim + queue message",
    "receive",
    "delivery row 'sent'",
    "reminder completed",
    "queue message deleted",
)

#: The claim that completes the reminder at once (replaces the claim and the completion).
CLAIM_COMPLETES = """WITH due AS (SELECT id FROM reminders WHERE status = 'pending'
                    AND next_run_utc <= now()
                    ORDER BY next_run_utc LIMIT %(b)s FOR UPDATE SKIP LOCKED),
            done AS (UPDATE reminders r SET status = 'completed', next_run_utc = NULL
                     FROM due WHERE r.id = due.id
                     RETURNING r.id, r.user_id)
       INSERT INTO queue_messages (queue_name, body, visible_at) SELECT 'raw',
              jsonb_build_object('reminder_id', id, 'run_time_utc', now(),
              'user_id', user_id), now() FROM done"""

VARIANTS: dict[str, list[str]] = {
    "as shipped": list(RAW_STEPS),
    "under a lease": list(LEASED_RAW_STEPS),
    "reminder once too": [CLAIM_COMPLETES, RAW_STEPS[1], DELIVERY_ONCE, RAW_STEPS[4]],
}


def run_steps(
    engine: Engine, url: str, steps: Sequence[str], n: int
) -> tuple[float, float, list[float], list[float]]:
    """Run `steps` over `n` fresh due reminders in rounds of RAW_BATCH, one transaction per
    round; (occurrences/s, WAL bytes per occurrence, seconds per step, WAL bytes per step)."""
    seed(engine, n)
    step_s = [0.0] * len(steps)
    step_wal = [0.0] * len(steps)
    with psycopg.connect(libpq_url(url)) as conn:
        lsn = "SELECT (pg_current_wal_insert_lsn() - '0/0'::pg_lsn)::bigint"
        probing = 0.0  # seconds spent reading the WAL position: not the reference's work
        wal_start = wal_lsn(engine)
        start = time.perf_counter()
        done = 0
        while done < n:
            with conn.transaction():
                claimed = 0
                for i, step in enumerate(steps):
                    p0 = time.perf_counter()
                    before_wal = int(conn.execute(lsn).fetchone()[0])  # type: ignore[index]
                    t0 = time.perf_counter()
                    count = conn.execute(step, {"b": RAW_BATCH}).rowcount
                    t1 = time.perf_counter()
                    step_wal[i] += int(conn.execute(lsn).fetchone()[0]) - before_wal  # type: ignore[index]
                    step_s[i] += t1 - t0
                    probing += (t0 - p0) + (time.perf_counter() - t1)
                    if i == 0:
                        claimed = count
            if claimed <= 0:
                raise RuntimeError(f"{steps[0][:40]!r} claimed nothing after {done} of {n}")
            done += claimed
        elapsed = time.perf_counter() - start - probing
    return n / elapsed, (wal_lsn(engine) - wal_start) / n, step_s, step_wal


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--n", type=int, default=30_000, help="occurrences per run")
    parser.add_argument("--repeat", type=int, default=2, help="rounds of every variant")
    parser.add_argument(
        "--pg-limit",
        type=Path,
        default=Path(__file__).resolve().parents[2] / "shared" / "bench" / "pg_limit.py",
    )
    args = parser.parse_args(argv)
    with scratch_database("reminders_bench_mutations") as url:
        engine = make_engine(url, pool_size=2)
        rates: dict[str, list[float]] = {name: [] for name in VARIANTS}
        wal: dict[str, list[float]] = {name: [] for name in VARIANTS}
        limits: list[float] = []
        shipped_s = [0.0] * len(STEP_NAMES)
        shipped_wal = [0.0] * len(STEP_NAMES)
        for _ in range(args.repeat):
            limit = pg_limit_rate(url, args.pg_limit)
            if limit is not None:
                limits.append(limit)
            for name, steps in VARIANTS.items():
                rate, per_occurrence, step_s, step_wal = run_steps(engine, url, steps, args.n)
                rates[name].append(rate)
                wal[name].append(per_occurrence)
                if name == "as shipped":
                    shipped_s = [a + b for a, b in zip(shipped_s, step_s, strict=True)]
                    shipped_wal = [a + b for a, b in zip(shipped_wal, step_wal, strict=True)]
        engine.dispose()
    total_s, total_wal = sum(shipped_s), sum(shipped_wal)
    print(f"as shipped, by step ({args.repeat} x {args.n:,} occurrences, batches of {RAW_BATCH}):")
    for name, s, w in zip(STEP_NAMES, shipped_s, shipped_wal, strict=True):
        share_s, share_wal = 100 * s / total_s, 100 * w / total_wal
        print(f"  {name:<24} {share_s:5.1f}% of the time   {share_wal:5.1f}% of the WAL")
    reference = f"pg_limit.py {spread(limits)}/s" if limits else "no pg_limit.py"
    print(f"variants ({reference}, same runs):")
    for name in VARIANTS:
        ratios = [r / lim for r, lim in zip(rates[name], limits, strict=False)]
        ratio = f" = {spread(ratios)} x pg_limit" if ratios else ""
        per = spread(wal[name])
        print(f"  {name:<18} {spread(rates[name])}/s{ratio}   WAL {per} bytes/occurrence")


if __name__ == "__main__":
    main()
