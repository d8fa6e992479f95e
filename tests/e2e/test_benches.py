"""Every benchmark `make bench` runs still runs: each at a tiny size, as its own process on
the test server (DATABASE_URL, else an embedded one), must exit 0 and print the figure
lines it exists for. `make bench` stopped at `bench/statement_cost.py` on 2026-12-07
(a statement's parameter had been renamed, the bench not); figures are not checked here
(benchmarks print them beside their references; tests never time anything).
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]

#: (arguments after `python`, a line each run must print)
BENCHES = {
    "claim_throughput": (["-m", "bench.claim_throughput", "--reminders", "2000"], "claims/s"),
    "next_occurrence": (["bench/next_occurrence.py", "--schedules", "20", "--rounds", "1"],
                        "next occurrences per CPU-second"),
    "end_to_end": (["-m", "bench.end_to_end", "--reminders", "3000", "--http-reminders", "1000",
                    "--batch", "100", "--pg-limit", "/nonexistent"],
                   "end to end, fake provider over HTTP, completion batch end"),
    "mutations": (["-m", "bench.mutations", "--n", "2000", "--repeat", "1"], "as shipped"),
    "api_load": (["-m", "bench.api_load", "--workers", "1", "--rates", "50", "--duration", "1",
                  "--clients", "2"], "saturation, 2 connections"),
    "statement_cost": (["-m", "bench.statement_cost", "--n", "30", "--repeat", "1"],
                       "store / psycopg alone"),
    "app_cpu": (["-m", "bench.app_cpu", "--n", "30", "--repeat", "1"], "create above the floor"),
    "flush_cost": (["-m", "bench.flush_cost", "--reminders", "8000", "--batch", "100"],
                   "flush / plain"),
    "latency": (["-m", "bench.latency", "--rate", "20", "--duration", "2", "--burst", "300",
                 "--memory", "0", "--no-in-process"], "drained in"),
}  # fmt: skip


@pytest.mark.parametrize("name", sorted(BENCHES))
def test_the_benchmark_runs_and_prints_its_figures(name: str) -> None:
    args, expected = BENCHES[name]
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    done = subprocess.run(
        [sys.executable, *args], cwd=ROOT, env=env, capture_output=True, text=True, timeout=300
    )
    output = done.stdout + done.stderr
    assert done.returncode == 0, output[-3000:]
    assert expected in output, output[-3000:]
