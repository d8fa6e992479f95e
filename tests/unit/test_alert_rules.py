"""The PrometheusRule (k8s/base/prometheusrule.yaml) only names metrics the code exports,
and alerts on the thresholds of issue 7: next_run_lag > 2 min, delivery_lag p99 > 150 s,
DLQ depth > 0, oldest unpublished outbox row > 60 s, sender or coordinator down, breaker
open > 5 min.

Names are taken from the code's registry as Prometheus exposes them: a counter `x` as
`x_total`, a histogram `x` as `x_bucket`, `x_sum` and `x_count`, a gauge or an Enum (a
state set) as `x` (OpenMetrics / Prometheus exposition format).
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pytest
import yaml
from prometheus_client import REGISTRY, CollectorRegistry

from reminder_core.metrics import register_backlog_gauges
from reminder_core.settings import Settings

RULES = Path(__file__).resolve().parents[2] / "k8s" / "base" / "prometheusrule.yaml"

# PromQL words that look like identifiers but are not metric names (Prometheus docs,
# "Operators" and "Querying basics").
KEYWORDS = {
    "and", "or", "unless", "by", "without", "on", "ignoring", "group_left", "group_right",
    "bool", "offset", "inf", "nan",
}  # fmt: skip

SUFFIXES = {
    "counter": ("_total", "_created"),
    "histogram": ("_bucket", "_sum", "_count", "_created"),
    "summary": ("", "_sum", "_count", "_created"),
    "gauge": ("",),
    "stateset": ("",),
    "info": ("_info",),
    "unknown": ("",),
}


def metric_names(expr: str) -> set[str]:
    """Metric names in a PromQL expression: identifiers that are not a function call, a
    keyword, a label (inside {...}), a grouping label list, a duration or a string."""
    expr = re.sub(r'"(?:[^"\\]|\\.)*"|\'(?:[^\'\\]|\\.)*\'', '""', expr)
    expr = re.sub(r"\{[^}]*\}", " ", expr)
    expr = re.sub(r"\[[^\]]*\]", " ", expr)
    expr = re.sub(r"\b(?:by|without|on|ignoring|group_left|group_right)\s*\([^)]*\)", " ", expr)
    names = re.findall(r"(?<![\w.:])([A-Za-z_:][\w:]*)(?![\w:])(?!\s*\()", expr)
    return {n for n in names if n.lower() not in KEYWORDS}


def exported_names() -> set[str]:
    """Every series name the code's metrics can expose: the default registry (every
    metric is defined in reminder_core.metrics, imported above) plus the backlog gauges,
    registered as the maintenance workload registers them."""
    backlog = CollectorRegistry()
    register_backlog_gauges(backlog)
    names = set()
    for registry in (REGISTRY, backlog):
        for family in registry.collect():
            for suffix in SUFFIXES[family.type]:
                names.add(family.name + suffix)
    return names


def load_rules() -> list[dict[str, Any]]:
    doc = yaml.safe_load(RULES.read_text())
    assert doc["apiVersion"] == "monitoring.coreos.com/v1"
    assert doc["kind"] == "PrometheusRule"
    rules: list[dict[str, Any]] = [r for g in doc["spec"]["groups"] for r in g["rules"]]
    return rules


def by_name() -> dict[str, dict[str, Any]]:
    return {r["alert"]: r for r in load_rules()}


def test_the_extractor_finds_the_metrics_of_a_sample_expression() -> None:
    # Read off the expression by hand: two metrics; the rest is functions, labels,
    # ranges, grouping and operators.
    expr = (
        "histogram_quantile(0.99, sum by (le) (rate(delivery_lag_seconds_bucket[5m])))"
        ' > 150 or absent(up{job="x"}) and on(pod) foo:bar offset 5m'
    )
    assert metric_names(expr) == {"delivery_lag_seconds_bucket", "up", "foo:bar"}


@pytest.mark.parametrize("rule", load_rules(), ids=lambda r: r["alert"])
def test_every_metric_in_every_rule_is_exported_by_the_code(rule: dict[str, Any]) -> None:
    names = metric_names(rule["expr"])
    assert names, f"{rule['alert']}: no metric found in {rule['expr']!r}"
    missing = names - exported_names()
    assert not missing, f"{rule['alert']} names metrics the code does not export: {missing}"


@pytest.mark.parametrize("rule", load_rules(), ids=lambda r: r["alert"])
def test_every_rule_has_a_severity_a_summary_and_a_for(rule: dict[str, Any]) -> None:
    assert rule["labels"]["severity"] in {"critical", "warning"}
    assert rule["annotations"]["summary"]
    assert re.fullmatch(r"\d+[smh]", rule["for"])


def _threshold(expr: str) -> float:
    """The number after the last `>` of an expression."""
    return float(re.findall(r">\s*([\d.]+)", expr)[-1])


def test_the_thresholds_are_those_of_issue_7() -> None:
    rules = by_name()
    assert _threshold(rules["RemindersNextRunLagHigh"]["expr"]) == 120  # > 2 min
    assert "next_run_lag_seconds" in rules["RemindersNextRunLagHigh"]["expr"]
    p99 = rules["RemindersDeliveryLagP99High"]["expr"]
    assert "histogram_quantile(0.99" in p99
    assert 'delivery_lag_seconds_bucket{held="false"}' in p99  # quiet hours are not lag
    assert _threshold(p99) == 150
    assert _threshold(rules["RemindersDeadLetters"]["expr"]) == 0  # DLQ depth > 0
    assert _threshold(rules["RemindersOutboxUnpublished"]["expr"]) == 60
    # Open > 5 min, counted from when the breaker left the closed state (failed half-open
    # probes reset pybreaker's opened-at, not this).
    breaker = rules["RemindersProviderBreakerOpen"]["expr"]
    assert "reminders_provider_breaker_not_closed_since_timestamp_seconds" in breaker
    assert _threshold(breaker) == 300
    for workload in ("sender", "coordinator"):
        down = rules[f"Reminders{workload.capitalize()}Down"]["expr"]
        assert f'absent(reminders_worker_heartbeat_timestamp_seconds{{workload="{workload}"}})' in (
            " ".join(down.split())
        )


def test_status_thresholds_default_to_the_rules_values() -> None:
    # `reminders status` judges by the same numbers as the alert rules (issue 7).
    settings = Settings(database_url="postgresql://unused")
    assert settings.alert_next_run_lag_s == 120
    assert settings.alert_delivery_lag_p99_s == 150
    assert settings.alert_dlq_depth == 0
    assert settings.alert_outbox_age_s == 60
    assert settings.alert_breaker_open_s == 300
    rules = by_name()
    assert (
        _threshold(rules["RemindersProviderBreakerOpen"]["expr"]) == settings.alert_breaker_open_s
    )
