"""The container image (Dockerfile) and the Kubernetes manifests (k8s/, kustomize).

Expected values come from outside the manifests: the Kubernetes API schemas
(kubernetes-validate), the Pod Security Standards' "restricted" profile, the KEDA and
Prometheus Operator CRDs and scaler documentation, and our own code (the `reminders` CLI,
Settings, the API's routes, the workers' metrics server, pyproject.toml). No cluster, no
Docker engine: the image is checked by reading its Dockerfile.
"""

from __future__ import annotations

import json
import math
import re
import shlex
import tomllib
import urllib.request
from collections.abc import Iterator
from functools import cache
from pathlib import Path
from typing import Any

import jsonschema
import kubernetes_validate
import pytest
import typer.core
import typer.main
import yaml
from fastapi.routing import APIRoute
from packaging.specifiers import SpecifierSet
from sqlalchemy import create_engine, make_url

from reminder_api.app import create_app
from reminder_core.cell_directory import open_cell_routing
from reminder_core.cells import cells_of, process_settings
from reminder_core.metrics_server import MetricsServer
from reminder_core.profile_service import HttpProfileSource, profile_source_from_settings
from reminder_core.profiles import LocalProfileSource
from reminder_core.settings import Settings
from reminders.cli import app as cli_app
from sender.main import build_provider
from tests.support import kustomize
from tests.unit.test_alert_rules import exported_names, metric_names

ROOT = Path(__file__).resolve().parents[2]
K8S = ROOT / "k8s"
BASE = K8S / "base"
CELLS_OVERLAY = K8S / "overlays" / "cells"
KUSTOMIZATIONS = {
    "base": BASE,
    "production": K8S / "overlays" / "production",
    "cells": CELLS_OVERLAY,
}
PYPROJECT = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))

# The Kubernetes version the manifests target; kubernetes-validate bundles its schemas.
KUBERNETES_VERSION = "1.32.0"
# The workloads of issue 7 / docs/design.md, "CLI", one Deployment each.
WORKLOADS = {"api", "coordinator", "sweeper", "sender", "maintenance"}
# The workloads that run for one cell (`--cell NAME`; docs/design.md, "Cells").
CELL_WORKERS = WORKLOADS - {"api"}
# The label of a cell's workloads in k8s/overlays/cells.
CELL_LABEL = "reminders.dev/cell"
# Seconds a pod gets beyond its shutdown grace (interpreter exit, closing pools).
SHUTDOWN_MARGIN_S = 5

Doc = dict[str, Any]


# --- rendering --------------------------------------------------------------------------


@cache
def rendered(name: str) -> tuple[Doc, ...]:
    """The documents `kustomize build` of KUSTOMIZATIONS[name] produces (the Python
    rendering; test_python_rendering_matches_kustomize ties it to the real one)."""
    return tuple(kustomize.build(KUSTOMIZATIONS[name]))


def of_kind(docs: tuple[Doc, ...], kind: str) -> list[Doc]:
    return [d for d in docs if d["kind"] == kind]


def named(docs: tuple[Doc, ...], kind: str, name: str) -> Doc:
    found = [d for d in of_kind(docs, kind) if d["metadata"]["name"] == name]
    assert len(found) == 1, f"{kind}/{name}: {len(found)} found"
    return found[0]


def pod_templates(docs: tuple[Doc, ...]) -> Iterator[tuple[Doc, Doc]]:
    """(workload, pod template) of every Deployment and Job."""
    for doc in docs:
        if doc["kind"] in ("Deployment", "Job"):
            yield doc, doc["spec"]["template"]


def containers(docs: tuple[Doc, ...]) -> Iterator[tuple[Doc, Doc, Doc]]:
    """(workload, pod spec, container) of every container of every Deployment and Job."""
    for workload, template in pod_templates(docs):
        pod = template["spec"]
        for container in pod["containers"] + pod.get("initContainers", []):
            yield workload, pod, container


def subcommand(container: Doc) -> str:
    return str(container["args"][0])


def workloads_of(docs: tuple[Doc, ...], sub: str) -> list[tuple[Doc, Doc, Doc]]:
    """(workload, pod spec, container) of every container running `reminders <sub>` (one
    per cell with CELLS)."""
    found = [(w, p, c) for w, p, c in containers(docs) if subcommand(c) == sub]
    assert found, f"`reminders {sub}`: no container"
    return found


def workload_of(docs: tuple[Doc, ...], sub: str) -> tuple[Doc, Doc, Doc]:
    found = workloads_of(docs, sub)
    assert len(found) == 1, f"`reminders {sub}`: {len(found)} containers"
    return found[0]


def secret_example() -> dict[tuple[str, str], str]:
    """(Secret name, key) -> placeholder value, from k8s/base/secret.example.yaml and the
    overlays' (k8s/overlays/cells/secret.example.yaml: CELLS, each cell's KEDA Secret)."""
    example: dict[tuple[str, str], str] = {}
    for path in sorted(K8S.rglob("secret.example.yaml")):
        for d in yaml.safe_load_all(path.read_text(encoding="utf-8")):
            for key, value in d["stringData"].items():
                assert (d["metadata"]["name"], key) not in example, (path, key)
                example[(d["metadata"]["name"], key)] = value
    return example


def container_env(docs: tuple[Doc, ...], container: Doc) -> dict[str, str]:
    """The environment the container starts with (ConfigMaps of envFrom, then env; secret
    references resolved to the placeholders of secret.example.yaml)."""
    env: dict[str, str] = {}
    for source in container.get("envFrom", []):
        env.update(named(docs, "ConfigMap", source["configMapRef"]["name"])["data"])
    secrets = secret_example()
    for var in container.get("env", []):
        if "value" in var:
            env[var["name"]] = var["value"]
        else:
            ref = var["valueFrom"]["secretKeyRef"]
            env[var["name"]] = secrets[(ref["name"], ref["key"])]
    return env


def settings_for(env: dict[str, str]) -> Settings:
    """Settings as the process would read them from exactly `env`."""
    with pytest.MonkeyPatch.context() as mp:
        for field in Settings.model_fields:
            mp.delenv(field.upper(), raising=False)
        for key, value in env.items():
            mp.setenv(key, value)
        return Settings()


def worker_settings(docs: tuple[Doc, ...], container: Doc) -> Settings:
    """The settings the container's process opens its database and queue with: a cell
    worker's (`--cell`) are its cell's of CELLS (reminder_core.cells.process_settings)."""
    env = container_env(docs, container)
    cell = cli_params(container).get("cell")
    if cell is not None:
        env["CELL"] = cell
    return process_settings(settings_for(env), worker=subcommand(container) in CELL_WORKERS)


def cli_params(container: Doc) -> dict[str, Any]:
    """The parameters `reminders <args>` parses to (click; raises on an unknown option)."""
    group = typer.main.get_command(cli_app)
    assert isinstance(group, typer.core.TyperGroup)
    args = [str(a) for a in container["args"]]
    command = group.commands[args[0]]
    return dict(command.make_context(args[0], args[1:]).params)


def container_port(container: Doc, port: int | str) -> int:
    """The number of a probe's or Service's port (a name resolves to a containerPort)."""
    if isinstance(port, int):
        return port
    found = [p["containerPort"] for p in container.get("ports", []) if p.get("name") == port]
    assert found, f"container {container['name']} has no port named {port!r}"
    return int(found[0])


def quantity(value: str | int) -> float:
    """A Kubernetes resource quantity (`250m`, `1`, `512Mi`, `1G`) as a number."""
    suffixes = {"m": 1e-3, "k": 1e3, "M": 1e6, "G": 1e9, "Ki": 2**10, "Mi": 2**20, "Gi": 2**30}
    match = re.fullmatch(r"([0-9.]+)([a-zA-Z]*)", str(value))
    assert match, f"not a quantity: {value!r}"
    return float(match[1]) * suffixes.get(match[2], 1) if match[2] else float(match[1])


# --- YAML, kustomizations, rendering -------------------------------------------------------


def test_every_yaml_file_parses() -> None:
    files = sorted(K8S.rglob("*.y*ml"))
    assert files
    for path in files:
        docs = [d for d in yaml.safe_load_all(path.read_text(encoding="utf-8")) if d]
        assert docs, path
        for doc in docs:
            assert {"apiVersion", "kind"} <= set(doc), path
            if doc["kind"] != "Kustomization":
                assert doc["metadata"]["name"], path


def test_base_kustomization_lists_every_manifest() -> None:
    listed = yaml.safe_load((BASE / "kustomization.yaml").read_text())["resources"]
    on_disk = {p.name for p in BASE.glob("*.yaml")} - {"kustomization.yaml", "secret.example.yaml"}
    assert set(listed) == on_disk | {"prometheusrule.yaml"}
    assert (BASE / "prometheusrule.yaml").exists(), "the alert rules (issue 7) are not there yet"


@pytest.mark.parametrize("name", sorted(KUSTOMIZATIONS))
def test_python_rendering_matches_kustomize(name: str) -> None:
    command = kustomize.real_kustomize()
    if command is None:
        pytest.skip("neither kustomize nor kubectl is installed")

    def key(doc: Doc) -> tuple[str, str]:
        return doc["kind"], doc["metadata"]["name"]

    real = sorted(kustomize.build_with(command, KUSTOMIZATIONS[name]), key=key)
    assert sorted(rendered(name), key=key) == real


# --- schemas ------------------------------------------------------------------------------


def closed(properties: Doc, *required: str) -> Doc:
    """A JSON schema object with these properties and no others."""
    schema: Doc = {"type": "object", "additionalProperties": False, "properties": properties}
    if required:
        schema["required"] = list(required)
    return schema


def array_of(items: Doc) -> Doc:
    return {"type": "array", "items": items}


def crd_document(spec: Doc) -> Doc:
    metadata = {"type": "object", "required": ["name"]}
    return {
        "type": "object",
        "required": ["spec"],
        "properties": {"metadata": metadata, "spec": spec},
    }


STRING: Doc = {"type": "string"}
INTEGER: Doc = {"type": "integer", "minimum": 0}
OBJECT: Doc = {"type": "object"}
STRINGS: Doc = {"type": "object", "additionalProperties": STRING}
DURATION: Doc = {"type": "string", "pattern": r"^(0|([0-9]+(ms|s|m|h|d|w|y))+)$"}

# Subsets of the custom resources' OpenAPI schemas (KEDA config/crd/bases/keda.sh_*.yaml,
# Prometheus Operator example/prometheus-operator-crd/monitoring.coreos.com_*.yaml): the
# fields they define, closed, so that a misspelt field fails here instead of being ignored.
CRD_SCHEMAS: dict[tuple[str, str], Doc] = {
    ("keda.sh/v1alpha1", "ScaledObject"): crd_document(
        closed(
            {
                "scaleTargetRef": closed(
                    dict.fromkeys(("apiVersion", "kind", "name", "envSourceContainerName"), STRING),
                    "name",
                ),
                **dict.fromkeys(
                    (
                        "pollingInterval",
                        "cooldownPeriod",
                        "initialCooldownPeriod",
                        "idleReplicaCount",
                        "minReplicaCount",
                        "maxReplicaCount",
                    ),
                    INTEGER,
                ),
                "advanced": OBJECT,
                "fallback": OBJECT,
                "triggers": array_of(
                    closed(
                        {
                            "type": STRING,
                            "name": STRING,
                            "metadata": STRINGS,
                            "authenticationRef": closed({"name": STRING, "kind": STRING}, "name"),
                            "metricType": {"enum": ["AverageValue", "Value", "Utilization"]},
                            "useCachedMetrics": {"type": "boolean"},
                        },
                        "type",
                        "metadata",
                    )
                ),
            },
            "scaleTargetRef",
            "triggers",
        )
    ),
    ("keda.sh/v1alpha1", "TriggerAuthentication"): crd_document(
        closed(
            {
                "podIdentity": closed(
                    {
                        "provider": {"enum": ["none", "azure-workload", "aws", "aws-eks", "gcp"]},
                        "identityOwner": {"enum": ["keda", "workload"]},
                        "roleArn": STRING,
                        "identityId": STRING,
                    },
                    "provider",
                ),
                "secretTargetRef": array_of(
                    closed(
                        dict.fromkeys(("parameter", "name", "key"), STRING),
                        "parameter",
                        "name",
                        "key",
                    )
                ),
                "env": {"type": "array"},
            }
        )
    ),
    ("monitoring.coreos.com/v1", "ServiceMonitor"): crd_document(
        closed(
            {
                "selector": OBJECT,
                "namespaceSelector": OBJECT,
                "jobLabel": STRING,
                "endpoints": array_of(
                    closed(
                        {
                            "port": STRING,
                            "path": STRING,
                            "scheme": {"enum": ["http", "https"]},
                            "interval": DURATION,
                            "scrapeTimeout": DURATION,
                            "honorLabels": {"type": "boolean"},
                            "relabelings": {"type": "array"},
                            "metricRelabelings": {"type": "array"},
                        }
                    )
                ),
            },
            "selector",
        )
    ),
    ("monitoring.coreos.com/v1", "PrometheusRule"): crd_document(
        closed(
            {
                "groups": array_of(
                    closed(
                        {
                            "name": {"type": "string", "minLength": 1},
                            "interval": DURATION,
                            "query_offset": DURATION,
                            "limit": {"type": "integer"},
                            "labels": STRINGS,
                            "partial_response_strategy": STRING,
                            "rules": array_of(
                                {
                                    **closed(
                                        {
                                            "alert": STRING,
                                            "record": STRING,
                                            "expr": {"type": ["string", "integer"]},
                                            "for": DURATION,
                                            "keep_firing_for": DURATION,
                                            "labels": STRINGS,
                                            "annotations": STRINGS,
                                        },
                                        "expr",
                                    ),
                                    # Exactly one of alert and record.
                                    "oneOf": [{"required": ["alert"]}, {"required": ["record"]}],
                                }
                            ),
                        },
                        "name",
                    )
                )
            }
        )
    ),
}


@pytest.mark.parametrize("name", sorted(KUSTOMIZATIONS))
def test_resources_validate_against_their_schemas(name: str) -> None:
    """Core kinds against the Kubernetes OpenAPI schemas (strict: no unknown field), custom
    resources against their CRDs' fields."""
    for doc in rendered(name):
        where = f"{doc['kind']}/{doc['metadata']['name']}"
        crd = CRD_SCHEMAS.get((doc["apiVersion"], doc["kind"]))
        if crd is not None:
            jsonschema.Draft202012Validator(crd).validate(doc)
            continue
        try:
            kubernetes_validate.validate(doc, KUBERNETES_VERSION, strict=True)
        except kubernetes_validate.ValidationError as exc:
            pytest.fail(f"{where}: {'.'.join(map(str, exc.path))}: {exc.message}")
        except kubernetes_validate.SchemaNotFoundError:
            pytest.fail(
                f"{where}: {doc['apiVersion']} is not a Kubernetes {KUBERNETES_VERSION} API"
            )


def test_strict_validation_rejects_an_unknown_field() -> None:
    """Control: the validator used above does fail a misspelt field."""
    job = json.loads(json.dumps(named(rendered("base"), "Job", "reminders-migrate")))
    job["spec"]["template"]["spec"]["terminationGracePeriodSecond"] = 30
    with pytest.raises(kubernetes_validate.ValidationError):
        kubernetes_validate.validate(job, KUBERNETES_VERSION, strict=True)


# --- commands, configuration, secrets ------------------------------------------------------


@pytest.mark.parametrize("name", sorted(KUSTOMIZATIONS))
def test_every_container_runs_a_real_cli_subcommand(name: str) -> None:
    docs = rendered(name)
    # The image's ENTRYPOINT (`reminders`) runs; the manifests only give its arguments.
    assert json.loads(dockerfile_stages()[-1].last("ENTRYPOINT")) == ["reminders"]
    deployments = set()
    for workload, _, container in containers(docs):
        assert "command" not in container, workload["metadata"]["name"]
        cli_params(container)  # raises on an unknown subcommand or option
        if workload["kind"] == "Deployment":
            deployments.add(subcommand(container))
    assert deployments == WORKLOADS
    (job,) = of_kind(docs, "Job")
    assert job["spec"]["template"]["spec"]["containers"][0]["args"] == ["migrate"]


def test_one_image_for_every_workload() -> None:
    for name in KUSTOMIZATIONS:
        images = {c["image"] for _, _, c in containers(rendered(name))}
        assert len(images) == 1, images
        (image,) = images
        repository, _, tag = image.rpartition(":")
        assert repository, f"{image}: no explicit tag"
        assert "/" not in tag, f"{image}: no explicit tag"
        assert tag != "latest"


@pytest.mark.parametrize("name", sorted(KUSTOMIZATIONS))
def test_every_environment_variable_is_a_setting(name: str) -> None:
    docs = rendered(name)
    settings = {field.upper() for field in Settings.model_fields}
    for configmap in of_kind(docs, "ConfigMap"):
        assert set(configmap["data"]) <= settings, set(configmap["data"]) - settings
    for workload, _, container in containers(docs):
        env = container_env(docs, container)
        assert set(env) <= settings, (workload["metadata"]["name"], set(env) - settings)
        settings_for(env)  # every value passes the settings' validation


@pytest.mark.parametrize("name", sorted(KUSTOMIZATIONS))
def test_secrets_are_referenced_never_included(name: str) -> None:
    docs = rendered(name)
    assert not of_kind(docs, "Secret")
    example = secret_example()
    for workload, _, container in containers(docs):
        for var in container.get("env", []):
            if "valueFrom" in var:
                ref = var["valueFrom"]["secretKeyRef"]
                assert (ref["name"], ref["key"]) in example, (workload["metadata"]["name"], ref)
                assert ref["key"] == var["name"]
        assert all("secretRef" not in s for s in container.get("envFrom", []))
    for auth in of_kind(docs, "TriggerAuthentication"):
        for ref in auth["spec"].get("secretTargetRef", []):
            assert (ref["name"], ref["key"]) in example, ref


@pytest.mark.parametrize("name", sorted(KUSTOMIZATIONS))
def test_every_workload_that_reads_profiles_gets_the_profile_service_token(name: str) -> None:
    # The API (zones at creation), the sender (address at send time) and maintenance (dead
    # letters, the suppression recheck) read profiles; with PROFILE_SERVICE_URL set, each
    # needs the token (operations trial: maintenance had the URL but no token, so every
    # dead letter failed with 401).
    docs = rendered(name)
    for sub in ("api", "sender", "maintenance"):
        for workload, _, container in workloads_of(docs, sub):
            env = container_env(docs, container)
            if "PROFILE_SERVICE_URL" in env:
                names = {var["name"] for var in container.get("env", [])}
                assert "PROFILE_SERVICE_TOKEN" in names, workload["metadata"]["name"]


def test_production_writes_no_local_state() -> None:
    """With DATABASE_URL (no embedded PostgreSQL), JWT_SECRET (no key file), a real email
    provider (no file sink) and a profile service (no profiles file), nothing is written
    under STATE_DIR: the read-only root filesystem holds."""
    docs = rendered("production")
    for workload, _, container in containers(docs):
        settings = settings_for(container_env(docs, container))
        assert settings.database_url, workload["metadata"]["name"]
        if subcommand(container) in ("api", "sender"):
            assert settings.profile_service_url
        if subcommand(container) == "api":
            assert settings.jwt_secret
        if subcommand(container) == "sender":
            assert settings.email_provider != "file"


@pytest.mark.parametrize("name", sorted(KUSTOMIZATIONS))
def test_sender_builds_its_providers_from_the_configuration(name: str) -> None:
    """The sender's email providers can be built from its environment alone (no network:
    clients are only constructed); e.g. SES needs a region it can find."""
    docs = rendered(name)
    for _, _, container in workloads_of(docs, "sender"):
        settings = worker_settings(docs, container)
        with pytest.MonkeyPatch.context() as mp:
            for var in ("AWS_DEFAULT_REGION", "AWS_REGION", "AWS_PROFILE"):
                mp.delenv(var, raising=False)
            mp.setenv("AWS_CONFIG_FILE", "/nonexistent")
            build_provider(settings)


@pytest.mark.parametrize("name", sorted(KUSTOMIZATIONS))
def test_api_builds_from_the_configuration(name: str) -> None:
    """The API application can be built from its environment alone (JWT key, webhook
    secrets, profile source, with CELLS the routing to the cells); nothing connects yet."""
    docs = rendered(name)
    _, _, container = workload_of(docs, "api")
    settings = worker_settings(docs, container)
    profiles = profile_source_from_settings(settings)
    engine = create_engine(str(settings.database_url))
    try:
        cells = open_cell_routing(settings, engine, application_name="test")
        create_app(settings, engine, profiles, cells=cells)
    finally:
        if isinstance(profiles, HttpProfileSource):
            profiles.close()


# --- pods: probes, shutdown, security, resources ---------------------------------------


def api_get_routes() -> set[str]:
    settings = Settings(jwt_secret="x" * 48, database_url="postgresql+psycopg://u@127.0.0.1/db")
    engine = create_engine("postgresql+psycopg://u@127.0.0.1:9/db")  # never connected
    app = create_app(settings, engine, LocalProfileSource(Path("/nonexistent/profiles.json")))
    return {r.path for r in app.routes if isinstance(r, APIRoute) and "GET" in r.methods}


PROBES = ("startupProbe", "livenessProbe", "readinessProbe")


def http_gets(container: Doc) -> list[Doc]:
    """The httpGet of every probe of the container (each probe must be one)."""
    return [container[p]["httpGet"] for p in PROBES if p in container]


@pytest.mark.parametrize("name", sorted(KUSTOMIZATIONS))
def test_probes_point_at_real_paths_and_ports(name: str) -> None:
    docs = rendered(name)
    api_routes = api_get_routes()
    for workload, _, container in containers(docs):
        if workload["kind"] != "Deployment":
            continue
        where = workload["metadata"]["name"]
        assert {"livenessProbe", "readinessProbe"} <= set(container), where
        gets = http_gets(container)
        if subcommand(container) == "api":
            port = cli_params(container)["port"]
            assert container["livenessProbe"]["httpGet"]["path"] == "/healthz"
            assert container["readinessProbe"]["httpGet"]["path"] == "/readyz"
            assert {g["path"] for g in gets} <= api_routes
        else:
            port = settings_for(container_env(docs, container)).metrics_port
            assert port, f"{where}: METRICS_PORT is off, nothing answers the probes"
            # Liveness must not follow a dependency outage; readiness does
            # (reminder_core.metrics_server).
            assert container["livenessProbe"]["httpGet"]["path"] == "/healthz"
            assert container["startupProbe"]["httpGet"]["path"] == "/healthz"
            assert container["readinessProbe"]["httpGet"]["path"] == "/readyz"
        for get in gets:
            assert container_port(container, get["port"]) == port, where


def test_worker_probe_and_scrape_paths_are_served() -> None:
    """The workers' /healthz, /readyz and /metrics come from reminder_core.metrics_server."""
    server = MetricsServer("127.0.0.1", 0)
    try:
        for path in ("/healthz", "/readyz", "/metrics"):
            with urllib.request.urlopen(f"http://127.0.0.1:{server.port}{path}", timeout=5) as r:
                assert r.status == 200, path
    finally:
        server.close()
    assert "/metrics" in api_get_routes()


def pre_stop_sleep_s(container: Doc) -> float:
    hook = container.get("lifecycle", {}).get("preStop")
    if hook is None:
        return 0.0
    command = hook["exec"]["command"]
    assert command[0] == "sleep", command
    assert len(command) == 2, command
    return float(command[1])


@pytest.mark.parametrize("name", sorted(KUSTOMIZATIONS))
def test_termination_grace_outlasts_the_shutdown_grace(name: str) -> None:
    docs = rendered(name)
    for workload, pod, container in containers(docs):
        grace = settings_for(container_env(docs, container)).shutdown_grace_s
        needed = math.ceil(pre_stop_sleep_s(container) + grace) + SHUTDOWN_MARGIN_S
        # Default when unset: 30 s (PodSpec.terminationGracePeriodSeconds).
        assert pod.get("terminationGracePeriodSeconds", 30) >= needed, workload["metadata"]


# Pod Security Standards, "restricted" profile (kubernetes.io/docs/concepts/security/
# pod-security-standards): the volume types it allows.
RESTRICTED_VOLUME_TYPES = {
    "configMap",
    "csi",
    "downwardAPI",
    "emptyDir",
    "ephemeral",
    "persistentVolumeClaim",
    "projected",
    "secret",
}


@pytest.mark.parametrize("name", sorted(KUSTOMIZATIONS))
def test_pods_meet_the_restricted_pod_security_standard(name: str) -> None:
    uid = dockerfile_uid()
    for workload, template in pod_templates(rendered(name)):
        where = workload["metadata"]["name"]
        pod = template["spec"]
        pod_sc = pod.get("securityContext", {})
        assert not any(pod.get(k) for k in ("hostNetwork", "hostPID", "hostIPC")), where
        assert pod.get("automountServiceAccountToken") is False, where
        volumes = {v["name"]: v for v in pod.get("volumes", [])}
        for volume in volumes.values():
            assert set(volume) - {"name"} <= RESTRICTED_VOLUME_TYPES, (where, volume)
        for container in pod["containers"] + pod.get("initContainers", []):
            sc = {**pod_sc, **container.get("securityContext", {})}
            assert sc.get("runAsNonRoot") is True, where
            assert sc.get("runAsUser") == uid, where  # the image's numeric USER
            assert sc.get("seccompProfile", {}).get("type") == "RuntimeDefault", where
            assert sc.get("allowPrivilegeEscalation") is False, where
            assert sc.get("readOnlyRootFilesystem") is True, where
            assert sc.get("capabilities", {}).get("drop") == ["ALL"], where
            assert not sc.get("capabilities", {}).get("add"), where
            assert not sc.get("privileged"), where
            # The one writable place: /tmp (HOME and TMPDIR in the image) on an emptyDir.
            mounts = {m["mountPath"]: m["name"] for m in container.get("volumeMounts", [])}
            assert "emptyDir" in volumes[mounts["/tmp"]], where


@pytest.mark.parametrize("name", sorted(KUSTOMIZATIONS))
def test_every_container_requests_and_limits_cpu_and_memory(name: str) -> None:
    for workload, _, container in containers(rendered(name)):
        resources = container["resources"]
        for kind in ("cpu", "memory"):
            request = quantity(resources["requests"][kind])
            limit = quantity(resources["limits"][kind])
            assert 0 < request <= limit, (workload["metadata"]["name"], kind)


# --- scaling, disruption, services, monitoring, network ------------------------------------


def matches(selector: dict[str, str], labels: dict[str, str]) -> bool:
    return all(labels.get(k) == v for k, v in selector.items())


@pytest.mark.parametrize("name", sorted(KUSTOMIZATIONS))
def test_autoscalers(name: str) -> None:
    docs = rendered(name)
    deployments = {d["metadata"]["name"]: d for d in of_kind(docs, "Deployment")}
    sub_of = {
        n: subcommand(d["spec"]["template"]["spec"]["containers"][0])
        for n, d in deployments.items()
    }
    scaled: dict[str, str] = {}

    (hpa,) = of_kind(docs, "HorizontalPodAutoscaler")
    assert hpa["apiVersion"] == "autoscaling/v2"
    assert hpa["spec"]["scaleTargetRef"]["kind"] == "Deployment"
    scaled[hpa["spec"]["scaleTargetRef"]["name"]] = "hpa"
    assert 1 <= hpa["spec"]["minReplicas"] <= hpa["spec"]["maxReplicas"]

    auths = {a["metadata"]["name"]: a for a in of_kind(docs, "TriggerAuthentication")}
    for so in of_kind(docs, "ScaledObject"):
        spec = so["spec"]
        assert spec["scaleTargetRef"].get("kind", "Deployment") == "Deployment"
        (trigger,) = spec["triggers"]
        scaled[spec["scaleTargetRef"]["name"]] = trigger["type"]
        # Never scaled to zero: a reminder coming due must not wait for a pod to start.
        assert 1 <= spec["minReplicaCount"] <= spec["maxReplicaCount"]
        assert trigger["authenticationRef"]["name"] in auths

    # Every API, sender (each cell's) and coordinator (each cell's) Deployment, nothing else.
    scaler = {"api": "hpa", "sender": "aws-sqs-queue", "coordinator": "postgresql"}
    assert scaled == {n: scaler[sub] for n, sub in sub_of.items() if sub in scaler}
    for target in scaled:
        # An autoscaled Deployment leaves `replicas` to its autoscaler (else every apply
        # resets it: Kubernetes docs, "Migrating Deployments to horizontal autoscaling").
        assert "replicas" not in deployments[target]["spec"], target


# Trigger metadata the KEDA scalers read (keda.sh/docs/<version>/scalers/aws-sqs-queue and
# .../postgresql). KEDA ignores any other key: a misspelt one would silently do nothing.
SQS_METADATA = {
    "queueURL",
    "queueURLFromEnv",
    "queueLength",
    "activationQueueLength",
    "awsRegion",
    "awsEndpoint",
    "scaleOnInFlight",
    "scaleOnDelayed",
}
POSTGRESQL_METADATA = {
    "query",
    "targetQueryValue",
    "activationTargetQueryValue",
    "host",
    "port",
    "userName",
    "dbName",
    "sslmode",
    "connectionFromEnv",
    "passwordFromEnv",
}
# AWS SQS queue URL: https://sqs.<region>.amazonaws.com/<12-digit account>/<queue name>.
SQS_QUEUE_URL = re.compile(r"https://sqs\.([a-z0-9-]+)\.amazonaws\.com/\d{12}/[\w-]{1,80}")


def scaled_objects_of(docs: tuple[Doc, ...], sub: str) -> list[tuple[Doc, Doc]]:
    """(container, ScaledObject) of every Deployment running `reminders <sub>` (one per
    cell with CELLS)."""
    found = []
    for workload, _, container in workloads_of(docs, sub):
        (so,) = [
            s
            for s in of_kind(docs, "ScaledObject")
            if s["spec"]["scaleTargetRef"]["name"] == workload["metadata"]["name"]
        ]
        found.append((container, so))
    return found


@pytest.mark.parametrize("name", sorted(KUSTOMIZATIONS))
def test_sender_scales_on_the_queue_it_reads(name: str) -> None:
    docs = rendered(name)
    for container, so in scaled_objects_of(docs, "sender"):
        meta = so["spec"]["triggers"][0]["metadata"]
        assert set(meta) <= SQS_METADATA
        env = container_env(docs, container)
        # KEDA resolves queueURLFromEnv in the scale target's first container (envFrom too).
        source = so["spec"]["scaleTargetRef"].get("envSourceContainerName")
        assert source in (None, container["name"])
        queue_url = env[meta["queueURLFromEnv"]] if "queueURLFromEnv" in meta else meta["queueURL"]
        # The queue the sender reads: QUEUE_URL, or with CELLS its cell's queue_url.
        assert queue_url == worker_settings(docs, container).queue_url
        match = SQS_QUEUE_URL.fullmatch(queue_url)
        assert match, f"KEDA needs the queue's https URL, not {queue_url!r}"
        assert meta["awsRegion"] == match[1]
        assert int(meta["queueLength"]) > 0
        auth_name = so["spec"]["triggers"][0]["authenticationRef"]["name"]
        auth = named(docs, "TriggerAuthentication", auth_name)
        assert auth["spec"]["podIdentity"]["provider"] == "aws"


@pytest.mark.parametrize("name", sorted(KUSTOMIZATIONS))
def test_coordinator_scales_on_the_due_backlog(name: str) -> None:
    """The query itself runs against PostgreSQL in tests/integration/test_k8s_keda_query.py."""
    docs = rendered(name)
    for _, so in scaled_objects_of(docs, "coordinator"):
        trigger = so["spec"]["triggers"][0]
        assert set(trigger["metadata"]) <= POSTGRESQL_METADATA
        assert float(trigger["metadata"]["targetQueryValue"]) > 0
        auth = named(docs, "TriggerAuthentication", trigger["authenticationRef"]["name"])
        # The scaler takes a full connection string as the auth parameter `connection`.
        assert [r["parameter"] for r in auth["spec"]["secretTargetRef"]] == ["connection"]


@pytest.mark.parametrize("name", sorted(KUSTOMIZATIONS))
def test_every_deployment_has_a_disruption_budget(name: str) -> None:
    docs = rendered(name)
    budgets = of_kind(docs, "PodDisruptionBudget")
    for deployment in of_kind(docs, "Deployment"):
        labels = deployment["spec"]["template"]["metadata"]["labels"]
        covering = [b for b in budgets if matches(b["spec"]["selector"]["matchLabels"], labels)]
        assert len(covering) == 1, deployment["metadata"]["name"]
        # maxUnavailable, so that a one-replica workload can still be drained; pods that
        # are not ready (a dependency down) too.
        assert covering[0]["spec"].get("maxUnavailable") == 1
        assert covering[0]["spec"].get("unhealthyPodEvictionPolicy") == "AlwaysAllow"


@pytest.mark.parametrize("name", sorted(KUSTOMIZATIONS))
def test_workers_that_are_not_ready_are_still_scraped(name: str) -> None:
    # A worker is not ready while its ticks fail (/readyz); an Endpoints object lists
    # only ready pods unless publishNotReadyAddresses (Kubernetes API, ServiceSpec).
    docs = rendered(name)
    workers = [
        s
        for s in of_kind(docs, "Service")
        if s["spec"]["selector"].get("reminders/tier") == "worker"
    ]
    assert workers
    assert all(s["spec"].get("publishNotReadyAddresses") is True for s in workers)


@pytest.mark.parametrize("name", sorted(KUSTOMIZATIONS))
def test_services_and_the_service_monitor_reach_every_workload(name: str) -> None:
    docs = rendered(name)
    services = of_kind(docs, "Service")
    (monitor,) = of_kind(docs, "ServiceMonitor")
    scraped_ports = {e["port"] for e in monitor["spec"]["endpoints"]}
    assert {e.get("path", "/metrics") for e in monitor["spec"]["endpoints"]} == {"/metrics"}
    scraped: set[str] = set()
    selected: dict[str, set[str]] = {}
    for service in services:
        pods = [
            (w, c)
            for w, _, c in containers(docs)
            if w["kind"] == "Deployment"
            and matches(service["spec"]["selector"], w["spec"]["template"]["metadata"]["labels"])
        ]
        assert pods, f"Service {service['metadata']['name']} selects no pod"
        selected[service["metadata"]["name"]] = {subcommand(c) for _, c in pods}
        for port in service["spec"]["ports"]:
            for _, container in pods:
                container_port(container, port["targetPort"])  # every selected pod has it
        if matches(monitor["spec"]["selector"]["matchLabels"], service["metadata"]["labels"]):
            if {p["name"] for p in service["spec"]["ports"]} & scraped_ports:
                scraped |= {subcommand(c) for _, c in pods}
    assert scraped == WORKLOADS
    # The API's Service sends requests to API pods only.
    api_services = [s for s in services if "http" in {p["name"] for p in s["spec"]["ports"]}]
    assert [selected[s["metadata"]["name"]] for s in api_services] == [{"api"}]


def allowed(docs: tuple[Doc, ...], direction: str, labels: dict[str, str], port: Doc) -> bool:
    """Whether some NetworkPolicy selecting a pod with `labels` allows `port` ({protocol,
    port}) in `direction` ("ingress" or "egress")."""
    for policy in of_kind(docs, "NetworkPolicy"):
        spec = policy["spec"]
        if direction.capitalize() not in spec["policyTypes"]:
            continue
        if not matches(spec["podSelector"].get("matchLabels", {}), labels):
            continue
        for rule in spec.get(direction, []):
            for p in rule.get("ports", []):
                if p.get("protocol", "TCP") == port["protocol"] and p["port"] == port["port"]:
                    return True
    return False


@pytest.mark.parametrize("name", sorted(KUSTOMIZATIONS))
def test_network_policies(name: str) -> None:
    docs = rendered(name)
    deny = [
        p
        for p in of_kind(docs, "NetworkPolicy")
        if set(p["spec"]["policyTypes"]) == {"Ingress", "Egress"}
        and not p["spec"].get("ingress")
        and not p["spec"].get("egress")
    ]
    assert deny, "no default-deny policy"
    for workload, _, container in containers(docs):
        labels = workload["spec"]["template"]["metadata"]["labels"]
        assert any(matches(p["spec"]["podSelector"]["matchLabels"], labels) for p in deny)
        # Out: DNS, PostgreSQL (DATABASE_URL), HTTPS (SQS, SES, profile service).
        for port in ({"protocol": "UDP", "port": 53}, {"protocol": "TCP", "port": 5432}):
            assert allowed(docs, "egress", labels, port), (workload["metadata"]["name"], port)
        assert allowed(docs, "egress", labels, {"protocol": "TCP", "port": 443})
        # In: what the probes and Prometheus reach.
        for port in container.get("ports", []):
            assert allowed(docs, "ingress", labels, {"protocol": "TCP", "port": port["name"]})


# --- cells (issue 18; k8s/overlays/cells) ----------------------------------------------------


def cells_in(docs: tuple[Doc, ...]) -> dict[str, Any]:
    """name -> Cell of the CELLS the API reads (the placeholders of secret.example.yaml)."""
    _, _, api = workload_of(docs, "api")
    return {c.name: c for c in cells_of(settings_for(container_env(docs, api)))}


def test_every_cell_has_its_four_workers_each_for_its_cell() -> None:
    docs = rendered("cells")
    _, _, api = workload_of(docs, "api")
    api_env = container_env(docs, api)
    cells = cells_in(docs)
    assert len(cells) == 3
    kustomization = yaml.safe_load((CELLS_OVERLAY / "kustomization.yaml").read_text())
    budgets = of_kind(docs, "PodDisruptionBudget")
    found: set[tuple[str, str]] = set()
    for workload, _, container in containers(docs):
        sub, where = subcommand(container), workload["metadata"]["name"]
        env = container_env(docs, container)
        # Every process reads the same cells (the API routes to them, the Job migrates
        # them all); nothing is left of the one-cell DATABASE_URL and QUEUE_URL.
        assert env["CELLS"] == api_env["CELLS"], where
        assert not {"DATABASE_URL", "QUEUE_URL", "CELL"} & set(env), where
        if sub not in CELL_WORKERS:
            assert cli_params(container).get("cell") is None, where
            continue
        cell = cli_params(container)["cell"]
        assert [str(a) for a in container["args"]] == [sub, "--cell", cell], where
        assert cell in cells, where
        assert where == f"reminders-{sub}-{cell}"
        labels = workload["spec"]["template"]["metadata"]["labels"]
        assert labels[CELL_LABEL] == cell, where
        assert workload["spec"]["selector"]["matchLabels"][CELL_LABEL] == cell, where
        (budget,) = [b for b in budgets if matches(b["spec"]["selector"]["matchLabels"], labels)]
        assert budget["spec"]["selector"]["matchLabels"][CELL_LABEL] == cell, where
        settings = worker_settings(docs, container)  # exits 2 in the pod if this raises
        assert settings.database_url == cells[cell].database_url, where
        assert settings.queue_url == cells[cell].queue_url, where
        found.add((cell, sub))
        # A cell is one directory of the overlay (copied to add a cell).
        assert f"cell-{cell}" in kustomization["resources"], cell
    assert found == {(cell, sub) for cell in cells for sub in CELL_WORKERS}
    assert len({c.queue_url for c in cells.values()}) == len(cells), "two cells share a queue"


def test_each_cell_scales_on_its_own_queue_and_its_own_database() -> None:
    docs = rendered("cells")
    cells = cells_in(docs)
    secrets = secret_example()
    queues, databases = {}, {}
    for container, so in scaled_objects_of(docs, "sender"):
        queues[cli_params(container)["cell"]] = so["spec"]["triggers"][0]["metadata"]["queueURL"]
    for container, so in scaled_objects_of(docs, "coordinator"):
        cell = cli_params(container)["cell"]
        trigger = so["spec"]["triggers"][0]
        auth = named(docs, "TriggerAuthentication", trigger["authenticationRef"]["name"])
        (ref,) = auth["spec"]["secretTargetRef"]
        keda = make_url(secrets[(ref["name"], ref["key"])])
        own = make_url(cells[cell].database_url)
        # The backlog query counts the cell's reminders: it runs in the cell's database.
        assert (keda.host, keda.port, keda.database) == (own.host, own.port, own.database), cell
        databases[cell] = ref["name"]
    assert queues == {name: c.queue_url for name, c in cells.items()}
    assert set(databases) == set(cells)
    assert len(set(databases.values())) == len(cells), "two cells share a KEDA connection"


# PromQL aggregation operators (Prometheus docs, "Operators", "Aggregation operators"),
# with their `by (...)` clause when written before the parenthesis.
AGGREGATION = re.compile(
    r"\b(sum|min|max|avg|group|stddev|stdvar|count|count_values|bottomk|topk|quantile)"
    r"\s*(?:by\s*\(([^)]*)\))?\s*\("
)


def last_threshold(expr: str) -> float:
    return float(re.findall(r">\s*([\d.]+)", expr)[-1])


def test_the_alerts_hold_per_cell() -> None:
    """Each base alert, with its threshold, for every cell: aggregations keep `cell`, and
    what absent() checks is written once per cell."""
    docs = rendered("cells")
    cells = cells_in(docs)

    def rules_of(d: tuple[Doc, ...]) -> list[Doc]:
        return [
            r
            for doc in of_kind(d, "PrometheusRule")
            for g in doc["spec"]["groups"]
            for r in g["rules"]
        ]

    rules = rules_of(docs)
    base = {r["alert"]: r for r in rules_of(rendered("base"))}
    exported = exported_names()
    assert {r["alert"] for r in rules} == set(base)
    for rule in rules:
        where, expr = rule["alert"], " ".join(rule["expr"].split())
        names = metric_names(expr)
        assert names, where
        assert names <= exported, (where, names - exported)
        assert last_threshold(expr) == last_threshold(base[where]["expr"]), where
        assert (rule["for"], rule["labels"]["severity"]) == (
            base[where]["for"],
            base[where]["labels"]["severity"],
        ), where
        if all(n.startswith("reminders_api_") for n in names):
            continue  # the shared API's series carry no `cell`
        for match in AGGREGATION.finditer(expr):
            grouping = {label.strip() for label in (match[2] or "").split(",")}
            assert "cell" in grouping, (where, match[0])
        for selector in re.findall(r"absent\(\s*[\w:]*\{([^}]*)\}\s*\)", expr):
            assert re.search(r'\bcell="[a-z0-9-]+"', selector), (where, selector)
        assert "absent(" not in expr or re.search(r"absent\(\s*[\w:]*\{", expr), where
    absent_alerts = {name for name, r in base.items() if "absent(" in r["expr"]}
    for cell in cells:
        per_cell = [r["alert"] for r in rules if f'cell="{cell}"' in r["expr"]]
        assert sorted(per_cell) == sorted(absent_alerts), cell


# --- the image ------------------------------------------------------------------------------


class Stage:
    """One stage of the Dockerfile: its FROM line and its instructions, in order."""

    def __init__(self, image: str, name: str | None) -> None:
        self.image = image
        self.name = name
        self.instructions: list[tuple[str, str]] = []

    def all(self, instruction: str) -> list[str]:
        return [arg for ins, arg in self.instructions if ins == instruction]

    def last(self, instruction: str) -> str:
        found = self.all(instruction)
        assert found, f"stage {self.name}: no {instruction}"
        return found[-1]


@cache
def dockerfile_stages() -> list[Stage]:
    """The Dockerfile's stages (continuation lines joined, comments dropped, global ARG
    defaults substituted into FROM)."""
    text = (ROOT / "Dockerfile").read_text(encoding="utf-8")
    lines = [ln for ln in text.splitlines() if not ln.lstrip().startswith("#")]
    logical = re.sub(r"\\\n", " ", "\n".join(lines)).splitlines()
    args: dict[str, str] = {}
    stages: list[Stage] = []
    for line in filter(str.strip, logical):
        instruction, _, rest = line.strip().partition(" ")
        instruction, rest = instruction.upper(), rest.strip()
        if instruction == "ARG" and not stages:
            key, _, default = rest.partition("=")
            args[key] = default
        elif instruction == "FROM":
            words = re.sub(r"\$\{(\w+)\}", lambda m: args[m[1]], rest).split()
            name = words[2] if len(words) == 3 and words[1].upper() == "AS" else None
            stages.append(Stage(words[0], name))
        else:
            stages[-1].instructions.append((instruction, rest))
    return stages


def dockerfile_uid() -> int:
    user = dockerfile_stages()[-1].last("USER")
    uid, _, gid = user.partition(":")
    assert uid.isdigit(), f"USER {user}: not numeric"
    assert not gid or gid.isdigit(), f"USER {user}: not numeric"
    return int(uid)


def test_dockerfile_builds_in_one_stage_and_runs_in_another() -> None:
    stages = dockerfile_stages()
    assert len(stages) >= 2
    build, runtime = stages[0], stages[-1]
    assert build.name
    assert any(f"--from={build.name}" in copy for copy in runtime.all("COPY"))
    assert any("pip wheel" in run and "pip install" in run for run in build.all("RUN"))
    # Nothing is built or downloaded into the runtime image.
    assert not any(re.search(r"pip|apt-get|apk|curl|wget", run) for run in runtime.all("RUN"))


def test_dockerfile_base_image_is_the_projects_python() -> None:
    """python:<X.Y>-slim..., a pinned minor version that pyproject's requires-python
    accepts, the same in every stage (the runtime reuses the build stage's venv)."""
    images = {stage.image for stage in dockerfile_stages()}
    assert len(images) == 1, images
    (image,) = images
    repository, _, tag = image.partition("@")[0].partition(":")
    assert repository in ("python", "docker.io/library/python")
    match = re.fullmatch(r"(\d+\.\d+)(?:\.\d+)?-slim(?:-\w+)?", tag)
    assert match, f"{image}: not a pinned python X.Y slim tag"
    assert SpecifierSet(PYPROJECT["project"]["requires-python"]).contains(f"{match[1]}.0")


def test_dockerfile_runtime_is_unprivileged_and_read_only_ready() -> None:
    runtime = dockerfile_stages()[-1]
    assert dockerfile_uid() != 0
    entrypoint = json.loads(runtime.last("ENTRYPOINT"))  # exec form: signals reach Python
    assert entrypoint == ["reminders"]
    assert entrypoint[0] in PYPROJECT["project"]["scripts"]
    env = dict(item.split("=", 1) for line in runtime.all("ENV") for item in shlex.split(line))
    assert env["PYTHONDONTWRITEBYTECODE"] == "1"
    assert env["HOME"].startswith("/tmp")
    assert env["TMPDIR"].startswith("/tmp")
    api = workload_of(rendered("base"), "api")[2]
    assert str(cli_params(api)["port"]) in runtime.last("EXPOSE").split()


def test_dockerignore_lets_in_only_what_the_wheel_build_reads() -> None:
    patterns = [
        ln.strip()
        for ln in (ROOT / ".dockerignore").read_text(encoding="utf-8").splitlines()
        if ln.strip() and not ln.lstrip().startswith("#")
    ]
    assert patterns[0] == "*"
    let_in = {p[1:].rstrip("/") for p in patterns if p.startswith("!")}
    packages = {
        p.rstrip("*") for p in PYPROJECT["tool"]["setuptools"]["packages"]["find"]["include"]
    }
    assert let_in == {"pyproject.toml", PYPROJECT["project"]["readme"]} | packages
