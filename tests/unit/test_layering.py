"""Imports point toward reminder_core; workload packages never import each other
(CONVENTIONS.md, Layout). The `reminders` CLI is the composition root and may import all.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
WORKLOADS = {"reminder_api", "coordinator", "outbox_sweeper", "sender", "webhooks"}
ALL_OURS = WORKLOADS | {"reminder_core", "reminders", "migrations"}


def imported_packages(package: str) -> dict[str, set[str]]:
    """{file: top-level packages of ours it imports} for every .py file in `package`."""
    found: dict[str, set[str]] = {}
    for path in sorted((ROOT / package).rglob("*.py")):
        names: set[str] = set()
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.Import):
                names |= {a.name.split(".")[0] for a in node.names}
            elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
                names.add(node.module.split(".")[0])
        found[str(path.relative_to(ROOT))] = names & ALL_OURS
    return found


def test_core_imports_no_workload() -> None:
    offenders = {
        f: sorted(n & (WORKLOADS | {"reminders"}))
        for f, n in imported_packages("reminder_core").items()
        if n & (WORKLOADS | {"reminders"})
    }
    assert offenders == {}


@pytest.mark.parametrize("package", sorted(p for p in WORKLOADS if (ROOT / p).is_dir()))
def test_workload_imports_only_core_and_itself(package: str) -> None:
    others = WORKLOADS - {package}
    if package == "reminder_api":
        others -= {"webhooks"}  # the API mounts the webhooks router (CONVENTIONS.md)
    offenders = {f: sorted(n & others) for f, n in imported_packages(package).items() if n & others}
    assert offenders == {}


def test_the_walker_sees_imports() -> None:
    # Guard against a walker that finds nothing: the sender certainly imports the core.
    assert any("reminder_core" in n for n in imported_packages("sender").values())
