"""What the database path of one `POST /v1/reminders` costs in the API's Python, beside
the same statements sent with psycopg alone (issue 15).

A create's database work, as the API does it through the store (its statements run by
`reminder_core.store._statements.run` on a pooled SQLAlchemy connection): one checkout,
the rate limit's take (one upsert in autocommit), then the create's transaction on the
same connection (the quota bound's update, the INSERT ... RETURNING *, the commit);
beside it the same with a checkout each for the take and the create (the API before the
connection was kept for the route).
The reference sends the same SQL text with the same parameters on one psycopg connection
kept open, prepared, with no pool and no result objects. One thread, one user, a scratch
database migrated like production; CPU seconds of this process (`time.process_time`) and
wall time per create, each median of `--repeat` rounds, and the ratio.

Usage: python -m bench.statement_cost [--n 1500] [--repeat 3]
"""

from __future__ import annotations

import argparse
import re
import statistics
import time
from collections.abc import Callable, Sequence
from datetime import UTC, datetime, timedelta
from typing import Any

import psycopg
from sqlalchemy import Connection

from bench.support import libpq_url, scratch_database
from reminder_core.db.session import make_engine
from reminder_core.store import live_reminder_bounds, rate_limits
from reminder_core.store import reminders as store
from reminder_core.store._statements import query
from reminder_core.store.reminders import NewReminder

NOW = datetime.now(UTC)


def new_reminder(i: int) -> NewReminder:
    """The bench's create (bench/api_load.py's body), due 30 days and `i` seconds on."""
    return NewReminder(
        user_id="u1", title="Water the plants", body="The ones on the balcony",
        start_local=datetime(2031, 3, 30, 9), all_day=False, timezone="Europe/Paris",
        rrule="FREQ=WEEKLY;BYDAY=MO,TH", exdates=(), dst_nonexistent="shift",
        dst_ambiguous="first", misfire_policy="latest", max_lateness_s=3600,
        next_run_utc=NOW + timedelta(days=30, seconds=i), client_request_id=None,
        request_fingerprint=None,
    )  # fmt: skip


def psycopg_text(name: str) -> str:
    """The store's statement `name` with `:param` placeholders as psycopg's `%(param)s`
    (a `::cast` is left alone)."""
    sql = str(query(name))
    return re.sub(r"(?<![:\w]):(\w+)", r"%(\1)s", sql.replace("%", "%%"))


def insert_params(new: NewReminder) -> dict[str, Any]:
    """`store.insert`'s parameters for psycopg (the same values the store binds)."""
    params = {f: getattr(new, f) for f in new.__dataclass_fields__}
    params["exdates"] = list(new.exdates)
    params["now"] = NOW
    return params


def per_create(fn: Callable[[int], None], n: int, offset: int) -> tuple[float, float]:
    """(CPU µs, wall µs) per call of `fn` over `n` calls."""
    cpu, wall = time.process_time(), time.perf_counter()
    for i in range(n):
        fn(offset + i)
    return (time.process_time() - cpu) / n * 1e6, (time.perf_counter() - wall) / n * 1e6


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--n", type=int, default=1500, help="creates per round")
    parser.add_argument("--repeat", type=int, default=3, help="alternated rounds")
    args = parser.parse_args(argv)
    with scratch_database("reminders_bench_statements") as url:
        engine = make_engine(url, pool_size=2)
        autocommit = engine.execution_options(isolation_level="AUTOCOMMIT")

        def take(_: int) -> None:
            with autocommit.connect() as conn:
                rate_limits.take(
                    conn, user_id="u1", now=datetime.now(UTC), emission_s=1e-4, tolerance_s=1e3
                )

        def create_on(conn: Connection, i: int) -> None:
            if live_reminder_bounds.increment(conn, user_id="u1") is None:
                live_reminder_bounds.start(conn, user_id="u1")
            store.insert(conn, new_reminder(i), now=NOW)
            conn.commit()

        def create(i: int) -> None:
            with engine.connect() as conn:
                create_on(conn, i)

        def take_then_create(i: int) -> None:
            # As the API does it (reminder_api.ratelimit): the take in autocommit on the
            # connection the route then uses for its transaction.
            with engine.connect() as conn:
                rate_limits.take(
                    conn, user_id="u1", now=datetime.now(UTC), emission_s=1e-4, tolerance_s=1e3,
                    autocommit=True,
                )  # fmt: skip
                create_on(conn, i)

        raw_conn = psycopg.connect(libpq_url(url), prepare_threshold=0)
        take_sql = psycopg_text("rate_limit_take")
        bound_sql = psycopg_text("live_reminder_bound_increment")
        insert_sql = psycopg_text("reminder_insert")

        def raw_take(_: int) -> None:
            raw_conn.autocommit = True
            raw_conn.execute(
                take_sql,
                {"user_id": "u1", "take_now": datetime.now(UTC), "emission_s": 1e-4,
                 "tolerance_s": 1e3},
            ).fetchall()  # fmt: skip
            raw_conn.autocommit = False

        def raw_create(i: int) -> None:
            raw_conn.execute(bound_sql, {"user_id": "u1"}).fetchall()
            raw_conn.execute(insert_sql, insert_params(new_reminder(i))).fetchall()
            raw_conn.commit()

        modes = {
            "store (SQLAlchemy, pool)": take_then_create,
            "store, two checkouts": lambda i: (take(i), create(i)),
            "psycopg alone": lambda i: (raw_take(i), raw_create(i)),
        }
        results: dict[str, list[tuple[float, float]]] = {name: [] for name in modes}
        offset = 0
        for fn in modes.values():  # warm-up: prepared statements, caches, the pool
            per_create(fn, 200, offset)
            offset += 200
        for round_ in range(args.repeat):
            order = list(modes) if round_ % 2 == 0 else list(reversed(modes))
            for name in order:
                results[name].append(per_create(modes[name], args.n, offset))
                offset += args.n
        raw_conn.close()
        engine.dispose()
    print(f"a create's database path, one thread ({args.repeat} x {args.n:,} creates, median):")
    cpu_of = {name: statistics.median(c for c, _ in r) for name, r in results.items()}
    for name, rounds in results.items():
        cpu, wall = cpu_of[name], statistics.median(w for _, w in rounds)
        print(f"  {name:<26} {cpu:6.0f} µs CPU   {wall:6.0f} µs wall per create")
    store_cpu, raw_cpu = cpu_of["store (SQLAlchemy, pool)"], cpu_of["psycopg alone"]
    print(f"  store / psycopg alone: {store_cpu / raw_cpu:.2f} x the CPU")
    two = cpu_of["store, two checkouts"]
    print(f"  one checkout saves {two - store_cpu:.0f} µs CPU per create")


if __name__ == "__main__":
    main()
