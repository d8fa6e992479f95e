"""The workers' HTTP side port: Prometheus `/metrics`, liveness `/healthz` and readiness
`/readyz`.

Liveness asks "is this process stuck?": every loop thread runs and starts or finishes
ticks. A tick that fails still beats, so a dependency outage (database, queue, profile
service) never fails it: restarting pods cannot bring a dependency back, and restarting
every pod in a loop would only add load. Readiness asks "is this process doing its work?":
no loop has failed its last NOT_READY_AFTER_FAILURES ticks in a row (a dependency down, a
wrong QUEUE_URL): Kubernetes shows the pod not ready and a rollout of a misconfigured
version stops, while the pod keeps running and retrying.

The API serves `/metrics` on its own port (reminder_api/app.py); the coordinator, sweeper,
sender and maintenance workloads serve this on METRICS_PORT (0: off). `reminders dev`
runs every workload in one process and serves it once.
"""

from __future__ import annotations

import json
import logging
import socket
import threading
from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass
from datetime import datetime
from socketserver import ThreadingMixIn
from typing import TYPE_CHECKING, Any
from wsgiref.simple_server import WSGIRequestHandler, WSGIServer, make_server

from prometheus_client import REGISTRY, CollectorRegistry, make_wsgi_app
from prometheus_client.metrics_core import Metric
from prometheus_client.registry import Collector

from reminder_core.clock import utcnow
from reminder_core.settings import Settings
from reminder_core.worker.loop import Heartbeat

if TYPE_CHECKING:
    from _typeshed.wsgi import StartResponse, WSGIEnvironment

log = logging.getLogger(__name__)


#: Consecutive failed ticks of one loop after which `/readyz` answers 503.
NOT_READY_AFTER_FAILURES = 3


@dataclass(frozen=True, slots=True)
class Health:
    """The answer of `/healthz` (`ok`: alive) and `/readyz` (`ok` and `ready`: doing its
    work) and, per loop, what was checked."""

    ok: bool
    loops: dict[str, dict[str, Any]]
    ready: bool = True


def loop_health(
    threads: Iterable[threading.Thread],
    heartbeats: Mapping[str, Heartbeat],
    *,
    now: datetime,
    since: datetime,
    stale_s: float,
    not_ready_after: int = NOT_READY_AFTER_FAILURES,
) -> Health:
    """Whether every worker loop of this process is alive, and doing its work.

    A loop is alive when its thread runs and it started or finished a tick within the
    last `stale_s` seconds (before its first tick: `since`, when the loops started, counts
    instead). A tick that runs longer than `stale_s` makes the loop unhealthy: `stale_s`
    must exceed the longest legitimate tick (a sender batch: about DELIVERY_BUDGET_S).
    Failed ticks beat too: liveness does not see them. A loop is ready when it is alive
    and has not failed its last `not_ready_after` ticks in a row (a tick that raised, or
    whose result says `failed`; see the module docstring).

    Args:
        threads: the loop threads, named after their service (`start_loops`).
        heartbeats: service name -> its loop's heartbeat (`start_loops(heartbeats=...)`).
        now, since: aware UTC.
        stale_s: seconds.
        not_ready_after: consecutive failed ticks, >= 1.

    Returns:
        `Health`; `loops[name]` = {"alive": bool, "last_beat_age_s": float,
        "consecutive_failures": int, "ready": bool}.
    """
    loops: dict[str, dict[str, Any]] = {}
    ok = ready = True
    for thread in threads:
        hb = heartbeats.get(thread.name, Heartbeat())
        beats = [t for t in (hb.tick_started_at, hb.last_tick_at) if t is not None]
        age = (now - max(beats, default=since)).total_seconds()
        alive = thread.is_alive() and age <= stale_s
        loop_ready = alive and hb.consecutive_failures < not_ready_after
        ok = ok and alive
        ready = ready and loop_ready
        loops[thread.name] = {
            "alive": thread.is_alive(),
            "last_beat_age_s": round(age, 3),
            "consecutive_failures": hb.consecutive_failures,
            "ready": loop_ready,
        }
    return Health(ok=ok, loops=loops, ready=ready)


class _Server(ThreadingMixIn, WSGIServer):
    daemon_threads = True


class _Server6(_Server):
    address_family = socket.AF_INET6


class _QuietHandler(WSGIRequestHandler):
    def log_message(self, format: str, *args: Any) -> None:
        """No access log line per scrape."""


class MetricsServer:
    """`/metrics` (Prometheus text format, the given registry), `/healthz` and `/readyz`
    over HTTP, served by a daemon thread.

    Args:
        host: interface to listen on ("0.0.0.0" in a pod; "::" for IPv6).
        port: TCP port; 0 picks a free one (tests; `port` tells which). The workloads
            never start a server for METRICS_PORT=0.
        health: called per `/healthz` or `/readyz` request; `/healthz` answers 200 with
            its JSON when `ok`, `/readyz` when `ok` and `ready`; else 503. None: both
            always answer 200.
        registry: what `/metrics` exports.

    Raises:
        OSError: the port cannot be bound (e.g. already in use).
    """

    def __init__(
        self,
        host: str,
        port: int,
        *,
        health: Callable[[], Health] | None = None,
        registry: CollectorRegistry = REGISTRY,
    ) -> None:
        metrics_app = make_wsgi_app(registry)

        def app(environ: WSGIEnvironment, start_response: StartResponse) -> Iterable[bytes]:
            path = environ.get("PATH_INFO")
            if path in ("/healthz", "/readyz"):
                result = health() if health is not None else Health(ok=True, loops={})
                if path == "/healthz":
                    good, word = result.ok, "ok" if result.ok else "unhealthy"
                else:
                    good = result.ok and result.ready
                    word = "ready" if good else "not ready"
                body = json.dumps({"status": word, "loops": result.loops}).encode()
                status = "200 OK" if good else "503 Service Unavailable"
                start_response(status, [("Content-Type", "application/json")])
                return [body]
            answer: Iterable[bytes] = metrics_app(environ, start_response)
            return answer

        server_class = _Server6 if ":" in host else _Server
        self._httpd = make_server(host, port, app, server_class, handler_class=_QuietHandler)
        self.port: int = self._httpd.server_port
        self._thread = threading.Thread(
            target=self._httpd.serve_forever, name="metrics-server", daemon=True
        )
        self._thread.start()

    def close(self) -> None:
        """Stop serving and release the port."""
        self._httpd.shutdown()
        self._httpd.server_close()


class CellLabelled(Collector):
    """Every series of `registry` with a `cell` label added (docs/design.md, "Cells"): a
    worker of one cell exports its metrics as that cell's, so sums, alerts and KEDA
    queries can be taken per cell without relabelling at scrape time."""

    def __init__(self, registry: CollectorRegistry, cell: str) -> None:
        self._registry = registry
        self._cell = cell

    def collect(self) -> Iterator[Metric]:
        for family in self._registry.collect():
            labelled = Metric(family.name, family.documentation, family.type, family.unit)
            labelled.samples = [
                sample._replace(labels={**sample.labels, "cell": self._cell})
                for sample in family.samples
            ]
            yield labelled


def cell_registry(cell: str, registry: CollectorRegistry = REGISTRY) -> CollectorRegistry:
    """A registry that exports `registry`'s series with `cell="<cell>"` added."""
    labelled = CollectorRegistry(auto_describe=False)
    labelled.register(CellLabelled(registry, cell))
    return labelled


def serve_worker_metrics(
    settings: Settings,
    threads: list[threading.Thread],
    heartbeats: Mapping[str, Heartbeat],
    *,
    clock: Callable[[], datetime] = utcnow,
) -> MetricsServer | None:
    """Serve `/metrics`, `/healthz` and `/readyz` for the worker loops of this process on
    METRICS_HOST:METRICS_PORT until the process exits, or nothing when METRICS_PORT is 0.
    A worker of one cell (CELL set) labels every series `cell` (`cell_registry`).

    Args:
        threads, heartbeats: from `start_loops(..., heartbeats=...)` (the list may still
            be filled after this call).
        clock: aware UTC; `/healthz` judges with LIVENESS_STALE_S (see `loop_health`).

    Raises:
        OSError: the port cannot be bound (logged here; the caller should exit with
            status 1).
    """
    if not settings.metrics_port:
        return None
    since = clock()
    stale_s = settings.liveness_stale_s
    try:
        return MetricsServer(
            settings.metrics_host,
            settings.metrics_port,
            health=lambda: loop_health(
                threads, heartbeats, now=clock(), since=since, stale_s=stale_s
            ),
            registry=cell_registry(settings.cell) if settings.cell else REGISTRY,
        )
    except OSError as exc:
        log.error("cannot serve metrics on port %d: %s", settings.metrics_port, exc)
        raise
