"""API load: `POST /v1/reminders` open-loop and at saturation, beside a raw INSERT rate.

Starts `reminders api --workers N` (a real server, separate processes) on a scratch
database and drives it with aiohttp clients in their own processes:

* **raw INSERT reference**: single-row `INSERT INTO reminders ... RETURNING id`, one
  transaction each, from 1 and from `--clients` connections (processes) through psycopg
  with prepared statements: what the database alone does on this machine right now;
* **open loop** at each rate of `--rates` for `--duration` s: request i is sent at
  t0 + i/rate whether or not earlier ones have been answered, and its latency is measured
  from that scheduled instant (no coordinated omission: a stalled server shows as latency,
  not as fewer requests);
* **saturation**: `--clients` closed-loop connections as fast as answers come; creates/s,
  its ratio to the raw INSERT rate with as many connections, and the API processes' CPU per
  create (utime + stime of the server and its workers, from /proc);
* **overload**: open loop at twice the saturation rate; how many are shed (503 +
  Retry-After), how fast a shed answer comes, and `/healthz` latency meanwhile;
* **memory**: RSS of every API process after 10% and after 100% of the run's creates.

Issue 15's targets on 2 cores (PostgreSQL on the same cores): p99 <= 25 ms at 300 req/s,
>= 600 creates/s at saturation, <= 1.5 ms of API CPU per create, overload answered within
100 ms. The figures are printed, never asserted; repeat (`--repeat`) and compare within
one run: this machine's speed drifts by up to 40%.

    PYTHONPATH=. python bench/api_load.py [--workers N] [--rates 100,300,600]
        [--duration 10] [--clients 8] [--repeat 1] [--json FILE]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import multiprocessing as mp
import os
import subprocess
import sys
import time
from dataclasses import asdict, dataclass, field
from datetime import UTC, datetime, timedelta
from pathlib import Path

import aiohttp
import psycopg

from bench.support import (
    cpu_seconds,
    cpu_used,
    free_port,
    libpq_url,
    percentile,
    process_tree,
    rss_bytes,
    scratch_database,
    spread,
    state_directory,
)
from reminder_api.main import default_workers
from reminder_core.settings import Settings
from reminder_core.tokens import mint_token

USERS = 100
JWT_SECRET = "bench-" + "k" * 40
BODY = {
    "title": "Water the plants",
    "body": "The ones on the balcony",
    "start_local": "2031-03-30T09:00:00",
    "timezone": "Europe/Paris",
    "rrule": "FREQ=WEEKLY;BYDAY=MO,TH",
}
TIMEOUT_S = 30.0


@dataclass
class Phase:
    """What one load phase measured (latencies in seconds)."""

    name: str
    sent: int = 0
    statuses: dict[str, int] = field(default_factory=dict)
    latencies: list[float] = field(default_factory=list)  # of 201 answers
    shed_latencies: list[float] = field(default_factory=list)  # of 503 answers
    elapsed_s: float = 0.0
    api_cpu_s: float = 0.0
    health_latencies: list[float] = field(default_factory=list)

    @property
    def created(self) -> int:
        return self.statuses.get("201", 0)

    def merge(self, other: Phase) -> None:
        self.sent += other.sent
        for k, v in other.statuses.items():
            self.statuses[k] = self.statuses.get(k, 0) + v
        self.latencies += other.latencies
        self.shed_latencies += other.shed_latencies
        self.health_latencies += other.health_latencies
        self.elapsed_s = max(self.elapsed_s, other.elapsed_s)


# --- load generators (each in its own process) -------------------------------------------


async def _post(
    session: aiohttp.ClientSession, base: str, token: str, scheduled: float, phase: Phase
) -> None:
    try:
        async with session.post(
            base + "/v1/reminders",
            json=BODY,
            headers={"Authorization": f"Bearer {token}"},
        ) as response:
            await response.read()
            status = str(response.status)
    except (TimeoutError, aiohttp.ClientError) as exc:
        status = type(exc).__name__
    latency = time.perf_counter() - scheduled
    phase.statuses[status] = phase.statuses.get(status, 0) + 1
    if status == "201":
        phase.latencies.append(latency)
    elif status == "503":
        phase.shed_latencies.append(latency)


async def _health(session: aiohttp.ClientSession, base: str, until: float, phase: Phase) -> None:
    while time.perf_counter() < until:
        started = time.perf_counter()
        try:
            async with session.get(base + "/healthz") as response:
                await response.read()
            phase.health_latencies.append(time.perf_counter() - started)
        except (TimeoutError, aiohttp.ClientError):
            phase.health_latencies.append(TIMEOUT_S)
        await asyncio.sleep(0.1)


async def _get_healthz(session: aiohttp.ClientSession, base: str, phase: Phase) -> None:
    """One `GET /healthz` (no token, no database): the floor's request."""
    try:
        async with session.get(base + "/healthz") as response:
            await response.read()
            status = str(response.status)
    except (TimeoutError, aiohttp.ClientError) as exc:
        status = type(exc).__name__
    phase.statuses[status] = phase.statuses.get(status, 0) + 1


async def _open_loop(base: str, tokens: list[str], rate: float, duration_s: float) -> Phase:
    phase = Phase(f"open {rate:.0f}/s")
    n = int(rate * duration_s)
    timeout = aiohttp.ClientTimeout(total=TIMEOUT_S)
    connector = aiohttp.TCPConnector(limit=1000)
    async with aiohttp.ClientSession(timeout=timeout, connector=connector) as session:
        t0 = time.perf_counter() + 0.05
        health = asyncio.create_task(_health(session, base, t0 + duration_s, phase))
        tasks = []
        for i in range(n):
            scheduled = t0 + i / rate
            delay = scheduled - time.perf_counter()
            if delay > 0:
                await asyncio.sleep(delay)
            tasks.append(
                asyncio.create_task(_post(session, base, tokens[i % len(tokens)], scheduled, phase))
            )
            phase.sent += 1
        await asyncio.gather(*tasks, health)
        phase.elapsed_s = time.perf_counter() - t0
    return phase


async def _closed_loop(
    base: str, tokens: list[str], clients: int, duration_s: float, *, floor: bool = False
) -> Phase:
    """`clients` connections each sending its next request when the last is answered:
    creates, or with `floor` `GET /healthz`."""
    phase = Phase(f"saturation, {clients} connections")
    timeout = aiohttp.ClientTimeout(total=TIMEOUT_S)
    connector = aiohttp.TCPConnector(limit=clients)
    async with aiohttp.ClientSession(timeout=timeout, connector=connector) as session:
        t0 = time.perf_counter()
        until = t0 + duration_s

        async def client(k: int) -> None:
            i = k
            while time.perf_counter() < until:
                phase.sent += 1
                if floor:
                    await _get_healthz(session, base, phase)
                else:
                    await _post(session, base, tokens[i % len(tokens)], time.perf_counter(), phase)
                i += clients

        await asyncio.gather(*(client(k) for k in range(clients)))
        phase.elapsed_s = time.perf_counter() - t0
    return phase


def _generator(
    kind: str, base: str, tokens: list[str], x: float, duration_s: float, out: mp.Queue
) -> None:  # type: ignore[type-arg]
    try:
        import uvloop

        uvloop.install()
    except ImportError:
        pass
    if kind == "open":
        phase = asyncio.run(_open_loop(base, tokens, x, duration_s))
    else:
        floor = kind == "floor"
        phase = asyncio.run(_closed_loop(base, tokens, int(x), duration_s, floor=floor))
    out.put(asdict(phase))


def run_generators(
    kind: str,
    base: str,
    tokens: list[str],
    x: float,
    duration_s: float,
    processes: int,
    api_pid: int,
) -> Phase:
    """Run `processes` generator processes sharing the load `x` (a rate for "open", a
    number of connections for "closed"); returns their merged phase with the API's CPU."""
    ctx = mp.get_context("spawn")
    out = ctx.Queue()
    share = x / processes
    procs = [
        ctx.Process(target=_generator, args=(kind, base, tokens, share, duration_s, out))
        for _ in range(processes)
    ]
    api = process_tree(api_pid)
    before = cpu_seconds(api)
    for p in procs:
        p.start()
    phases = [Phase(**out.get()) for _ in procs]
    after = cpu_seconds(api)
    for p in procs:
        p.join()
    merged = phases[0]
    for other in phases[1:]:
        merged.merge(other)
    if kind == "closed":
        merged.name = f"saturation, {x:.0f} connections"
    merged.api_cpu_s = cpu_used(before, after)
    return merged


# --- raw INSERT reference ----------------------------------------------------------------

RAW_INSERT = (
    "INSERT INTO reminders (user_id, title, body, start_local, timezone, rrule, next_run_utc)"
    " VALUES (%s, %s, %s, %s, %s, %s, %s) RETURNING id"
)


def _raw_inserter(url: str, duration_s: float, start: float, out: mp.Queue) -> None:  # type: ignore[type-arg]
    due = datetime(2031, 3, 30, 7, tzinfo=UTC)
    count = 0
    with psycopg.connect(libpq_url(url), prepare_threshold=0) as conn:
        while time.time() < start:
            time.sleep(0.001)
        until = time.time() + duration_s
        while time.time() < until:
            conn.execute(
                RAW_INSERT,
                (
                    f"raw{count % USERS}",
                    BODY["title"],
                    BODY["body"],
                    "2031-03-30T09:00",
                    BODY["timezone"],
                    BODY["rrule"],
                    due + timedelta(seconds=count),
                ),
            ).fetchone()
            conn.commit()
            count += 1
    out.put(count)


def raw_insert_rate(url: str, connections: int, duration_s: float) -> float:
    """Single-row INSERTs per second from `connections` processes, one transaction each."""
    ctx = mp.get_context("spawn")
    out = ctx.Queue()
    start = time.time() + 1.0
    procs = [
        ctx.Process(target=_raw_inserter, args=(url, duration_s, start, out))
        for _ in range(connections)
    ]
    for p in procs:
        p.start()
    total = sum(out.get() for _ in procs)
    for p in procs:
        p.join()
    return total / duration_s


# --- the server --------------------------------------------------------------------------


def start_api(url: str, state: Path, workers: int) -> tuple[subprocess.Popen[bytes], str]:
    port = free_port()
    env = {
        **os.environ,
        "DATABASE_URL": url,
        "JWT_SECRET": JWT_SECRET,
        "STATE_DIR": str(state),
        "LOG_LEVEL": "WARNING",
        "QUEUE_URL": "postgres://bench",
    }
    env.pop("PROMETHEUS_MULTIPROC_DIR", None)
    proc = subprocess.Popen(
        [sys.executable, "-m", "reminders", "api", "--port", str(port), "--workers", str(workers)],
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=open(state / "api.log", "wb"),
    )
    base = f"http://127.0.0.1:{port}"
    deadline = time.time() + 60
    import httpx

    while time.time() < deadline:
        try:
            if httpx.get(base + "/readyz", timeout=1).status_code == 200:
                # every worker up: as many distinct answers as workers is not observable,
                # so wait for the supervisor's children instead
                if len(process_tree(proc.pid)) >= workers + (1 if workers > 1 else 0):
                    return proc, base
        except httpx.HTTPError:
            pass
        if proc.poll() is not None:
            raise SystemExit(f"the API exited: {(state / 'api.log').read_text()[-2000:]}")
        time.sleep(0.2)
    raise SystemExit("the API did not become ready in 60 s")


def api_rss(pid: int) -> list[int]:
    return [rss_bytes(p) for p in process_tree(pid) if p != pid or True]


# --- report ------------------------------------------------------------------------------


def ms(seconds: float) -> str:
    return f"{seconds * 1000:7.1f}"


def describe(phase: Phase, raw: float | None = None) -> str:
    rate = phase.created / phase.elapsed_s if phase.elapsed_s else 0.0
    lat = phase.latencies
    statuses = ", ".join(f"{k}: {v}" for k, v in sorted(phase.statuses.items()))
    line = (
        f"{phase.name:<30} {rate:8.0f}/s  p50 {ms(percentile(lat, 0.5))} ms"
        f"  p99 {ms(percentile(lat, 0.99))} ms  max {ms(max(lat, default=float('nan')))} ms"
        f"  [{statuses}]"
    )
    if phase.api_cpu_s and phase.created:
        line += f"  API CPU {phase.api_cpu_s / phase.created * 1000:.2f} ms/create"
    if raw:
        line += f"  = {rate / raw:.2f} x raw INSERT"
    return line


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--workers", type=int, default=default_workers(), help="API processes")
    parser.add_argument(
        "--rates", type=lambda v: [float(r) for r in v.split(",")], default=[100.0, 300.0, 600.0]
    )
    parser.add_argument("--duration", type=float, default=10.0, help="seconds per phase")
    parser.add_argument("--clients", type=int, default=8, help="connections at saturation")
    parser.add_argument("--repeat", type=int, default=1, help="rounds of every phase")
    parser.add_argument("--json", type=Path, help="also write the figures here (make bench)")
    args = parser.parse_args()

    with scratch_database("reminders_bench_api") as url:
        state = state_directory("bench-api-")
        (state / "profiles.json").write_text(
            json.dumps(
                {
                    f"u{i}": {"email": f"u{i}@example.com", "timezone": "Europe/Paris"}
                    for i in range(USERS)
                }
            )
        )
        settings = Settings(jwt_secret=JWT_SECRET, state_dir=state)
        tokens = [mint_token(settings, f"u{i}") for i in range(USERS)]
        api, base = start_api(url, state, args.workers)
        summary: dict[str, list[float]] = {}

        def note(key: str, value: float) -> None:
            summary.setdefault(key, []).append(value)

        try:
            print(
                f"API: {args.workers} worker process(es) on {os.cpu_count()} CPUs; "
                f"{args.duration:.0f} s per phase; PostgreSQL on the same machine"
            )
            # Warm-up: connections, prepared statements, the first imports.
            run_generators("closed", base, tokens, 4, 2.0, 1, api.pid)
            rss_early = api_rss(api.pid)
            for round_ in range(1, args.repeat + 1):
                print(f"--- round {round_}")
                raw1 = raw_insert_rate(url, 1, min(args.duration, 5.0))
                rawn = raw_insert_rate(url, args.clients, min(args.duration, 5.0))
                print(f"{'raw INSERT, 1 connection':<30} {raw1:8.0f}/s")
                print(f"{f'raw INSERT, {args.clients} connections':<30} {rawn:8.0f}/s")
                note("raw_insert_1", raw1)
                note("raw_insert_n", rawn)
                for rate in args.rates:
                    phase = run_generators("open", base, tokens, rate, args.duration, 1, api.pid)
                    print(describe(phase))
                    note(f"open_{rate:.0f}_p99_ms", percentile(phase.latencies, 0.99) * 1000)
                    note(f"open_{rate:.0f}_p50_ms", percentile(phase.latencies, 0.5) * 1000)
                sat = run_generators(
                    "closed", base, tokens, args.clients, args.duration, 2, api.pid
                )
                print(describe(sat, rawn))
                sat_rate = sat.created / sat.elapsed_s
                note("saturation_per_s", sat_rate)
                note("saturation_ratio_raw", sat_rate / rawn)
                note("api_cpu_ms_per_create", sat.api_cpu_s / max(1, sat.created) * 1000)
                # The floor: what uvicorn, the middleware and FastAPI's routing cost per
                # request with no route code, token or database (GET /healthz), beside a
                # create's CPU of the same round.
                floor = run_generators(
                    "floor", base, tokens, args.clients, min(args.duration, 5.0), 2, api.pid
                )
                served = floor.statuses.get("200", 0)
                floor_ms = floor.api_cpu_s / max(1, served) * 1000
                print(
                    f"{'floor: GET /healthz, saturated':<30} {served / floor.elapsed_s:7.0f}/s"
                    f"  API CPU {floor_ms:.2f} ms/request (server, middleware, routing)"
                )
                note("api_cpu_ms_floor", floor_ms)
                over_rate = 2 * sat_rate
                over = run_generators(
                    "open", base, tokens, over_rate, min(args.duration, 5.0), 2, api.pid
                )
                over.name = f"overload {over_rate:.0f}/s"
                print(describe(over))
                shed = over.statuses.get("503", 0)
                print(
                    f"{'':<30} shed {shed} of {over.sent} ({shed / max(1, over.sent):.0%}),"
                    f" 503 p99 {ms(percentile(over.shed_latencies, 0.99))} ms;"
                    f" /healthz p99 {ms(percentile(over.health_latencies, 0.99))} ms"
                    f" max {ms(max(over.health_latencies, default=float('nan')))} ms"
                )
                note("overload_503_p99_ms", percentile(over.shed_latencies, 0.99) * 1000)
                note("overload_healthz_p99_ms", percentile(over.health_latencies, 0.99) * 1000)
            rss_late = api_rss(api.pid)
            growth = sum(rss_late) / max(1, sum(rss_early)) - 1
            print(
                f"RSS of the API processes: {sum(rss_early) / 2**20:.0f} MiB after warm-up,"
                f" {sum(rss_late) / 2**20:.0f} MiB at the end ({growth:+.0%})"
            )
            note("api_rss_growth_pct", growth * 100)
            if args.repeat > 1:
                print("--- over rounds: median (min-max)")
                for key, values in summary.items():
                    print(f"{key:<30} {spread(values)}")
            if args.json:
                args.json.write_text(json.dumps(summary, indent=2))
        finally:
            api.terminate()
            try:
                api.wait(timeout=30)
            except subprocess.TimeoutExpired:
                api.kill()


if __name__ == "__main__":
    main()
