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


def test_end_to_end_runs_the_pg_limit_reference_before_each_in_process_run(
    tmp_path: Path,
) -> None:
    # A stand-in for ../shared/bench/pg_limit.py (the team's script, not in this
    # repository): it records its arguments and prints the line the real one prints.
    calls = tmp_path / "calls"
    script = tmp_path / "pg_limit.py"
    script.write_text(
        "import sys\n"
        f"open({str(calls)!r}, 'a').write(' '.join(sys.argv[1:]) + '\\n')\n"
        "print('whole pipeline: 12,000 occurrences/s')\n"
    )
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    done = subprocess.run(
        [sys.executable, "-m", "bench.end_to_end", "--reminders", "2000", "--providers",
         "in-process", "--batch", "100", "--sizing", "adaptive", "--pg-limit", str(script),
         "--pg-limit-n", "777"],
        cwd=ROOT, env=env, capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    output = done.stdout + done.stderr
    assert done.returncode == 0, output[-3000:]
    lines = calls.read_text().splitlines()
    assert len(lines) == 2  # once before each in-process run (streaming, batch end)
    assert all(line.startswith("postgresql://") and line.endswith(" 777") for line in lines)
    assert output.count("pg_limit.py whole pipeline (raw SQL), just before:   12,000/s") == 2
    assert output.count(" x pg_limit") == 2


def test_flush_cost_refuses_too_few_batches_before_touching_a_database() -> None:
    # 3,000 at 500 are 6 batches: too few for a warm-up and a measured round of each of
    # its seven variants (issue 15's trial: statistics.median failed on no rounds).
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    done = subprocess.run(
        [sys.executable, "-m", "bench.flush_cost", "--reminders", "3000", "--batch", "500"],
        cwd=ROOT, env=env, capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    assert done.returncode == 2, done.stdout + done.stderr
    assert "6 batches" in done.stderr
    assert "at least 21 batches" in done.stderr
    assert "Traceback" not in done.stderr
