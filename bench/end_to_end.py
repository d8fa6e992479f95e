"""End-to-end delivery rate: coordinator → queue → sender → provider, on one database.

Runs the workloads as they are deployed, as separate processes: one coordinator (claim +
queue message) and `--senders` senders with the shipped settings, and measures
occurrences per second from the start until every occurrence is `sent`, once per sender
batch size in `--batch` (the default SENDER_BATCH_SIZE) and receive sizing in `--sizing`
(as shipped: sized to SENDER_BATCH_TARGET_S of work up to SENDER_BATCH_MAX; and fixed at
the batch size, as before: the fixed cost of a batch weighs on small ones):

(a) with an in-process provider that accepts everything, and
(b) over HTTP to the fake Resend-compatible provider (tests/support/fake_provider.py,
    a real local HTTP server, run as its own process), `--concurrency` calls in flight
    per sender;

each beside a raw-SQL reference that performs the same row mutations per occurrence
(claim with its queue insert, receive and delete, delivery insert and completion,
reminder completion) with set-based statements on one connection. The claim
rate alone is bench/claim_throughput.py. Issue 4's targets on 2 cores: >= 5,000/s
in-process and >= 1,500/s over HTTP.

    PYTHONPATH=. python bench/end_to_end.py [--reminders 100000] [--http-reminders 30000]
        [--senders 3] [--batch 100] [--sizing adaptive,fixed] [--concurrency 8] [--repeat 1]
"""

from __future__ import annotations

import argparse
import json
import multiprocessing as mp
import os
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from multiprocessing.queues import Queue
from multiprocessing.sharedctypes import Synchronized
from multiprocessing.synchronize import Barrier, Event
from pathlib import Path

import httpx
import psycopg
from sqlalchemy import Engine, text
from sqlalchemy.engine import make_url

from bench.support import cpu_seconds, cpu_used, postgres_pids, scratch_database
from coordinator.service import Coordinator
from reminder_core.db.session import make_engine
from reminder_core.gc_policy import apply_gc_policy
from reminder_core.logging import configure_logging
from reminder_core.profiles import LocalProfileSource
from reminder_core.queue import PostgresQueue
from reminder_core.scheduling import ScheduleConfig
from reminder_core.settings import Settings
from sender.complete import FlushStats
from sender.providers.base import OutgoingEmail, Provider, SendReceipt
from sender.providers.resend import ResendProvider
from sender.render import Renderer
from sender.service import Sender

RAW_BATCH = 500
#: The shipped settings (SENDER_*, VISIBILITY_TIMEOUT_S, DELIVERY_LEASE_S, ...).
DEFAULTS = Settings(jwt_secret="x" * 40)
CLAIM_BATCH = 500
#: A flush interval this long makes the completer write only when a batch ends (each
#: batch takes far less): the design before issue 12, measured beside the streaming one.
BATCH_END = 60.0
#: Occurrences of each pg_limit.py reference run (its rate does not depend on the count:
#: 29,200-31,600/s at 30,000 and 29,800-32,300/s at 100,000, alternated, 2026-12-07).
PG_LIMIT_N = 100_000
#: Where the team's reference lives: beside the project (../shared/bench/pg_limit.py, as
#: the developers' guide names it); PG_LIMIT_SCRIPT (or --pg-limit) names another place.
PG_LIMIT_DEFAULT = Path(__file__).resolve().parents[2] / "shared" / "bench" / "pg_limit.py"


class AcceptAll:
    """In-process provider: accepts every email; stands for a provider that delivers a
    key once (a repeat is answered with the first receipt, as Resend does)."""

    name = "memory"
    deduplicates_keys = True

    def send(self, email: OutgoingEmail, *, idempotency_key: str) -> SendReceipt:
        del email
        return SendReceipt(provider=self.name, provider_message_id=idempotency_key)


def seed(engine: Engine, n: int) -> None:
    with engine.begin() as conn:
        conn.execute(text("TRUNCATE delivery_log, outbox, queue_messages, reminders CASCADE"))
        conn.execute(
            text(
                "INSERT INTO reminders (user_id, title, start_local, timezone, next_run_utc)"
                " SELECT 'bench', 'bench ' || g, '2030-01-01T09:00', 'UTC', :due"
                " FROM generate_series(1, :n) g"
            ),
            {"n": n, "due": datetime.now(UTC) - timedelta(seconds=1)},
        )
        conn.execute(text("ANALYZE reminders"))


def gc_gen0_threshold() -> int:
    """GC_GEN0_THRESHOLD as the workloads read it (the shipped default unless set: the
    bench can be run with 0 to compare with Python's own collector)."""
    return Settings(jwt_secret="x" * 40).gc_gen0_threshold


def leaseless_first_send() -> bool:
    """SENDER_LEASELESS_FIRST_SEND as the workloads read it (the shipped default unless
    set: the bench can be run with false to compare with every send under a lease)."""
    return Settings(jwt_secret="x" * 40).sender_leaseless_first_send


def coordinator_process(url: str, n: int, ready: Barrier) -> None:
    engine = make_engine(url, pool_size=2)
    queue = PostgresQueue(engine, name="bench", max_receive_count=5)
    coordinator = Coordinator(
        engine, queue, lookahead_s=0, batch_size=CLAIM_BATCH, worker_id="bench"
    )
    apply_gc_policy(gc_gen0_threshold())  # as a deployed workload sets up (run_services)
    ready.wait()
    claimed = 0
    while claimed < n:
        claimed += coordinator.run_once(datetime.now(UTC)).counts.get("claimed", 0)
    engine.dispose()


def sender_process(
    url: str,
    profiles: str,
    provider_url: str | None,
    batch: int,
    concurrency: int,
    ready: Barrier,
    stop: Event,
    log_level: str | None = None,
    flush_interval_s: float = DEFAULTS.sender_flush_interval_s,
    stats: Queue[tuple[FlushStats, int, int]] | None = None,
    sent: Synchronized[int] | None = None,
    batch_max: int | None = None,
) -> None:
    """One sender until `stop`, its receives sized as shipped (SENDER_BATCH_TARGET_S,
    up to `batch_max`) or, with `batch_max` None, fixed at `batch`; adds each tick's `sent`
    outcomes to `sent` (shared by every sender: the monitor of `run_pipeline` reads it)
    and puts its completer's figures, its batches and the messages they held on `stats`
    at the end."""
    if log_level:
        configure_logging(log_level, "json")  # to stderr, as deployed
    if os.environ.get("BENCH_SWITCH_INTERVAL_S"):
        sys.setswitchinterval(float(os.environ["BENCH_SWITCH_INTERVAL_S"]))
    engine = make_engine(url, pool_size=2)
    queue = PostgresQueue(engine, name="bench", max_receive_count=5)
    provider: Provider = (
        ResendProvider(
            base_url=provider_url,
            api_key="bench",
            read_timeout_s=10,
            max_connections=concurrency,
        )
        if provider_url
        else AcceptAll()
    )
    sender = Sender(
        engine, queue, LocalProfileSource(Path(profiles)), Renderer(), provider,
        mail_from="bench@example.com", visibility_timeout_s=DEFAULTS.visibility_timeout_s,
        lease_s=DEFAULTS.delivery_lease_s,
        schedule_config=ScheduleConfig.from_settings(DEFAULTS),
        batch_size=batch, concurrency=concurrency, owns_provider=True,
        flush_interval_s=flush_interval_s,
        flush_max=batch if flush_interval_s >= BATCH_END else DEFAULTS.sender_flush_max,
        leaseless_first_send=leaseless_first_send(),
        batch_max=batch_max,
        batch_target_s=DEFAULTS.sender_batch_target_s if batch_max else 0.0,
    )  # fmt: skip
    apply_gc_policy(gc_gen0_threshold())  # as a deployed workload sets up (run_services)
    profile = os.environ.get("BENCH_PROFILE")  # a directory: CPU profile of each sender
    if profile:
        import yappi  # not a dependency: install it to profile

        yappi.set_clock_type("cpu")
        yappi.start()
    ready.wait()
    batches = messages = 0
    while not stop.is_set():
        tick = sender.run_once(datetime.now(UTC))
        if tick.processed:
            batches, messages = batches + 1, messages + tick.processed
        if sent is not None and tick.counts.get("sent"):
            with sent.get_lock():
                sent.value += tick.counts["sent"]
        if not tick.processed:
            time.sleep(0.005)
    if profile:
        yappi.stop()
        out = Path(profile) / f"sender-{os.getpid()}-{flush_interval_s}.txt"
        with out.open("w") as f:
            yappi.get_func_stats().sort("tsub").print_all(out=f, columns={
                0: ("name", 90), 1: ("ncall", 10), 2: ("tsub", 8), 3: ("ttot", 8)})  # fmt: skip
    if stats is not None:
        stats.put((sender.flush_stats(), batches, messages))
    sender.close()
    engine.dispose()


def run_pipeline(
    engine: Engine,
    url: str,
    profiles: Path,
    n: int,
    *,
    senders: int,
    batch: int,
    concurrency: int,
    provider_url: str | None = None,
    extra_pids: tuple[int, ...] = (),
    log_level: str | None = None,
    flush_interval_s: float = DEFAULTS.sender_flush_interval_s,
    batch_max: int | None = DEFAULTS.sender_batch_max,
) -> Run:
    """Occurrences per second from start until all `n` are `sent`, the CPU time per
    occurrence (microseconds) of each kind of process over that span, and the senders'
    completer figures. Receives are sized as shipped, `batch` to `batch_max` messages
    (None: fixed at `batch`)."""
    seed(engine, n)
    ctx = mp.get_context("spawn")
    ready = ctx.Barrier(senders + 2)
    stop = ctx.Event()
    stats: Queue[tuple[FlushStats, int, int]] = ctx.Queue()
    sent = ctx.Value("q", 0)
    procs = [ctx.Process(target=coordinator_process, args=(url, n, ready))] + [
        ctx.Process(
            target=sender_process,
            args=(
                url,
                str(profiles),
                provider_url,
                batch,
                concurrency,
                ready,
                stop,
                log_level,
                flush_interval_s,
                stats,
                sent,
                batch_max,
            ),
        )
        for _ in range(senders)
    ]
    for p in procs:
        p.start()
    ready.wait()
    start = time.perf_counter()
    groups = {
        "coordinator": [procs[0].pid or 0],
        "senders": [p.pid or 0 for p in procs[1:]],
        "postgres": postgres_pids(),
        "provider": list(extra_pids),
    }
    cpu_before = {k: cpu_seconds(v) for k, v in groups.items()}
    wal_before = wal_lsn(engine)
    elapsed = wait_until_sent(engine, sent, n, start)
    wal_bytes = wal_lsn(engine) - wal_before
    groups["postgres"] = sorted(set(groups["postgres"]) | set(postgres_pids()))
    cpu_us = {
        k: cpu_used(cpu_before.get(k, {}), cpu_seconds(v)) / n * 1e6 for k, v in groups.items()
    }
    stop.set()
    figures = [stats.get(timeout=60) for _ in range(senders)]
    for p in procs:
        p.join(30)
    return Run(
        n / elapsed, cpu_us, [f for f, _, _ in figures], wal_bytes / n,
        batches=sum(b for _, b, _ in figures), messages=sum(m for _, _, m in figures),
    )  # fmt: skip


def wait_until_sent(engine: Engine, sent: Synchronized[int], n: int, start: float) -> float:
    """Seconds from `start` (time.perf_counter()) until `n` delivery rows are `sent`.

    Polls every 20 ms the senders' own count of sent outcomes (`sent`, added after each
    batch settles: no query), and counts the rows once it reaches `n` (again every 20 ms
    while fewer are `sent`), so the figure stays the database's while the poll costs
    PostgreSQL nothing: a count over `delivery_log` every 20 ms was a scan of every row
    of the run, counted in postgres' CPU per occurrence."""
    while sent.value < n:
        time.sleep(0.02)
    with engine.connect() as conn:
        while True:
            done = conn.execute(
                text("SELECT count(*) FROM delivery_log WHERE status = 'sent'")
            ).scalar_one()
            conn.commit()
            if done >= n:
                return time.perf_counter() - start
            time.sleep(0.02)


@dataclass(frozen=True)
class Run:
    """One pipeline run: occurrences/s, CPU µs per occurrence by kind of process, each
    sender's completer figures, their batches, and the WAL PostgreSQL wrote per
    occurrence (bytes: what the run's row writes cost the database, a figure the
    machine's speed does not move)."""

    rate: float
    cpu_us: dict[str, float]
    flushes: list[FlushStats]
    wal_bytes: float = 0.0
    batches: int = 0  # the senders' receives that returned messages
    messages: int = 0  # the messages those receives returned

    def flush_line(self) -> str:
        """Mean flush size, mean interval between flush starts (per sender) and mean
        wait from a provider's answer to its commit."""
        n = sum(f.flushes for f in self.flushes)
        results = sum(f.results for f in self.flushes)
        intervals = [f.mean_interval_s for f in self.flushes if f.flushes > 1]
        wait = sum(f.wait_s for f in self.flushes) / results if results else 0.0
        interval = sum(intervals) / len(intervals) if intervals else 0.0
        return (f"{n:,} flushes, mean {results / n if n else 0:.1f} outcomes each,"
                f" every {interval * 1e3:.1f} ms per sender; answer -> commit"
                f" {wait * 1e3:.1f} ms mean; {self.batches:,} batches, mean"
                f" {self.messages / self.batches if self.batches else 0:.0f} messages")  # fmt: skip


#: The row mutations of an occurrence sent under a lease (SENDER_LEASELESS_FIRST_SEND
#: off, or a provider that does not deduplicate): the delivery row inserted `sending`
#: before the call and updated `sent` after it.
LEASED_RAW_STEPS = [
    # claim + queue message (the coordinator's statement on the PostgreSQL queue)
    """WITH due AS (SELECT id FROM reminders WHERE status = 'pending' AND next_run_utc <= now()
                    ORDER BY next_run_utc LIMIT %(b)s FOR UPDATE SKIP LOCKED),
            claimed AS (UPDATE reminders r SET status = 'claimed', claimed_by = 'raw',
                        claimed_at = now() FROM due WHERE r.id = due.id
                        RETURNING r.id, r.user_id, r.next_run_utc)
       INSERT INTO queue_messages (queue_name, body, visible_at) SELECT 'raw',
              jsonb_build_object('reminder_id', id, 'run_time_utc', next_run_utc,
              'user_id', user_id), greatest(next_run_utc, now()) FROM claimed""",
    """UPDATE queue_messages SET receive_count = receive_count + 1,
              visible_at = now() + interval '60 s', receipt_handle = gen_random_uuid()
       WHERE id IN (SELECT id FROM queue_messages WHERE queue_name = 'raw'
                    AND receipt_handle IS NULL LIMIT %(b)s FOR UPDATE SKIP LOCKED)""",
    """INSERT INTO delivery_log (reminder_id, user_id, run_time_utc, status, locked_at,
              lease_token)
       SELECT (body->>'reminder_id')::uuid, body->>'user_id',
              (body->>'run_time_utc')::timestamptz, 'sending', now(), gen_random_uuid()
       FROM queue_messages WHERE queue_name = 'raw' AND receipt_handle IS NOT NULL
       ON CONFLICT DO NOTHING""",
    """UPDATE delivery_log SET status = 'sent', sent_at = now(), attempt_count = 1,
              locked_at = NULL, lease_token = NULL WHERE status = 'sending'""",
    """UPDATE reminders SET status = 'completed', next_run_utc = NULL, claimed_by = NULL,
              claimed_at = NULL WHERE status = 'claimed'""",
    """DELETE FROM queue_messages WHERE queue_name = 'raw' AND receipt_handle IS NOT NULL""",
]

#: The delivery row written once, as it ends (a first send without a lease).
DELIVERY_ONCE = """INSERT INTO delivery_log (reminder_id, user_id, run_time_utc, status, sent_at,
              attempt_count)
       SELECT (body->>'reminder_id')::uuid, body->>'user_id',
              (body->>'run_time_utc')::timestamptz, 'sent', now(), 1
       FROM queue_messages WHERE queue_name = 'raw' AND receipt_handle IS NOT NULL
       ON CONFLICT DO NOTHING"""

#: The row mutations of an occurrence as shipped (the PostgreSQL queue, a provider that
#: delivers each key once: docs/design.md, "First sends without a lease"): claim + queue
#: message, receive, delivery row inserted `sent`, reminder completed (the last two in
#: one statement in the sender), queue message deleted.
RAW_STEPS = [LEASED_RAW_STEPS[0], LEASED_RAW_STEPS[1], DELIVERY_ONCE, *LEASED_RAW_STEPS[4:]]


def wal_lsn(engine: Engine) -> int:
    """The database cluster's current WAL position, in bytes (pg_current_wal_lsn)."""
    with engine.connect() as conn:
        return int(conn.execute(text("SELECT pg_current_wal_lsn() - '0/0'::pg_lsn")).scalar_one())


def run_raw(engine: Engine, url: str, n: int) -> tuple[float, float]:
    """The raw-SQL reference's rate (occurrences/s) and WAL per occurrence (bytes)."""
    seed(engine, n)
    wal_before = wal_lsn(engine)
    dsn = make_url(url).set(drivername="postgresql").render_as_string(hide_password=False)
    with psycopg.connect(dsn) as conn:
        start = time.perf_counter()
        done = 0
        while done < n:
            with conn.transaction():
                claimed = conn.execute(RAW_STEPS[0], {"b": RAW_BATCH}).rowcount
                for step in RAW_STEPS[1:]:
                    conn.execute(step, {"b": RAW_BATCH})
            if claimed <= 0:
                raise RuntimeError(f"the raw-SQL reference claimed nothing after {done} of {n}")
            # Each round completes what it claimed (its steps are set-based over every
            # row of the round): the claim's row count is the progress, with no count
            # over `reminders` per round slowing the reference down.
            done += claimed
        rate = n / (time.perf_counter() - start)
    return rate, (wal_lsn(engine) - wal_before) / n


def start_fake_provider() -> tuple[subprocess.Popen[bytes], str]:
    """The fake provider in its own process (as a real provider is not in ours)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    proc = subprocess.Popen(
        [sys.executable, "-m", "tests.support.fake_provider", "--port", str(port)],
        env={**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[1])},
    )
    url = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + 20
    while True:
        try:
            httpx.get(f"{url}/_stats", timeout=1)
            return proc, url
        except httpx.TransportError:
            if time.monotonic() > deadline:
                proc.kill()
                raise
            time.sleep(0.1)


def modes_in_order(repeat: int) -> list[str]:
    """The completion modes to run, `repeat` pairs in ABBA order (streaming, batch end,
    batch end, streaming, ...): a machine that speeds up or slows down during the run
    then weighs on both modes alike instead of on the one that always runs second."""
    order = []
    for i in range(repeat):
        pair = ["streaming", "batch end"]
        order += pair if i % 2 == 0 else pair[::-1]
    return order


def pair_line(ratios: list[float], repeat: int) -> str:
    """The streaming ÷ batch-end ratio of each pair, and their median when there are
    several."""
    line = ", ".join(f"{r:.3f}" for r in ratios)
    if len(ratios) > 1:
        order = " ".join("S" if m == "streaming" else "B" for m in modes_in_order(repeat))
        line += f"   (median {statistics.median(ratios):.3f} of {len(ratios)}; order {order})"
    return line


def pg_limit_rate(url: str, script: Path, n: int = PG_LIMIT_N) -> float | None:
    """The whole-pipeline rate ../shared/bench/pg_limit.py prints for `n` occurrences on the
    database of `url` (its own tables, dropped after), or None when the script is absent."""
    if not script.exists():
        print(f"(no {script}: the pg_limit reference is skipped)")
        return None
    dsn = url.replace("postgresql+psycopg://", "postgresql://", 1)
    done = subprocess.run(
        [sys.executable, str(script), dsn, str(n)], capture_output=True, text=True, timeout=600
    )
    for line in done.stdout.splitlines():
        if line.startswith("whole pipeline"):
            return float(line.split(":", 1)[1].split("occurrences/s")[0].replace(",", ""))
    print(f"pg_limit.py printed no whole-pipeline rate: {done.stdout[-500:]}{done.stderr[-500:]}")
    return None


def in_process_drain(n: int, *, senders: int) -> float:
    """Seconds to deliver `n` occurrences all due at once through this pipeline with the
    in-process provider and the shipped settings, on a scratch database (bench/latency.py
    prints it beside the file sink's drain)."""
    with scratch_database() as url:
        engine = make_engine(url, pool_size=2)
        profiles = Path(tempfile.mkdtemp()) / "profiles.json"
        profiles.write_text(json.dumps({"bench": {"email": "b@example.com", "timezone": "UTC"}}))
        run = run_pipeline(
            engine, url, profiles, n, senders=senders, batch=DEFAULTS.sender_batch_size,
            concurrency=1,
        )  # fmt: skip
        engine.dispose()
    return n / run.rate


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--reminders",
        type=int,
        default=PG_LIMIT_N,
        help="occurrences per in-process run and for the bench's own set-based raw-SQL"
        " reference (default: as many as each pg_limit.py run, --pg-limit-n; a run of ~2 s,"
        " e.g. 30,000, weighs start-up: connections, template compilation, statements not"
        " yet prepared)",
    )
    parser.add_argument(
        "--pg-limit-n",
        type=int,
        default=PG_LIMIT_N,
        help="occurrences of each pg_limit.py run (its rate does not depend on the count)",
    )
    parser.add_argument(
        "--http-reminders",
        type=int,
        default=30_000,
        help="occurrences per run over HTTP (~15 s a run at 2,000/s)",
    )
    parser.add_argument("--senders", type=int, default=3, help="sender processes")
    parser.add_argument(
        "--batch",
        type=lambda v: [int(b) for b in v.split(",")],
        default=[DEFAULTS.sender_batch_size],
        help="messages per receive (SENDER_BATCH_SIZE), one run per value and --sizing,"
        f" comma-separated (default: the default {DEFAULTS.sender_batch_size})",
    )
    parser.add_argument(
        "--sizing",
        type=lambda v: v.split(","),
        default=["adaptive", "fixed"],
        help="how receives are sized, one run per value, comma-separated: adaptive (as"
        f" shipped: SENDER_BATCH_TARGET_S={DEFAULTS.sender_batch_target_s:g} s of work,"
        f" from --batch up to SENDER_BATCH_MAX={DEFAULTS.sender_batch_max}) and fixed"
        " (always --batch, as before SENDER_BATCH_MAX); default: both. A list such as"
        " adaptive,fixed,fixed,adaptive alternates them (ABBA)",
    )
    parser.add_argument(
        "--concurrency",
        type=int,
        default=DEFAULTS.sender_concurrency,
        help="provider calls in flight per sender over HTTP (default: SENDER_CONCURRENCY's)",
    )
    parser.add_argument(
        "--providers",
        type=lambda v: v.split(","),
        default=["in-process", "http"],
        help="which providers to run, comma-separated (default: in-process,http)",
    )
    parser.add_argument(
        "--repeat",
        type=int,
        default=1,
        help="pairs of runs (streaming and batch-end completion) per configuration, in"
        " ABBA order; the ratio of each pair is printed, and their median",
    )
    parser.add_argument(
        "--log-level",
        help="configure JSON logging at this level in the senders (stderr; redirect it);"
        " default: logging not configured (only WARNING and up reach stderr)",
    )
    parser.add_argument("--json", type=Path, help="also write the figures here (make bench)")
    parser.add_argument(
        "--pg-limit",
        type=Path,
        default=Path(os.environ.get("PG_LIMIT_SCRIPT") or PG_LIMIT_DEFAULT),
        help="the team's physical-limit reference (raw SQL, same database), run right before"
        " each in-process run, which is compared with it; skipped when the file is not there"
        " (default: $PG_LIMIT_SCRIPT, else ../shared/bench/pg_limit.py beside the project)",
    )
    args = parser.parse_args()
    fake, fake_url = start_fake_provider()
    with scratch_database() as url:
        try:
            run_all(args, url, fake, fake_url)
        finally:
            fake.terminate()
            fake.wait(10)


def run_all(
    args: argparse.Namespace, url: str, fake: subprocess.Popen[bytes], fake_url: str
) -> None:
    """Every configuration of `args` on the scratch database `url`, printed."""
    engine = make_engine(url, pool_size=2)
    profiles = Path(tempfile.mkdtemp()) / "profiles.json"
    profiles.write_text(json.dumps({"bench": {"email": "b@example.com", "timezone": "UTC"}}))
    n = args.reminders
    raw, raw_wal = run_raw(engine, url, n)
    print(
        f"{n} one-time occurrences per in-process run, {args.http_reminders} over HTTP;"
        f" processes: 1 coordinator + {args.senders}"
        f" senders; {os.cpu_count()} CPUs shared with PostgreSQL"
    )
    print(f"raw-SQL reference (same row mutations, set-based): {raw:8,.0f}/s"
          f"   WAL {raw_wal:,.0f} bytes per occurrence")  # fmt: skip
    figures: dict[str, list[float]] = {"raw_sql_per_s": [raw]}
    # pg_limit.py runs right before each in-process run and that run is compared with it:
    # one reference for the whole bench compared runs minutes apart on a machine whose
    # speed drifts by up to 40%.
    with_limit = args.pg_limit.exists()
    if not with_limit:
        print(f"(no {args.pg_limit}: the pg_limit reference is skipped)")
    else:
        print(f"{args.pg_limit} whole pipeline (raw SQL, {args.pg_limit_n:,} occurrences)"
              " runs before each in-process run; issue 15: in-process >= 0.5 x it")  # fmt: skip
    for batch, sizing in [(b, z) for b in args.batch for z in args.sizing]:
        default = " (the default)" if batch == DEFAULTS.sender_batch_size else ""
        batch_max: int | None = None
        suffix = "_fixed"
        if sizing == "adaptive" and DEFAULTS.sender_batch_max > batch:
            batch_max, suffix = DEFAULTS.sender_batch_max, ""
            how = (f", receives sized to {DEFAULTS.sender_batch_target_s:g} s of work up to"
                   f" SENDER_BATCH_MAX={batch_max} (as shipped)")  # fmt: skip
        elif sizing == "adaptive":
            suffix = ""  # nothing to size: SENDER_BATCH_MAX is no larger
            how = ""
        else:
            how = ", receives fixed at it (SENDER_BATCH_TARGET_S=0)"
        print(f"-- SENDER_BATCH_SIZE={batch}{default}{how}")
        for label, http in (("in-process provider", False), ("fake provider over HTTP", True)):
            if ("http" if http else "in-process") not in args.providers:
                continue
            shape = dict(
                senders=args.senders, batch=batch, log_level=args.log_level,
                concurrency=args.concurrency if http else 1,
                provider_url=fake_url if http else None,
                extra_pids=(fake.pid,) if http else (), batch_max=batch_max,
            )  # fmt: skip
            target = "1,500" if http else "5,000"
            runs: dict[str, list[Run]] = {"streaming": [], "batch end": []}
            for mode in modes_in_order(args.repeat):
                interval = {"streaming": DEFAULTS.sender_flush_interval_s,
                            "batch end": BATCH_END}[mode]  # fmt: skip
                limit = None
                if with_limit and not http:
                    limit = pg_limit_rate(url, args.pg_limit, args.pg_limit_n)
                    if limit:
                        figures.setdefault("pg_limit_per_s", []).append(limit)
                        print(f"pg_limit.py whole pipeline (raw SQL), just before: {limit:8,.0f}/s")
                count = args.http_reminders if http else n
                run = run_pipeline(engine, url, profiles, count, flush_interval_s=interval, **shape)
                runs[mode].append(run)
                if mode == "streaming":
                    kind = "http" if http else "in_process"
                    figures.setdefault(f"{kind}_batch{batch}{suffix}_per_s", []).append(run.rate)
                    figures.setdefault(f"{kind}_batch{batch}{suffix}_cpu_us", []).append(
                        sum(run.cpu_us.values())
                    )
                    if limit:
                        figures.setdefault(f"{kind}_batch{batch}{suffix}_x_pg_limit", []).append(
                            run.rate / limit
                        )
                versus = f", {run.rate / limit:.2f} x pg_limit" if limit else ""
                print(f"end to end, {label}, completion {mode:>9}: {run.rate:8,.0f}/s"
                      f"   ratio {run.rate / raw:.3f}{versus}"
                      f"   (target >= {target}/s)")  # fmt: skip
                print(f"    completer: {run.flush_line()}")
                parts = ", ".join(f"{k} {v:,.0f}" for k, v in run.cpu_us.items() if v)
                total = sum(run.cpu_us.values())
                print(f"    CPU per occurrence (µs): {parts}; total {total:,.0f}"
                      f" -> at most {(os.cpu_count() or 1) * 1e6 / total:,.0f}/s on"
                      f" {os.cpu_count()} cores; WAL {run.wal_bytes:,.0f} bytes")  # fmt: skip
                if mode == "streaming":
                    figures.setdefault(f"{kind}_batch{batch}{suffix}_wal_bytes", []).append(
                        run.wal_bytes
                    )
            pairs = [
                s.rate / b.rate for s, b in zip(runs["streaming"], runs["batch end"], strict=True)
            ]
            print(f"    streaming / batch-end completion: {pair_line(pairs, args.repeat)}")
    engine.dispose()
    if args.json:
        args.json.write_text(json.dumps(figures, indent=2))


if __name__ == "__main__":
    main()
