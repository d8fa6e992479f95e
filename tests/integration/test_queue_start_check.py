"""A wrong but well-formed QUEUE_URL (a new-user trial: `QUEUE_URL=sqs://nonexistent
reminders coordinator` logged "running", and when a reminder came due "publishing ...
failed" while /healthz said consecutive_failures 0 and reminders_tick_failures_total did
not move).

- At start, every workload that uses the queue asks it once whether it exists: a queue
  SQS says does not exist is a configuration error, one `error:` line naming QUEUE_URL
  and `reminders queue create`, exit status 2 (docs/operations.md, "Exit status"). A queue server
  that cannot be asked is an outage: the workload starts anyway.
- A failed fast-path publish counts as a failed tick: reminders_tick_failures_total
  moves, and /readyz answers 503 after NOT_READY_AFTER_FAILURES of them in a row, while
  /healthz (liveness) stays 200, since restarting the pod cannot create the queue.

Against a local moto server (AWS's error codes for a missing queue: SQS API Reference,
GetQueueUrl and GetQueueAttributes, "QueueDoesNotExist").
"""

from __future__ import annotations

import logging
import threading
import uuid
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import boto3
import httpx
import pytest
from prometheus_client import REGISTRY
from sqlalchemy import Engine, text

from coordinator.service import Coordinator
from reminder_core.errors import ConfigurationError, InfrastructureError, QueueNotFound
from reminder_core.metrics_server import NOT_READY_AFTER_FAILURES, serve_worker_metrics
from reminder_core.queue import PostgresQueue
from reminder_core.queue.sqs import SqsQueue, ensure_queues, sqs_client, sqs_target
from reminder_core.runtime import check_queue_at_start
from reminder_core.settings import Settings
from reminder_core.worker.loop import Heartbeat, join_loops, start_loops
from tests.e2e.test_cli_errors import run
from tests.integration.helpers import insert_due_reminders
from tests.support.moto import CREDENTIALS, REGION
from tests.support.workloads import free_port, wait_until

pytestmark = pytest.mark.timeout(120)

AWS_ENV = {
    "AWS_ACCESS_KEY_ID": CREDENTIALS["aws_access_key_id"],
    "AWS_SECRET_ACCESS_KEY": CREDENTIALS["aws_secret_access_key"],
    "AWS_REGION": REGION,
}


@pytest.fixture
def client(moto_endpoint: str) -> Any:
    return boto3.client("sqs", endpoint_url=moto_endpoint, region_name=REGION, **CREDENTIALS)


@pytest.fixture
def aws_env(monkeypatch: pytest.MonkeyPatch) -> None:
    for name, value in AWS_ENV.items():
        monkeypatch.setenv(name, value)


def missing_queue(moto_endpoint: str) -> SqsQueue:
    """The trial's queue: a name no queue has, at a real SQS endpoint."""
    target = sqs_target(f"sqs://nonexistent-{uuid.uuid4().hex[:8]}", endpoint_url=moto_endpoint)
    assert target is not None
    return SqsQueue(sqs_client(target, wait_time_s=0), target.queue, wait_time_s=0)


# --- the check ---------------------------------------------------------------------------


@pytest.mark.usefixtures("aws_env")
def test_a_queue_that_does_not_exist_is_found_missing(moto_endpoint: str, client: Any) -> None:
    with pytest.raises(QueueNotFound):
        missing_queue(moto_endpoint).check()
    # The same by URL, as an AWS queue URL names it.
    url = f"{moto_endpoint}/123456789012/nonexistent-{uuid.uuid4().hex[:8]}"
    with pytest.raises(QueueNotFound):
        SqsQueue(client, url, wait_time_s=0).check()


def test_a_queue_made_by_queue_create_passes(client: Any) -> None:
    queue_url, dlq_url = ensure_queues(
        client, f"ok-{uuid.uuid4().hex[:8]}", visibility_timeout_s=30, max_receive_count=3
    )
    try:
        SqsQueue(client, queue_url, wait_time_s=0).check()
    finally:
        for url in (queue_url, dlq_url):
            client.delete_queue(QueueUrl=url)


@pytest.mark.usefixtures("aws_env")
def test_at_start_a_missing_queue_is_a_configuration_error(moto_endpoint: str) -> None:
    settings = Settings(queue_url="sqs://nonexistent", sqs_endpoint_url=moto_endpoint)
    with pytest.raises(ConfigurationError) as raised:
        check_queue_at_start(missing_queue(moto_endpoint), settings)
    message = str(raised.value)
    assert "QUEUE_URL sqs://nonexistent" in message
    assert "reminders queue create" in message
    assert "\n" not in message


@pytest.mark.usefixtures("aws_env")
def test_at_start_an_unreachable_queue_server_is_not_fatal(
    caplog: pytest.LogCaptureFixture,
) -> None:
    endpoint = f"http://127.0.0.1:{free_port()}"  # nothing listens: connection refused
    target = sqs_target("sqs://reminders", endpoint_url=endpoint)
    assert target is not None
    queue = SqsQueue(sqs_client(target, wait_time_s=0), target.queue, wait_time_s=0)
    with pytest.raises(InfrastructureError):
        queue.check()
    settings = Settings(queue_url="sqs://reminders", sqs_endpoint_url=endpoint)
    with caplog.at_level(logging.WARNING, logger="reminder_core.runtime"):
        check_queue_at_start(queue, settings)  # logged, not raised
    assert "starting anyway" in caplog.text


def test_the_postgresql_queue_needs_no_check(db: Engine) -> None:
    PostgresQueue(db, name="any-name", max_receive_count=5).check()


# --- the workloads, as processes ------------------------------------------------------------


@pytest.mark.parametrize("workload", ["coordinator", "sweeper", "sender", "maintenance"])
def test_a_workload_started_on_a_missing_queue_exits_2_with_one_line(
    database_url: str, moto_endpoint: str, tmp_path: Path, workload: str
) -> None:
    env = {
        "DATABASE_URL": database_url,
        "STATE_DIR": str(tmp_path),
        "QUEUE_URL": "sqs://nonexistent",
        "SQS_ENDPOINT_URL": moto_endpoint,
        **AWS_ENV,
    }
    result = run(["reminders", workload], env, tmp_path)
    # Log lines may come first (botocore notes where it found credentials, at INFO); the
    # error is one line, and the last.
    assert result.returncode == 2, result.stderr
    errors = [line for line in result.stderr.splitlines() if line.startswith("error:")]
    assert errors == result.stderr.strip().splitlines()[-1:], result.stderr
    assert "QUEUE_URL sqs://nonexistent" in errors[0]
    assert "reminders queue create" in errors[0]
    assert "Traceback" not in result.stderr


# --- a failing fast path shows -----------------------------------------------------------------


def sample(name: str, **labels: str) -> float:
    return REGISTRY.get_sample_value(name, labels) or 0.0


@pytest.mark.usefixtures("aws_env")
def test_a_coordinator_that_cannot_publish_turns_not_ready_but_stays_alive(
    db: Engine, moto_endpoint: str
) -> None:
    # The trial's coordinator, started without the check: reminders come due, every
    # fast-path publish fails (the queue does not exist), the claims wait in the outbox.
    # Enough that the claims (one a tick, ticks back to back) outlast the test: a tick
    # that claims nothing has nothing to publish, and succeeds.
    insert_due_reminders(db, 1000, next_run_utc=datetime.now(UTC) - timedelta(minutes=1))
    coordinator = Coordinator(
        db, missing_queue(moto_endpoint), lookahead_s=0, batch_size=1, worker_id="c1"
    )
    failures_before = sample("reminders_tick_failures_total", workload="coordinator")
    settings = Settings(
        database_url="postgresql://unused",
        metrics_host="127.0.0.1",
        metrics_port=free_port(),
        liveness_stale_s=60,
    )
    stop = threading.Event()
    beats: dict[str, Heartbeat] = {}
    threads: list[threading.Thread] = []
    server = serve_worker_metrics(settings, threads, beats)
    assert server is not None
    threads.extend(start_loops([(coordinator, 0.05)], stop, beats))
    base = f"http://127.0.0.1:{server.port}"
    try:
        wait_until(
            lambda: httpx.get(f"{base}/readyz", timeout=5).status_code == 503,
            timeout=30,
            what="/readyz to answer 503",
        )
        ready = httpx.get(f"{base}/readyz", timeout=5).json()
        live = httpx.get(f"{base}/healthz", timeout=5)
    finally:
        stop.set()
        assert join_loops(threads, 10) == []
        server.close()
    # One snapshot: the loop is alive but not ready; liveness, asked right after, is fine.
    loop = ready["loops"]["coordinator"]
    assert (loop["alive"], loop["ready"]) == (True, False), ready
    assert loop["consecutive_failures"] >= NOT_READY_AFTER_FAILURES, ready
    assert live.status_code == 200, live.text  # no restart: it cannot create the queue
    failed = sample("reminders_tick_failures_total", workload="coordinator") - failures_before
    assert failed >= NOT_READY_AFTER_FAILURES
    with db.connect() as conn:
        unpublished = conn.execute(
            text("SELECT count(*) FROM outbox WHERE published_at IS NULL")
        ).scalar_one()
    assert unpublished >= NOT_READY_AFTER_FAILURES  # claimed, left to the sweeper
