"""One table from the figures the benchmarks wrote (`make bench`): each figure beside
issue 15's target and the reference it is measured against, from the same run.

    python bench/summary.py DIR      # DIR holds api_load.json, latency.json, end_to_end.json
"""

from __future__ import annotations

import json
import os
import platform
import statistics
import sys
from datetime import UTC, datetime
from pathlib import Path

#: (file, key, what, unit, target): the target is ("<=" | ">=", bound) or None for a
#: reference figure.
ROWS: list[tuple[str, str, str, str, tuple[str, float] | None]] = [
    ("api_load", "raw_insert_n", "raw INSERT, 8 connections (reference)", "/s", None),
    ("api_load", "saturation_per_s", "API creates/s at saturation", "/s", (">=", 600)),
    ("api_load", "saturation_ratio_raw", "  ratio to the raw INSERT rate", "x", None),
    ("api_load", "api_cpu_ms_per_create", "API CPU per create", "ms", ("<=", 1.5)),
    ("api_load", "open_300_p99_ms", "API p99 at 300 req/s open loop", "ms", ("<=", 25)),
    ("api_load", "overload_503_p99_ms", "shed answer p99 at 2x saturation", "ms", ("<=", 100)),
    ("api_load", "overload_healthz_p99_ms", "/healthz p99 at 2x saturation", "ms", ("<=", 1000)),
    ("api_load", "api_rss_growth_pct", "API RSS growth over the run", "%", ("<=", 10)),
    ("latency", "steady_lag_p99_ms", "lag p99, 100 due/s steady", "ms", ("<=", 250)),
    ("latency", "dev_steady_lag_p99_ms", "lag p99, 100 due/s, reminders dev", "ms", ("<=", 250)),
    ("latency", "dev_burst_file_drain_s", "20,000 at once, reminders dev file sink", "s",
     ("<=", 30)),
    ("latency", "burst_in_process_drain_s", "20,000 at once, in-process provider", "s",
     ("<=", 10)),
    ("latency", "burst_file_drain_s", "20,000 at once, file sink, workloads", "s", ("<=", 30)),
    ("latency", "rss_growth_coordinator_pct", "coordinator RSS, 10k -> 100k", "%", ("<=", 10)),
    ("latency", "rss_growth_sender-1_pct", "sender RSS, 10k -> 100k", "%", ("<=", 10)),
    ("end_to_end", "pg_limit_per_s", "pg_limit.py whole pipeline (reference)", "/s", None),
    ("end_to_end", "in_process_batch100_per_s",
     "end to end in process (as shipped: batches sized 100 to 500)", "/s", None),
    ("end_to_end", "in_process_batch100_x_pg_limit", "  ratio to pg_limit.py", "x", (">=", 0.5)),
    ("end_to_end", "in_process_batch100_cpu_us", "  CPU per occurrence", "us", ("<=", 400)),
    ("end_to_end", "in_process_batch100_fixed_per_s",
     "end to end in process (batches fixed at 100)", "/s", None),
    ("end_to_end", "in_process_batch100_fixed_x_pg_limit", "  ratio to pg_limit.py", "x", None),
    ("end_to_end", "in_process_batch100_fixed_cpu_us", "  CPU per occurrence", "us", None),
    ("end_to_end", "http_batch100_per_s", "end to end over HTTP (as shipped)", "/s", (">=", 1500)),
    ("end_to_end", "http_batch100_fixed_per_s", "end to end over HTTP (batches fixed at 100)",
     "/s", None),
]  # fmt: skip


def main() -> None:
    folder = Path(sys.argv[1])
    data = {f.stem: json.loads(f.read_text()) for f in folder.glob("*.json") if f.stem != "summary"}
    cpu = platform.processor() or platform.machine()
    print(
        f"\n{datetime.now(UTC):%Y-%m-%d}, {platform.node()}: {cpu}, {os.cpu_count()} CPUs,"
        f" Python {platform.python_version()}"
    )
    print(f"{'figure':<42} {'value':>18} {'target':>9}  met")
    for source, key, what, unit, target in ROWS:
        raw = data.get(source, {}).get(key)
        if raw is None:
            continue
        values = raw if isinstance(raw, list) else [raw]
        value = statistics.median(values)
        shown = f"{value:,.2f}" if abs(value) < 10 else f"{value:,.0f}"
        if len(values) > 1:
            shown += (
                f" ({min(values):,.0f}-{max(values):,.0f})"
                if value >= 10
                else (f" ({min(values):.2f}-{max(values):.2f})")
            )
        verdict, wanted = "", ""
        if target is not None:
            op, bound = target
            wanted = f"{op} {bound:,g}"
            verdict = "yes" if (value <= bound if op == "<=" else value >= bound) else "NO"
        print(f"{what:<42} {shown + ' ' + unit:>18} {wanted:>9}  {verdict}")


if __name__ == "__main__":
    main()
