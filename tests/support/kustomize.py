"""A small kustomize for the tests, for machines without `kubectl` or `kustomize`.

It renders what k8s/ uses and nothing more: `resources` (files and directories),
`namespace`, `images`, `replicas` and `patches` (strategic-merge patches from files or
inline, `$patch: delete` of a whole resource included, and inline JSON 6902 patches with a
target). Strategic merge follows the
Kubernetes merge keys of the fields that k8s/ patches (containers, env, volumes ... by
`name`); other lists are replaced, as JSON merge patch (RFC 7386) does for custom
resources. When a real kustomize is on the machine, a test checks that both renderings
agree, so this one cannot drift from what kubectl would apply.
"""

from __future__ import annotations

import copy
import shutil
import subprocess
from pathlib import Path
from typing import Any

import yaml

Doc = dict[str, Any]

# List fields that strategic merge patches merge item by item, keyed by `name`.
NAME_KEYED_LISTS = {"containers", "initContainers", "env", "volumes"}


def real_kustomize() -> list[str] | None:
    """The command that runs a real kustomize build (`kubectl kustomize` or `kustomize
    build`), or None when neither is installed."""
    if shutil.which("kustomize"):
        return ["kustomize", "build"]
    if shutil.which("kubectl"):
        return ["kubectl", "kustomize"]
    return None


def build_with(command: list[str], directory: Path) -> list[Doc]:
    """Render `directory` with a real kustomize; the documents it prints."""
    out = subprocess.run(
        [*command, str(directory)], check=True, capture_output=True, text=True, timeout=60
    ).stdout
    return [d for d in yaml.safe_load_all(out) if d]


def build(directory: Path) -> list[Doc]:
    """Render the kustomization in `directory` (see the module docstring for what it
    supports); raises ValueError on anything else, rather than rendering it wrong."""
    kustomization = _load_one(directory / "kustomization.yaml")
    known = {
        "apiVersion",
        "kind",
        "resources",
        "namespace",
        "images",
        "replicas",
        "patches",
    }
    unknown = set(kustomization) - known
    if unknown:
        raise ValueError(f"{directory}: unsupported kustomization fields {sorted(unknown)}")
    docs: list[Doc] = []
    for entry in kustomization.get("resources", []):
        path = directory / entry
        docs.extend(build(path) if path.is_dir() else _load_all(path))
    for patch in kustomization.get("patches", []):
        _apply_patch(docs, directory, patch)
    for image in kustomization.get("images", []):
        _set_image(docs, image)
    for replicas in kustomization.get("replicas", []):
        for doc in docs:
            if doc["metadata"]["name"] == replicas["name"] and "template" in doc.get("spec", {}):
                doc["spec"]["replicas"] = replicas["count"]
    if "namespace" in kustomization:
        for doc in docs:
            doc["metadata"]["namespace"] = kustomization["namespace"]
    return docs


def _load_all(path: Path) -> list[Doc]:
    return [d for d in yaml.safe_load_all(path.read_text(encoding="utf-8")) if d]


def _load_one(path: Path) -> Doc:
    docs = _load_all(path)
    if len(docs) != 1:
        raise ValueError(f"{path}: expected one document")
    return docs[0]


def _apply_patch(docs: list[Doc], directory: Path, patch: Doc) -> None:
    if "path" in patch:
        patches = _load_all(directory / patch["path"])
    else:
        parsed = yaml.safe_load(patch["patch"])
        if isinstance(parsed, list):  # JSON 6902
            for doc in _targets(docs, patch.get("target")):
                for op in parsed:
                    _json6902(doc, op)
            return
        patches = [parsed]
    for p in patches:
        target = patch.get("target") or {"kind": p["kind"], "name": p["metadata"]["name"]}
        matches = _targets(docs, target)
        if not matches:
            raise ValueError(f"patch {p['kind']}/{p['metadata']['name']} matches nothing")
        if p.get("$patch") == "delete":  # the resource goes (strategic merge directive)
            docs[:] = [d for d in docs if all(d is not m for m in matches)]
            continue
        for doc in matches:
            _merge(doc, p)


def _targets(docs: list[Doc], target: Doc | None) -> list[Doc]:
    if not target:
        raise ValueError("an inline JSON 6902 patch needs a target")
    out = []
    for doc in docs:
        group, _, version = doc["apiVersion"].rpartition("/")
        if "kind" in target and doc["kind"] != target["kind"]:
            continue
        if "name" in target and doc["metadata"]["name"] != target["name"]:
            continue
        if "group" in target and group != target["group"]:
            continue
        if "version" in target and version != target["version"]:
            continue
        out.append(doc)
    return out


def _merge(doc: Doc, patch: Doc) -> None:
    for key, value in patch.items():
        if value is None:
            doc.pop(key, None)
        elif isinstance(value, dict) and isinstance(doc.get(key), dict):
            _merge(doc[key], value)
        elif (
            key in NAME_KEYED_LISTS
            and isinstance(value, list)
            and isinstance(doc.get(key), list)
            and all(isinstance(i, dict) and "name" in i for i in value + doc[key])
        ):
            by_name = {item["name"]: item for item in doc[key]}
            for item in value:
                if item["name"] in by_name:
                    _merge(by_name[item["name"]], item)
                else:
                    doc[key].append(copy.deepcopy(item))
        else:
            doc[key] = copy.deepcopy(value)


def _json6902(doc: Doc, op: Doc) -> None:
    if op["op"] not in ("add", "replace"):
        raise ValueError(f"unsupported JSON 6902 op {op['op']}")
    *parents, last = [p.replace("~1", "/").replace("~0", "~") for p in op["path"][1:].split("/")]
    node: Any = doc
    for part in parents:
        node = node[int(part)] if isinstance(node, list) else node[part]
    if isinstance(node, list):
        index = len(node) if last == "-" else int(last)
        if op["op"] == "add":
            node.insert(index, copy.deepcopy(op["value"]))
        else:
            node[index] = copy.deepcopy(op["value"])
    else:
        if op["op"] == "replace" and last not in node:
            raise ValueError(f"replace of a missing path {op['path']}")
        node[last] = copy.deepcopy(op["value"])


def _set_image(docs: list[Doc], image: Doc) -> None:
    for doc in docs:
        pod = doc.get("spec", {}).get("template", {}).get("spec", {})
        for container in pod.get("containers", []) + pod.get("initContainers", []):
            name, tag = _split_image(container["image"])
            if name != image["name"]:
                continue
            new_name = image.get("newName", name)
            new_tag = image.get("newTag", tag)
            container["image"] = f"{new_name}:{new_tag}" if new_tag else new_name


def _split_image(ref: str) -> tuple[str, str | None]:
    slash = ref.rfind("/")
    colon = ref.rfind(":")
    if colon > slash:
        return ref[:colon], ref[colon + 1 :]
    return ref, None
