"""Issue 7, "How we will check it": scrape `/metrics` of a running system after deliveries
and find each named metric with plausible values.

`reminders dev` runs as a real process (every workload in one process, so the API's
`/metrics` and the workers' METRICS_PORT serve one registry); three reminders are created
over HTTP and delivered to the file sink; then both endpoints are scraped. Expected values
come from the definitions (docs/operations.md "Metrics, alerts and `reminders status`";
docs/design.md, "Metrics"): one
delivery_lag observation per sent occurrence, each within the 10 s of issue 2; one claim,
one fast-path publication, one provider call per reminder; the backlog gauges back to 0
once everything is sent.
"""

from __future__ import annotations

import secrets
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
from prometheus_client.parser import text_string_to_metric_families

from tests.e2e.test_dev import (
    HOST,
    DevProcess,
    create,
    dev_database_url,  # noqa: F401 (fixture)
    due_in,
    eml_path,
    free_port,
    reminders_command,
    running_dev,
    wait_ready,
)

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(180)]

SENDS = 3
WORKLOADS = ("coordinator", "outbox_sweeper", "sender", "maintenance")
DELIVERY_TIMEOUT_S = 10.0  # issue 2: an email within 10 s of its due time


class Samples(dict[tuple[str, frozenset[tuple[str, str]]], float]):
    """Samples of one scrape, by (name, labels)."""

    def get_value(self, name: str, **labels: str) -> float | None:
        return self.get((name, frozenset(labels.items())))


def scrape(url: str) -> Samples:
    resp = httpx.get(url, timeout=5, trust_env=False)
    assert resp.status_code == 200, resp.text
    samples = Samples()
    for family in text_string_to_metric_families(resp.text):
        for s in family.samples:
            samples[(s.name, frozenset(s.labels.items()))] = s.value
    return samples


@pytest.fixture
def dev_with_metrics(
    tmp_path: Path,
    dev_database_url: str | None,  # noqa: F811 (the fixture imported above)
) -> Iterator[tuple[DevProcess, int]]:
    """`reminders dev` with METRICS_PORT set and a 1 s maintenance tick."""
    metrics_port = free_port()
    extra = {
        "METRICS_PORT": str(metrics_port),
        "METRICS_HOST": HOST,
        "MAINTENANCE_POLL_INTERVAL_S": "1",
    }
    with running_dev(tmp_path, dev_database_url, extra) as dev:
        yield dev, metrics_port


def test_metrics_of_a_running_system_after_deliveries(
    dev_with_metrics: tuple[DevProcess, int],
) -> None:
    dev, metrics_port = dev_with_metrics
    client = httpx.Client(base_url=dev.base_url, timeout=10.0, trust_env=False)
    try:
        wait_ready(dev, client)
        token = subprocess.run(
            [*reminders_command(), "token", "--user", "demo"], cwd=dev.workdir, env=dev.env,
            capture_output=True, text=True, timeout=30, check=True,
        ).stdout.strip()  # fmt: skip
        client.headers["Authorization"] = f"Bearer {token}"

        due = due_in(2)
        created = [create(client, f"Metrics e2e {i} {secrets.token_hex(3)}", due)
                   for i in range(SENDS)]  # fmt: skip
        paths = [eml_path(dev.mail_dir, r["id"], due) for r in created]
        deadline = time.monotonic() + 2 + DELIVERY_TIMEOUT_S + 5
        while not all(p.exists() for p in paths):
            assert dev.proc.poll() is None, dev.output()
            assert time.monotonic() < deadline, f"not all delivered:\n{dev.output()}"
            time.sleep(0.1)
        sent_at = time.time()

        worker = f"http://{HOST}:{metrics_port}"
        # Wait for the senders to settle (the metric is counted after the delivery row is
        # written), for a maintenance tick after the last send, and for a tick of every
        # loop (each starts after a random part of its interval: the sweeper's is 5 s).
        deadline = time.monotonic() + 15
        while True:
            m = scrape(f"{worker}/metrics")
            updated = m.get_value("reminders_backlog_updated_timestamp_seconds") or 0
            settled = m.get_value("delivery_lag_seconds_count", held="false") == SENDS
            ticked = all(
                (m.get_value("reminders_tick_duration_seconds_count", workload=w) or 0) >= 1
                for w in WORKLOADS
            )
            if settled and ticked and updated > sent_at + 0.5:
                break
            assert time.monotonic() < deadline, "metrics did not settle"
            time.sleep(0.3)
        api = scrape(f"{dev.base_url}/metrics")
        health = httpx.get(f"{worker}/healthz", timeout=5, trust_env=False)
    finally:
        client.close()

    # Sender: one delivery_lag observation per sent occurrence, each within 10 s.
    assert m.get_value("delivery_lag_seconds_count", held="false") == SENDS
    lag_sum = m.get_value("delivery_lag_seconds_sum", held="false")
    assert lag_sum is not None
    assert 0 <= lag_sum <= SENDS * DELIVERY_TIMEOUT_S
    assert m.get_value("delivery_lag_seconds_bucket", le="10.0", held="false") == SENDS
    assert m.get_value("reminders_sends_total", provider="file", outcome="sent") == SENDS
    assert m.get_value("reminders_provider_requests_total", provider="file", result="ok") == SENDS
    assert m.get_value("reminders_provider_request_duration_seconds_count", provider="file") == (
        SENDS
    )
    # Coordinator: each one-time reminder claimed and published once, by the claim itself
    # (`reminders dev` runs the PostgreSQL queue in its own database).
    assert m.get_value("reminders_claims_total") == SENDS
    assert m.get_value("reminders_claims_per_tick_sum") == SENDS
    assert m.get_value("reminders_outbox_published_total", path="claim") == SENDS
    assert not m.get_value("reminders_outbox_published_total", path="fast")
    # Every loop ticks, times its ticks and beats.
    for workload in WORKLOADS:
        ticks = m.get_value("reminders_tick_duration_seconds_count", workload=workload)
        assert ticks is not None
        assert ticks >= 1, workload
        beat = m.get_value("reminders_worker_heartbeat_timestamp_seconds", workload=workload)
        assert beat is not None
        assert sent_at - 60 < beat <= time.time(), workload
    # Maintenance: nothing late, nothing waiting.
    for gauge in ("next_run_lag_seconds", "reminders_oldest_pending_age_seconds",
                  "reminders_due_backlog", "reminders_outbox_unpublished",
                  "reminders_outbox_oldest_unpublished_age_seconds",
                  "reminders_dlq_depth"):  # fmt: skip
        assert m.get_value(gauge) == 0, gauge
    assert m.get_value("reminders_queue_depth", state="visible") == 0
    assert m.get_value("reminders_queue_depth", state="not_visible") == 0
    # API: the three creations, under their route template.
    created_201 = api.get_value(
        "reminders_api_requests_total", method="POST", route="/v1/reminders", status="201"
    )
    assert created_201 == SENDS
    # One process, one registry: the API's /metrics has the workers' metrics too.
    assert api.get_value("delivery_lag_seconds_count", held="false") == SENDS
    # The workers' liveness endpoint.
    assert health.status_code == 200, health.text
    assert sorted(health.json()["loops"]) == sorted(WORKLOADS)
