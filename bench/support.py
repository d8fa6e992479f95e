"""What the benchmarks share: a scratch database, CPU time of processes, free ports."""

from __future__ import annotations

import atexit
import contextlib
import os
import secrets
import shutil
import socket
import statistics
import tempfile
from collections.abc import Iterator
from pathlib import Path

from sqlalchemy import create_engine, text
from sqlalchemy.engine import make_url

from reminder_core.db.embedded import embedded_database_url
from reminder_core.db.migrate import upgrade
from reminder_core.db.session import normalize_url

TICKS = os.sysconf("SC_CLK_TCK")
#: Where the benchmarks' embedded PostgreSQL keeps its data when DATABASE_URL is unset: one
#: directory for every run (each run's scratch database is dropped after it). A new one per
#: run left a data directory of up to 1.1 GB (mostly WAL) behind each bench, 29 GB in one
#: day of `make bench` runs.
EMBEDDED_STATE = Path(tempfile.gettempdir()) / "reminders-bench"


def state_directory(prefix: str) -> Path:
    """A new temporary directory for one bench run's state (profiles, mail), removed when
    the process exits."""
    path = Path(tempfile.mkdtemp(prefix=prefix))
    atexit.register(shutil.rmtree, path, True)
    return path


@contextlib.contextmanager
def scratch_database(prefix: str = "reminders_bench") -> Iterator[str]:
    """A new, migrated database on DATABASE_URL's server (else on the embedded PostgreSQL
    of EMBEDDED_STATE, shared by every bench run), dropped afterwards; yields its
    SQLAlchemy URL."""
    admin = os.environ.get("DATABASE_URL")
    admin = normalize_url(admin) if admin else embedded_database_url(EMBEDDED_STATE)
    name = f"{prefix}_{secrets.token_hex(3)}"
    admin_engine = create_engine(admin, isolation_level="AUTOCOMMIT")
    with admin_engine.connect() as conn:
        conn.execute(text(f'CREATE DATABASE "{name}"'))
    url = make_url(admin).set(database=name).render_as_string(hide_password=False)
    try:
        upgrade(url)
        yield url
    finally:
        with admin_engine.connect() as conn:
            conn.execute(text(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)'))
        admin_engine.dispose()


def libpq_url(url: str) -> str:
    """`url` without SQLAlchemy's driver name, for psycopg.connect()."""
    return url.replace("postgresql+psycopg://", "postgresql://", 1)


def cpu_seconds(pids: list[int]) -> dict[int, float]:
    """utime + stime of each of these processes so far, from /proc (Linux); processes
    that are gone are left out."""
    seconds = {}
    for pid in pids:
        try:
            fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        seconds[pid] = (int(fields[11]) + int(fields[12])) / TICKS
    return seconds


def cpu_used(before: dict[int, float], after: dict[int, float]) -> float:
    """CPU seconds used between two readings by processes alive at the second (a
    process started in between counts from zero)."""
    return sum(t - before.get(pid, 0.0) for pid, t in after.items())


def process_tree(pid: int) -> list[int]:
    """`pid` and every descendant of it alive now (from /proc/<pid>/task/*/children)."""
    found, pending = [], [pid]
    while pending:
        current = pending.pop()
        found.append(current)
        for task in Path(f"/proc/{current}/task").glob("*"):
            with contextlib.suppress(OSError):
                pending.extend(int(c) for c in (task / "children").read_text().split())
    return found


def rss_bytes(pid: int) -> int:
    """Resident set size of `pid` in bytes (VmRSS of /proc/<pid>/status); 0 if gone."""
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) * 1024
    except OSError:
        pass
    return 0


def postgres_pids() -> list[int]:
    """Every process named postgres on this machine (the server and its backends)."""
    pids = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                if (entry / "comm").read_text().strip() == "postgres":
                    pids.append(int(entry.name))
            except OSError:
                continue
    return pids


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def percentile(values: list[float], q: float) -> float:
    """The `q`-quantile (0..1) of `values` by the nearest-rank method; nan when empty."""
    if not values:
        return float("nan")
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, max(0, int(q * len(ordered) + 0.5) - 1))]


def spread(values: list[float]) -> str:
    """'median (min-max)' of repeated figures, for a machine whose speed drifts."""

    def shown(v: float) -> str:
        return f"{v:,.2f}" if abs(v) < 10 else f"{v:,.0f}"

    if len(values) == 1:
        return shown(values[0])
    return f"{shown(statistics.median(values))} ({shown(min(values))}-{shown(max(values))})"
