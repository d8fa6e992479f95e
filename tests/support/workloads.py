"""Real processes for end-to-end tests: the workloads (`python -m reminders <workload>`),
the fake email provider (`python -m tests.support.fake_provider`) and a PostgreSQL server
that a test owns and may stop and start.

Everything here starts operating-system processes in their own session (process group),
writes their output to a log file per process, and kills them on `close()`.
"""

from __future__ import annotations

import os
import random
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import warnings
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import httpx
from sqlalchemy import Engine, create_engine, text
from sqlalchemy.engine import make_url
from sqlalchemy.exc import OperationalError

from reminder_core.settings import Settings

HOST = "127.0.0.1"
REPO_ROOT = Path(__file__).resolve().parents[2]


def free_port() -> int:
    """A TCP port on 127.0.0.1 that nothing listens on right now."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind((HOST, 0))
        return int(s.getsockname()[1])


def child_env(values: Mapping[str, str]) -> dict[str, str]:
    """This environment minus every setting of the product, plus `values`.

    Nothing inherited (a developer's DATABASE_URL, STATE_DIR, ...) can point a child at
    another database or state directory.
    """
    settings_vars = {name.upper() for name in Settings.model_fields}
    env = {k: v for k, v in os.environ.items() if k.upper() not in settings_vars}
    env["PYTHONUNBUFFERED"] = "1"
    env["NO_COLOR"] = "1"
    env.update(values)
    return env


def api_env(
    database_url: str, tmp_path: Path, jwt_secret: str, extra: Mapping[str, str] | None = None
) -> dict[str, str]:
    """The environment of an API process on `database_url` (`child_env`): JWT_SECRET, a
    profiles file with one user, `erin`, and state in `tmp_path`; plus `extra`."""
    profiles = tmp_path / "profiles.json"
    profiles.write_text('{"erin": {"email": "erin@example.com"}}')
    return child_env(
        {
            "DATABASE_URL": database_url,
            "JWT_SECRET": jwt_secret,
            "PROFILES_FILE": str(profiles),
            "STATE_DIR": str(tmp_path / "state"),
            **(extra or {}),
        }
    )


def api_ready(base_url: str) -> bool:
    """True when the API at `base_url` answers /readyz 200."""
    try:
        return httpx.get(f"{base_url}/readyz", timeout=2).status_code == 200
    except httpx.HTTPError:
        return False


def wait_until(
    predicate: Callable[[], bool], timeout: float, what: str, interval: float = 0.2
) -> float:
    """Poll `predicate` until it is true; return the seconds it took.

    Raises:
        AssertionError: still false after `timeout` seconds.
    """
    start = time.monotonic()
    while True:
        if predicate():
            return time.monotonic() - start
        if time.monotonic() - start > timeout:
            raise AssertionError(f"timed out after {timeout:.0f}s waiting for {what}")
        time.sleep(interval)


# --------------------------------------------------------------------------- workloads


@dataclass
class Running:
    name: str
    workload: str
    proc: subprocess.Popen[bytes]
    started: float
    log_offset: int  # where this start's output begins in the log file
    working_since: float | None = None  # when its loop was first seen running


class Workloads:
    """`python -m reminders <workload>` processes under names ("sender-1", ...).

    Args:
        env: environment of every process (see `child_env`).
        logdir: one `<name>.log` per name, appended to across restarts.
    """

    def __init__(self, env: dict[str, str], logdir: Path) -> None:
        self.env = env
        self.logdir = logdir
        self.running: dict[str, Running] = {}
        self.starts: dict[str, int] = {}
        self.killed_at: dict[str, list[float]] = {}  # name -> time.time() of each kill -9

    def start(self, name: str, workload: str | None = None, *args: str) -> Running:
        """Start `workload` (default: `name` without a "-N" suffix) under `name`."""
        workload = workload or name.rsplit("-", 1)[0]
        log = (self.logdir / f"{name}.log").open("ab")
        log.write(f"--- start {workload} {' '.join(args)} at {time.time():.3f}\n".encode())
        log.flush()
        offset = log.tell()
        proc = subprocess.Popen(
            [sys.executable, "-m", "reminders", workload, *args],
            env=self.env, cwd=REPO_ROOT, stdout=log, stderr=subprocess.STDOUT,
            start_new_session=True,
        )  # fmt: skip
        log.close()
        run = Running(name, workload, proc, time.monotonic(), offset)
        self.running[name] = run
        self.starts[name] = self.starts.get(name, 0) + 1
        return run

    def kill(self, name: str) -> None:
        """kill -9 the process (its whole process group) and reap it."""
        run = self.running.pop(name)
        self.killed_at.setdefault(name, []).append(time.time())
        _killpg(run.proc)

    def restart(self, name: str) -> Running:
        """kill -9, then start the same workload again under the same name."""
        workload = self.running[name].workload
        self.kill(name)
        return self.start(name, workload)

    def terminate(self, name: str, timeout: float = 60) -> tuple[int, float]:
        """SIGTERM the process; return (exit status, seconds until it exited)."""
        run = self.running.pop(name)
        start = time.monotonic()
        run.proc.send_signal(signal.SIGTERM)
        try:
            status = run.proc.wait(timeout)
        except subprocess.TimeoutExpired:
            _killpg(run.proc)
            raise
        return status, time.monotonic() - start

    def uptime(self, name: str) -> float:
        return time.monotonic() - self.running[name].started

    def working_for(self, name: str) -> float:
        """Seconds since the process was first seen in its loop (it logs "running ...;
        SIGTERM or Ctrl-C to stop" once connected and looping); 0 while still starting."""
        run = self.running[name]
        if run.working_since is None:
            with (self.logdir / f"{name}.log").open("rb") as log:
                log.seek(run.log_offset)
                if b"SIGTERM or Ctrl-C to stop" not in log.read():
                    return 0.0
            run.working_since = time.monotonic()
        return time.monotonic() - run.working_since

    def dead(self) -> dict[str, int]:
        """Names of processes that exited on their own, with their exit status."""
        return {
            name: run.proc.returncode
            for name, run in self.running.items()
            if run.proc.poll() is not None
        }

    def log_tail(self, name: str, chars: int = 3000) -> str:
        path = self.logdir / f"{name}.log"
        return path.read_text(errors="replace")[-chars:] if path.exists() else ""

    def grep_logs(self, needle: str) -> int:
        """Lines containing `needle` in every log of this run."""
        return sum(
            line.count(needle)
            for p in self.logdir.glob("*.log")
            for line in p.open(errors="replace")
        )

    def close(self) -> None:
        """Kill every process still running (teardown; never raises)."""
        for name in list(self.running):
            try:
                self.kill(name)
            except Exception:  # pragma: no cover - best effort in teardown
                pass


def _killpg(proc: subprocess.Popen[bytes]) -> None:
    if proc.poll() is None:
        try:
            os.killpg(proc.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
    proc.wait(30)


# --------------------------------------------------------------------------- provider


class FakeProviderProcess:
    """tests/support/fake_provider.py in its own process, on a free port."""

    def __init__(self, logdir: Path) -> None:
        self.port = free_port()
        self.url = f"http://{HOST}:{self.port}"
        log = (logdir / "fake_provider.log").open("ab")
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "tests.support.fake_provider", "--port", str(self.port)],
            cwd=REPO_ROOT, stdout=log, stderr=subprocess.STDOUT, start_new_session=True,
            env=child_env({}),
        )  # fmt: skip
        log.close()
        self.client = httpx.Client(base_url=self.url, timeout=30)
        wait_until(self._up, 30, "the fake provider")

    def _up(self) -> bool:
        if self.proc.poll() is not None:
            raise AssertionError(f"fake provider exited with {self.proc.returncode}")
        try:
            return self.client.get("/_stats").status_code == 200
        except httpx.HTTPError:
            return False

    def stats(self) -> dict[str, Any]:
        response = self.client.get("/_stats")
        response.raise_for_status()
        stats: dict[str, Any] = response.json()
        return stats

    def inject(self, *faults: dict[str, Any], always: dict[str, Any] | None = None) -> None:
        response = self.client.post("/_faults", json={"faults": list(faults), "always": always})
        response.raise_for_status()

    def set_dedupe(self, dedupe: bool) -> None:
        """POST /_mode: with False, every call is a new email with a new message id, as
        at SES or an SMTP server (calls with a key already accepted are still counted)."""
        self.client.post("/_mode", json={"dedupe": dedupe}).raise_for_status()

    def set_webhooks(
        self,
        url: str | None,
        secret: str = "",
        delay_s: float = 0.0,
        events: tuple[str, ...] = ("email.sent",),
    ) -> None:
        """POST /_webhooks: from now on, every message the fake accepts (a resent one
        too, and one whose client is already gone) gets one Svix-signed webhook per type
        of `events` POSTed to `url` `delay_s` after acceptance, failed POSTs tried again
        with backoff; url None turns them off. Counts: `stats()["webhooks"]`."""
        body = {"url": url, "secret": secret, "delay_s": delay_s, "events": list(events)}
        self.client.post("/_webhooks", json=body).raise_for_status()

    def webhooks_idle(self) -> bool:
        """No webhook is waiting for its time or for a retry, or being posted."""
        return int(self.stats()["webhooks"]["pending"]) == 0

    def close(self) -> None:
        self.client.close()
        _killpg(self.proc)


def provider_figures(stats: dict[str, Any]) -> dict[str, Any]:
    """Per-key counts from /_stats: accepted keys, calls per key, calls by status."""
    calls: dict[str, int] = {}
    by_status: dict[str, int] = {}
    for request in stats["requests"]:
        calls[request["key"]] = calls.get(request["key"], 0) + 1
        by_status[str(request["status"])] = by_status.get(str(request["status"]), 0) + 1
    return {
        "accepted_keys": {m["key"] for m in stats["messages"]},
        "calls": calls,
        "by_status": by_status,
    }


# --------------------------------------------------------------------------- databases


#: Advisory lock key under which test processes copy a template database: PostgreSQL
#: refuses a copy while another session is connected to the template, and the copies of
#: one run's workers would otherwise start at the same instant.
_TEMPLATE_LOCK = 0x7E3A1A7E


def database_url_named(admin_url: str, name: str) -> str:
    """The URL of database `name` on the server of `admin_url`."""
    return make_url(admin_url).set(database=name).render_as_string(hide_password=False)


@contextmanager
def fresh_database(
    admin_url: str, prefix: str, *, template: str | None = None
) -> Iterator[tuple[str, Engine]]:
    """A new database on the server of `admin_url` (empty, or a copy of `template`);
    dropped afterwards."""
    name = f"{prefix}_{random.getrandbits(32):08x}"
    admin = create_engine(admin_url, isolation_level="AUTOCOMMIT")
    with admin.connect() as conn:
        if template is None:
            conn.execute(text(f'CREATE DATABASE "{name}"'))
        else:
            conn.execute(text("SELECT pg_advisory_lock(:k)"), {"k": _TEMPLATE_LOCK})
            try:
                conn.execute(text(f'CREATE DATABASE "{name}" TEMPLATE "{template}"'))
            finally:
                conn.execute(text("SELECT pg_advisory_unlock(:k)"), {"k": _TEMPLATE_LOCK})
    url = database_url_named(admin_url, name)
    engine = create_engine(url, pool_pre_ping=True)
    try:
        yield url, engine
    finally:
        engine.dispose()
        drop_database(admin_url, name)
        admin.dispose()


def create_template(admin_url: str, prefix: str, prepare: Callable[[str], None]) -> str:
    """Create a database named `prefix_<random>` and run `prepare` on its URL (e.g.
    migrate it), for `fresh_database(..., template=...)` to copy; returns its name. The
    caller drops it (`drop_database`)."""
    name = f"{prefix}_{random.getrandbits(32):08x}"
    admin = create_engine(admin_url, isolation_level="AUTOCOMMIT")
    try:
        with admin.connect() as conn:
            conn.execute(text(f'CREATE DATABASE "{name}"'))
        try:
            prepare(database_url_named(admin_url, name))
        except BaseException:
            drop_database(admin_url, name)
            raise
    finally:
        admin.dispose()
    return name


def drop_database(admin_url: str, name: str) -> None:
    """DROP DATABASE `name` on the server of `admin_url` (if it exists), closing the
    sessions still connected to it."""
    admin = create_engine(admin_url, isolation_level="AUTOCOMMIT")
    try:
        with admin.connect() as conn:
            conn.execute(text(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)'))
    finally:
        admin.dispose()


def migrate(env: dict[str, str]) -> None:
    """`python -m reminders migrate` as a process; must exit 0."""
    done = subprocess.run(
        [sys.executable, "-m", "reminders", "migrate"],
        env=env, cwd=REPO_ROOT, capture_output=True, timeout=120,
    )  # fmt: skip
    assert done.returncode == 0, done.stdout.decode() + done.stderr.decode()


def insert_due(
    engine: Engine, user_id: str, count: int, *, first_due: datetime, spread_s: int
) -> dict[str, datetime]:
    """Insert `count` one-time reminders (zone UTC) due on whole seconds from `first_due`
    over `spread_s` seconds, in one statement; return {reminder id: next_run_utc}."""
    with engine.begin() as conn:
        rows = conn.execute(
            text(
                "INSERT INTO reminders (user_id, title, start_local, timezone, next_run_utc)"
                " SELECT :user_id, 'Chaos ' || g, (t AT TIME ZONE 'UTC'), 'UTC', t"
                " FROM generate_series(0, :count - 1) AS g,"
                " LATERAL (SELECT CAST(:first AS timestamptz)"
                "          + make_interval(secs => g % :spread) AS t) AS due"
                " RETURNING id, next_run_utc"
            ),
            {"user_id": user_id, "count": count, "first": first_due, "spread": max(spread_s, 1)},
        ).all()
    return {str(r.id): r.next_run_utc for r in rows}


def whole_second(seconds_from_now: float) -> datetime:
    """A UTC instant on a whole second, at least `seconds_from_now` from now."""
    now = datetime.now(UTC) + timedelta(seconds=seconds_from_now)
    return now.replace(microsecond=0) + timedelta(seconds=1)


def key_of(reminder_id: str, run_time_utc: datetime) -> str:
    """The provider idempotency key of an occurrence, as README and docs/design.md,
    "Exactly once per occurrence", give it: `<reminder_id>-<run_time_utc>` with the
    instant as YYYYMMDDTHHMMSSZ."""
    return f"{reminder_id}-{run_time_utc.astimezone(UTC):%Y%m%dT%H%M%SZ}"


@dataclass(frozen=True)
class Progress:
    """Where the occurrences of a run stand, read from the database."""

    reminders: dict[str, int]
    deliveries: dict[str, int]
    queue_live: int
    dead_letters: int
    outbox_unpublished: int
    messages_published: int

    def settled(self, expected: int) -> bool:
        """Every occurrence has one terminal delivery row, nothing is left claimed, in
        the queue or unpublished: the system is idle."""
        return (
            sum(self.deliveries.values()) == expected
            and "sending" not in self.deliveries
            and not {"pending", "claimed"} & set(self.reminders)
            and self.queue_live == 0
            and self.outbox_unpublished == 0
        )


def progress(engine: Engine) -> Progress:
    with engine.connect() as conn:
        reminders = dict(
            conn.execute(text("SELECT status, count(*) FROM reminders GROUP BY status")).all()
        )
        deliveries = dict(
            conn.execute(text("SELECT status, count(*) FROM delivery_log GROUP BY status")).all()
        )
        queue = conn.execute(
            text(
                "SELECT count(*) FILTER (WHERE NOT dead_lettered) AS live,"
                " count(*) FILTER (WHERE dead_lettered) AS dead FROM queue_messages"
            )
        ).one()
        unpublished = conn.execute(
            text("SELECT count(*) FROM outbox WHERE published_at IS NULL")
        ).scalar_one()
        published = conn.execute(
            text("SELECT CASE WHEN is_called THEN last_value ELSE 0 END FROM queue_messages_id_seq")
        ).scalar_one()
    return Progress(
        reminders=reminders,
        deliveries=deliveries,
        queue_live=queue.live,
        dead_letters=queue.dead,
        outbox_unpublished=unpublished,
        messages_published=published,
    )


def settled_or_none(engine: Engine, expected: int) -> Callable[[], bool]:
    """A wait_until predicate: the run is settled; a database error reads as "not yet"."""

    def check() -> bool:
        try:
            return progress(engine).settled(expected)
        except OperationalError:
            return False

    return check


def occurrence_rows(engine: Engine) -> dict[str, tuple[str, list[str]]]:
    """{reminder id: (reminder status, [delivery statuses])}."""
    with engine.connect() as conn:
        rows = conn.execute(
            text(
                "SELECT r.id, r.status,"
                " coalesce(array_agg(d.status) FILTER (WHERE d.id IS NOT NULL), '{}') AS ds"
                " FROM reminders r LEFT JOIN delivery_log d ON d.reminder_id = r.id"
                " GROUP BY r.id, r.status"
            )
        ).all()
    return {str(r.id): (r.status, list(r.ds)) for r in rows}


def waiting_on_lock(engine: Engine, application_name: str) -> bool:
    """True when a session of `application_name` on this database waits for a lock."""
    with engine.connect() as conn:
        return bool(
            conn.execute(
                text(
                    "SELECT count(*) FROM pg_stat_activity WHERE datname = current_database()"
                    " AND application_name = :app AND wait_event_type = 'Lock'"
                ),
                {"app": application_name},
            ).scalar_one()
        )


def connected_applications(engine: Engine) -> set[str]:
    """application_name of every session on this database."""
    with engine.connect() as conn:
        return set(
            conn.execute(
                text(
                    "SELECT DISTINCT application_name FROM pg_stat_activity"
                    " WHERE datname = current_database()"
                )
            ).scalars()
        )


# --------------------------------------------------------------------------- postgres


class OwnedPostgres:
    """A throwaway PostgreSQL server (pgserver's binaries) that a test starts and stops.

    It listens on 127.0.0.1:<free port> and on a Unix socket in its data directory, with
    trust authentication, so clients reconnect to the same URL after a restart. As root,
    PostgreSQL refuses to run, so it runs as the `pgserver` system user, exactly as
    pgserver itself does (`initdb`/`pg_ctl` with `user=`, parents made traversable).
    """

    def __init__(self) -> None:
        with warnings.catch_warnings():
            # platformdirs warns when XDG_RUNTIME_DIR is unset (containers, CI); harmless.
            warnings.simplefilter("ignore")
            import pgserver  # type: ignore[import-untyped]
            from pgserver._commands import POSTGRES_BIN_PATH  # type: ignore[import-untyped]

        self._pgserver = pgserver
        self.bin = POSTGRES_BIN_PATH
        self.base = Path(tempfile.mkdtemp(prefix="reminders-owned-pg-"))
        self.pgdata = self.base / "pgdata"
        self.pgdata.mkdir()
        self.port = free_port()
        self.user: str | None = None
        if os.geteuid() == 0:
            from pgserver.utils import ensure_prefix_permissions, ensure_user_exists

            self.user = "pgserver"
            entry = ensure_user_exists(self.user)
            ensure_prefix_permissions(self.pgdata)
            # And the binaries: a checkout in a private directory (`mktemp -d` is 0700)
            # holds the venv, and initdb run as that user got "Permission denied".
            ensure_prefix_permissions(Path(self.bin))
            os.chown(self.pgdata, entry.pw_uid, entry.pw_gid)
        self.log = self.pgdata / "server.log"
        self._pg(
            "initdb", ["--auth=trust", "--auth-local=trust", "--encoding=utf8", "-U", "postgres"]
        )

    @property
    def admin_url(self) -> str:
        return f"postgresql+psycopg://postgres@{HOST}:{self.port}/postgres"

    def _pg(self, exe: str, args: list[str], timeout: float = 60) -> None:
        command = getattr(self._pgserver, exe)
        command(args, pgdata=self.pgdata, user=self.user, timeout=timeout)

    def start(self) -> None:
        """pg_ctl start on the same port and socket directory; waits until it accepts."""
        self._pg(
            "pg_ctl",
            ["-w", "-t", "60", "-l", str(self.log),
             "-o", f"-h {HOST} -p {self.port} -k {self.pgdata}", "start"],
        )  # fmt: skip

    def stop(self, mode: str = "fast") -> None:
        """pg_ctl stop -m <mode>; waits until the server is down."""
        self._pg("pg_ctl", ["-w", "-t", "60", "-m", mode, "stop"])

    def close(self) -> None:
        """Stop at once and delete the data directory (teardown; never raises)."""
        try:
            if (self.pgdata / "postmaster.pid").exists():
                self.stop("immediate")
        except Exception:  # pragma: no cover - best effort in teardown
            pid_file = self.pgdata / "postmaster.pid"
            if pid_file.exists():
                try:
                    os.kill(int(pid_file.read_text().split()[0]), signal.SIGKILL)
                except (OSError, ValueError):
                    pass
        shutil.rmtree(self.base, ignore_errors=True)

    def server_log(self, chars: int = 3000) -> str:
        return self.log.read_text(errors="replace")[-chars:] if self.log.exists() else ""
