"""`reminders dev`: the whole system in one process, on the embedded default."""

from __future__ import annotations

import logging
import os
import threading
from pathlib import Path

import uvicorn
from rich.console import Console
from rich.rule import Rule

import coordinator.main as coordinator_main
import coordinator.maintenance.main as maintenance_main
import outbox_sweeper.main as sweeper_main
import sender.main as sender_main
from reminder_api.app import create_app
from reminder_api.serving import StopEventServer
from reminder_core.db.embedded import embedded_path_problem
from reminder_core.db.session import make_engine
from reminder_core.errors import configuration_errors
from reminder_core.gc_policy import apply_gc_policy
from reminder_core.listening import bind_problem
from reminder_core.logging import configure_logging
from reminder_core.metrics_server import serve_worker_metrics
from reminder_core.paths import unusable_directory
from reminder_core.profiles import ensure_profile
from reminder_core.runtime import hard_exit, open_runtime, start_registry
from reminder_core.settings import Settings
from reminder_core.tokens import mint_token
from reminder_core.worker.loop import Heartbeat, Service, join_loops, start_loops
from reminder_core.worker.signals import install_stop_handlers

log = logging.getLogger(__name__)

DEMO_USER = "demo"
DEMO_EMAIL = "demo@example.com"


def local_zone_name() -> str:
    """The machine's IANA zone (TZ, or the /etc/localtime link), else "UTC"."""
    tz = os.environ.get("TZ", "").lstrip(":")
    if tz and "/" in tz and not tz.startswith("/"):
        return tz
    try:
        target = os.path.realpath("/etc/localtime")
    except OSError:
        return "UTC"
    marker = "zoneinfo/"
    return target.split(marker, 1)[1] if marker in target else "UTC"


def banner(base_url: str, token: str, mail_dir: Path, zone: str) -> str:
    when = "$(date -d '+1 minute' +%Y-%m-%dT%H:%M:%S)"
    body = (
        '{"title": "Stretch your legs", "start_local": "\'"' + when + '"\'", '
        f'"timezone": "{zone}"}}'
    )
    curl = (
        f"curl -sS -X POST {base_url}/v1/reminders \\\n"
        f"  -H 'Authorization: Bearer {token}' \\\n"
        "  -H 'Content-Type: application/json' \\\n"
        f"  -d '{body}'"
    )
    return (
        f"API:      {base_url}   (OpenAPI: {base_url}/docs)\n"
        f"Console:  {base_url}/console   (sign in with the token below)\n"
        f"User:     {DEMO_USER} <{DEMO_EMAIL}>, timezone {zone}\n"
        f"Token:    {token}\n"
        "Operator: .venv/bin/reminders token --user ops --admin   (the console's Operations"
        " page, /v1/admin)\n"
        f"Emails:   {mail_dir}/*.eml\n\n"
        f"Create a reminder due in a minute:\n\n{curl}\n\n"
        "Ctrl-C stops everything."
    )


def run_dev(
    host: str, port: int, settings: Settings | None = None, *, stop: threading.Event | None = None
) -> int:
    """Start the embedded database (if DATABASE_URL is unset), migrate, and run the API
    and every workload in this process until Ctrl-C / SIGTERM.

    Args:
        stop: the event the stop handlers set (`install_stop_handlers`), when the caller
            installed them already (the CLI does, before importing this module); None:
            installed here, before anything is written.

    Returns:
        The exit status: 0 after a clean stop (a stop during startup included), 1 when the
        API or the metrics port cannot listen, 2 for a STATE_DIR or MAIL_DIR it refuses.

    Side effects: state under STATE_DIR (default ./.reminders): pgdata/, jwt_secret,
    profiles.json (with the demo user), mail/.
    """
    if stop is None:
        stop = threading.Event()
        install_stop_handlers(stop)
    settings = settings or Settings()
    # Human-readable logs on a laptop, unless LOG_FORMAT asks for something else.
    explicit = "log_format" in settings.model_fields_set
    configure_logging(settings.log_level, settings.log_format if explicit else "console")
    if stop.is_set():  # while the modules loaded: nothing written yet
        log.info("reminders dev stopped during startup")
        return 0
    if problem := bind_problem(host, port):
        log.error("%s:%d %s", host, port, problem)
        return 1
    # Before anything is written, and before resolve() follows the links: state or
    # emails written through a dangling link land wherever it points (a volume not
    # mounted, say) and vanish from view when that appears (mkdir's "File exists"
    # named neither the link nor its target).
    for variable, path in (
        ("STATE_DIR", settings.state_dir),
        ("MAIL_DIR", settings.effective_mail_dir),
    ):
        if unusable := unusable_directory(path.absolute()):
            log.error("%s %s cannot be used: %s", variable, path, unusable)
            return 2
    if not settings.database_url and (problem := embedded_path_problem(settings.state_dir)):
        log.error(
            "STATE_DIR %s cannot hold the embedded PostgreSQL: %s", settings.state_dir, problem
        )
        return 2
    settings.state_dir = settings.state_dir.resolve()
    settings.jwt_key(create=True)
    if not settings.public_base_url:  # the emails' snooze and stop links point here
        shown = f"[{host}]" if ":" in host else host
        settings.public_base_url = f"http://{'127.0.0.1' if host == '0.0.0.0' else shown}:{port}"
    zone = local_zone_name()
    ensure_profile(settings.effective_profiles_file, DEMO_USER, email=DEMO_EMAIL, timezone=zone)
    settings.effective_mail_dir.mkdir(parents=True, exist_ok=True)

    # The handlers came first: a SIGTERM while the database starts or migrates must not
    # kill the process past pgserver's exit hook (that would leave the embedded
    # PostgreSQL running). They stay ours while uvicorn runs (StopEventServer).
    if stop.is_set():
        log.info("reminders dev stopped during startup")
        return 0
    with configuration_errors():
        rt = open_runtime(
            settings,
            application_name="reminders-dev",
            migrate=True,
            pool_size=10,
            check_queue=True,
        )
        if stop.is_set():
            rt.close()
            log.info("reminders dev stopped during startup")
            return 0
        loops: list[tuple[Service, float]] = [
            (coordinator_main.build(rt), settings.coordinator_poll_interval_s),
            (sweeper_main.build(rt), settings.sweeper_poll_interval_s),
            (sender_main.build(rt, stop), settings.sender_poll_interval_s),
            (maintenance_main.build(rt), settings.maintenance_poll_interval_s),
        ]
        # The API's own pool, its statements bounded by API_STATEMENT_TIMEOUT_S as in
        # `reminders api`; the workers' statements (claims, retention) are not.
        api_engine = make_engine(
            rt.database_url,
            pool_size=settings.db_pool_size,
            application_name="reminders-dev-api",
            pool_timeout_s=settings.db_pool_timeout_s,
            statement_timeout_s=settings.api_statement_timeout_s,
        )
        app = create_app(settings, api_engine, rt.profiles)
    apply_gc_policy(settings.gc_gen0_threshold)  # set up: the rest is per request or tick
    heartbeats: dict[str, Heartbeat] = {}
    threads = start_loops(loops, stop, heartbeats)
    registry = start_registry(rt.engine, heartbeats, settings)
    # One process, one registry: the API's /metrics shows every workload's metrics too;
    # METRICS_PORT adds the workers' port (with /healthz), served once.
    try:
        serve_worker_metrics(settings, threads, heartbeats)
    except OSError:  # logged
        stop.set()
        join_loops(threads, settings.shutdown_grace_s)
        if registry is not None:
            registry.close()
        api_engine.dispose()
        rt.close()
        return 1
    base_url = f"http://{'127.0.0.1' if host in ('0.0.0.0', '::') else host}:{port}"
    token = mint_token(settings, DEMO_USER)
    console = Console(stderr=False, highlight=False)
    console.print(Rule("reminders dev"))
    # soft_wrap: the token and the curl command must stay copyable, never cut.
    console.print(
        banner(base_url, token, settings.effective_mail_dir, zone), soft_wrap=True, markup=False
    )
    console.print(Rule())
    config = uvicorn.Config(
        app,
        host=host,
        port=port,
        log_level=settings.log_level.lower(),
        log_config=None,  # uvicorn's records go to our handler (reminder_core.logging)
        timeout_graceful_shutdown=int(settings.shutdown_grace_s),
    )
    # The signals stay ours while uvicorn serves: the first one stops it (and a stop
    # asked before it started, too), a second one is a hard stop (StopEventServer).
    server = StopEventServer(config, stop)
    status = 0
    try:
        server.run()
        if not server.started:
            status = 1
    finally:
        stop.set()
        stuck = join_loops(threads, settings.shutdown_grace_s)
        if registry is not None:
            registry.close()
        if stuck:
            log.warning("hard stop; still running: %s", ", ".join(stuck))
            hard_exit(1)  # a provider call under way must not keep the process alive
        api_engine.dispose()
        rt.close()
        log.info("reminders dev stopped")
    return status


__all__ = ["run_dev"]
