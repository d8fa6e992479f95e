"""Delivery lag and burst drain through the real workloads (separate processes).

Starts `reminders coordinator` and `--senders` x `reminders sender` with the shipped
settings on a scratch database (PostgreSQL table queue; the default file sink provider,
which writes and fsyncs each email before its delivery row says `sent`) and measures,
from the delivery rows (`sent_at` - `run_time_utc`, i.e. provider accepted - due):

* **steady**: `--rate` reminders due per second for `--duration` s (inserted beforehand,
  due on a regular grid): lag p50 / p99 / max;
* **burst**: `--burst` reminders all due at one instant: time from that instant until the
  last is sent (drain), and the lag percentiles;

and, beside them, the same burst through bench/end_to_end.py's in-process provider (no
file writes: the pipeline's own cost). Issue 15's targets on 2 cores: steady 100/s lag p99
<= 250 ms on a quiet machine; 20,000 at once drained <= 10 s in-process and <= 30 s on the
file sink. The RSS of every workload is printed after 10,000 occurrences and after the
run's `--memory` occurrences (issue 15: within 10%, no growth with work done). Printed,
never asserted.

    PYTHONPATH=. python bench/latency.py [--rate 100] [--duration 60] [--burst 20000]
        [--senders 2] [--memory 100000] [--json FILE]
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from pathlib import Path

from sqlalchemy import Engine, text

from bench.support import (
    free_port,
    percentile,
    process_tree,
    rss_bytes,
    scratch_database,
    state_directory,
)
from reminder_core.db.session import make_engine

#: RSS is compared after this many occurrences and at the end of the run.
RSS_EARLY = 10_000
PROFILES = {"bench": {"email": "bench@example.com", "timezone": "UTC"}}


def insert_due(engine: Engine, due: list[datetime]) -> None:
    """One one-time reminder per instant of `due` (aware UTC), user `bench`."""
    with engine.begin() as conn:
        conn.execute(
            text(
                "INSERT INTO reminders (user_id, title, start_local, timezone, next_run_utc)"
                " SELECT 'bench', 'bench ' || g.i, g.due AT TIME ZONE 'UTC',"
                " 'UTC', g.due FROM unnest(CAST(:due AS timestamptz[])) WITH ORDINALITY"
                " AS g(due, i)"
            ),
            {"due": due},
        )
        conn.execute(text("ANALYZE reminders"))


def lags(engine: Engine, since: datetime) -> tuple[list[float], datetime | None]:
    """Lag (sent_at - run_time_utc, seconds) of every occurrence due at or after `since`
    that was sent, and the last sent_at."""
    with engine.connect() as conn:
        rows = conn.execute(
            text(
                "SELECT extract(epoch FROM sent_at - run_time_utc), sent_at FROM delivery_log"
                " WHERE status = 'sent' AND run_time_utc >= :since"
            ),
            {"since": since},
        ).all()
    last = max((r[1] for r in rows), default=None)
    return [float(r[0]) for r in rows], last


def wait_sent(
    engine: Engine,
    since: datetime,
    n: int,
    timeout_s: float,
    on_total: Callable[[int], None] = lambda _: None,
) -> None:
    """Until `n` occurrences due at or after `since` are sent; `on_total` is told the
    number of occurrences sent in all, at every look (each 0.1 s)."""
    deadline = time.monotonic() + timeout_s
    with engine.connect() as conn:
        while time.monotonic() < deadline:
            sent, total = conn.execute(
                text(
                    "SELECT count(*) FILTER (WHERE run_time_utc >= :since), count(*)"
                    " FROM delivery_log WHERE status = 'sent'"
                ),
                {"since": since},
            ).one()
            conn.rollback()
            on_total(int(total))
            if sent >= n:
                return
            time.sleep(0.1)
    raise SystemExit(f"only part of {n} occurrences were sent within {timeout_s:.0f} s")


def describe(name: str, values: list[float]) -> str:
    return (
        f"{name:<34} n={len(values):>6}  lag p50 {percentile(values, 0.5) * 1000:7.0f} ms"
        f"  p99 {percentile(values, 0.99) * 1000:7.0f} ms"
        f"  max {max(values, default=float('nan')) * 1000:7.0f} ms"
    )


def start_workloads(
    mode: str, url: str, state: Path, senders: int
) -> tuple[list[str], list[subprocess.Popen[bytes]]]:
    """Start the system under test: "workloads" (a coordinator and `senders` senders, each
    its own process) or "dev" (`reminders dev`: API and every workload in one process).
    Returns the processes' names and the processes."""
    env = {
        **os.environ,
        "DATABASE_URL": url,
        "STATE_DIR": str(state),
        "JWT_SECRET": "bench-" + "k" * 40,
        "LOG_LEVEL": "WARNING",
        "QUEUE_URL": "postgres://bench",
        "METRICS_PORT": "0",
    }
    if mode == "dev":
        commands = [("dev", ["dev", "--port", str(free_port())])]
    else:
        commands = [("coordinator", ["coordinator"])] + [
            (f"sender-{i}", ["sender"]) for i in range(1, senders + 1)
        ]
    procs = []
    for name, argv in commands:
        log = (state / f"{name}.log").open("wb")
        procs.append(
            subprocess.Popen(
                [sys.executable, "-m", "reminders", *argv],
                env=env,
                stdout=log,
                stderr=subprocess.STDOUT,
            )
        )
    return [name for name, _ in commands], procs


def rss_all(procs: list[subprocess.Popen[bytes]]) -> list[int]:
    return [sum(rss_bytes(p) for p in process_tree(proc.pid)) for proc in procs]


def run_mode(mode: str, args: argparse.Namespace, figures: dict[str, float]) -> None:
    """Steady lag, burst drain and RSS growth of one system under test (`start_workloads`)
    on its own scratch database; figures go into `figures` (prefixed "dev_" for dev)."""
    with scratch_database("reminders_bench_lag") as url:
        state = state_directory("bench-lag-")
        (state / "profiles.json").write_text(json.dumps(PROFILES))
        engine = make_engine(url, pool_size=2)
        names, procs = start_workloads(mode, url, state, args.senders)
        tag = "" if mode == "workloads" else "dev_"
        try:
            time.sleep(3 if mode == "workloads" else 8)  # start (dev: migrate) and settle
            shape = (
                f"coordinator + {args.senders} senders (separate processes)"
                if mode == "workloads"
                else "`reminders dev` (API and every workload in one process)"
            )
            print(f"--- {shape}, file sink, PostgreSQL queue, shipped settings")
            # Steady: due on a grid from 3 s from now.
            n = int(args.rate * args.duration)
            t0 = datetime.now(UTC) + timedelta(seconds=3)
            insert_due(engine, [t0 + timedelta(seconds=i / args.rate) for i in range(n)])
            samples: dict[str, list[int]] = {}

            def on_total(total: int) -> None:
                if total >= RSS_EARLY and "early" not in samples:
                    samples["early"] = rss_all(procs)

            wait_sent(engine, t0, n, args.duration + 120, on_total)
            steady, _ = lags(engine, t0)
            print(describe(f"steady {args.rate:.0f}/s for {args.duration:.0f} s", steady))
            figures[f"{tag}steady_lag_p50_ms"] = percentile(steady, 0.5) * 1000
            figures[f"{tag}steady_lag_p99_ms"] = percentile(steady, 0.99) * 1000
            figures[f"{tag}steady_lag_max_ms"] = max(steady) * 1000

            # Burst: all due at one instant, 3 s from now (claimed ahead by LOOKAHEAD_S).
            burst_at = (datetime.now(UTC) + timedelta(seconds=3)).replace(microsecond=0)
            insert_due(engine, [burst_at] * args.burst)
            wait_sent(engine, burst_at, args.burst, 600, on_total)
            burst, last = lags(engine, burst_at)
            assert last is not None
            drain = (last - burst_at).total_seconds()
            print(describe(f"burst of {args.burst:,} at one instant", burst))
            print(
                f"{'':<34} drained in {drain:.1f} s ({args.burst / drain:,.0f}/s) on the file sink"
            )
            figures[f"{tag}burst_file_drain_s"] = drain
            delivered = n + args.burst
            while mode == "workloads" and delivered < args.memory:
                more = min(args.burst, args.memory - delivered)
                at = (datetime.now(UTC) + timedelta(seconds=3)).replace(microsecond=0)
                insert_due(engine, [at] * more)
                wait_sent(engine, at, more, 600, on_total)
                delivered += more
            late = rss_all(procs)
            early = samples.get("early")
            if early is not None and delivered >= 2 * RSS_EARLY:
                for name, a, b in zip(names, early, late, strict=True):
                    print(
                        f"RSS {name:<12} {a / 2**20:6.0f} MiB after {RSS_EARLY:,} occurrences,"
                        f" {b / 2**20:6.0f} MiB after {delivered:,} ({b / max(1, a) - 1:+.0%};"
                        " issue 15: within 10%)"
                    )
                    figures[f"{tag}rss_growth_{name}_pct"] = (b / max(1, a) - 1) * 100
        finally:
            for proc in procs:
                proc.terminate()
            for proc in procs:
                try:
                    proc.wait(timeout=30)
                except subprocess.TimeoutExpired:
                    proc.kill()
            engine.dispose()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rate", type=float, default=100.0, help="reminders due per second")
    parser.add_argument("--duration", type=float, default=60.0, help="seconds of steady load")
    parser.add_argument("--burst", type=int, default=20_000, help="reminders due at once")
    parser.add_argument("--senders", type=int, default=2, help="sender processes")
    parser.add_argument(
        "--memory",
        type=int,
        default=100_000,
        help="deliver this many occurrences in all (more bursts after the measured ones) and"
        " compare each workload's RSS after 10,000 with its RSS at the end (0: skip)",
    )
    parser.add_argument(
        "--in-process", action=argparse.BooleanOptionalAction, default=True,
        help="also drain the burst with bench/end_to_end.py's in-process provider",
    )  # fmt: skip
    parser.add_argument(
        "--modes",
        type=lambda v: v.split(","),
        default=["workloads", "dev"],
        help="systems under test, comma-separated: workloads (separate processes), dev"
        " (`reminders dev`; steady and burst only) (default: both)",
    )
    parser.add_argument("--json", type=Path, help="also write the figures here (make bench)")
    args = parser.parse_args()
    figures: dict[str, float] = {}

    for mode in args.modes:
        run_mode(mode, args, figures)

    if args.in_process:
        from bench.end_to_end import in_process_drain

        seconds = in_process_drain(args.burst, senders=3)
        print(
            f"{f'burst of {args.burst:,}, in-process provider':<34} drained in {seconds:.1f} s"
            f" ({args.burst / seconds:,.0f}/s; bench/end_to_end.py's pipeline, 3 senders)"
        )
        figures["burst_in_process_drain_s"] = seconds
    if args.json:
        args.json.write_text(json.dumps(figures, indent=2))


if __name__ == "__main__":
    main()
