"""The docs list every setting (docs/configuration.md, "Environment variables") and every
command (docs/operations.md, "Running the workloads"), and nothing that is not one
(new-user trial: seven settings and five commands were missing from the README that held
them then)."""

from __future__ import annotations

import re
from pathlib import Path

import typer
from typer.core import TyperGroup

from reminder_core.settings import Settings
from reminders.cli import app

DOCS = Path(__file__).resolve().parents[2] / "docs"
CONFIGURATION = DOCS / "configuration.md"
OPERATIONS = DOCS / "operations.md"


def section(title: str) -> str:
    """The text of the section `title` of docs/configuration.md (a `## ` heading), up to
    the next heading of any level."""
    text = CONFIGURATION.read_text(encoding="utf-8")
    start = text.index(f"\n## {title}\n")
    end = text.index("\n#", start + 1)
    return text[start:end]


def table_variables() -> list[str]:
    """The variables named in the first column of the configuration table (a row may
    name two: "`JWT_ISSUER` / `JWT_AUDIENCE`")."""
    names: list[str] = []
    for line in section("Environment variables").splitlines():
        if line.startswith("| `"):
            first_cell = line.split("|")[1]
            names += re.findall(r"`([A-Z][A-Z0-9_]*)`", first_cell)
    return names


def test_every_setting_is_in_the_configuration_table() -> None:
    documented = set(table_variables())
    missing = sorted(
        name.upper() for name in Settings.model_fields if name.upper() not in documented
    )
    assert missing == []


def test_every_variable_in_the_table_is_a_setting() -> None:
    settings = {name.upper() for name in Settings.model_fields}
    assert sorted(set(table_variables()) - settings) == []


def test_no_setting_has_two_rows() -> None:
    names = table_variables()
    assert sorted({n for n in names if names.count(n) > 1}) == []


def command_paths(group: TyperGroup, prefix: str = "") -> list[str]:
    """Every runnable command as typed after `reminders`: "api", "dlq list", ..."""
    paths: list[str] = []
    for name, command in group.commands.items():
        if isinstance(command, TyperGroup):
            paths += command_paths(command, f"{prefix}{name} ")
        else:
            paths.append(prefix + name)
    return paths


def test_every_command_is_listed() -> None:
    paths = command_paths(typer.main.get_group(app))
    text = OPERATIONS.read_text(encoding="utf-8")
    missing = [path for path in paths if not re.search(rf"^reminders {path}\b", text, re.M)]
    assert missing == []
    assert "dlq list" in paths  # the walker sees the groups' commands
