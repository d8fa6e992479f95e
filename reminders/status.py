"""`reminders status`: the checks of `reminder_core.status` (database, queue, breakers,
workers against the ALERT_* thresholds), printed as a table or JSON."""

from __future__ import annotations

import dataclasses

from rich.console import Console
from rich.table import Table

from reminder_core.status import Check, State, StatusReport, collect_status

__all__ = ["collect_status", "in_cell", "render"]


def in_cell(check: Check, cell: str | None) -> Check:
    """`check` as read in `cell` (with CELLS): its label starts "cell NAME: "; None: as
    it is (one cell)."""
    if cell is None:
        return check
    return dataclasses.replace(check, cell=cell, label=f"cell {cell}: {check.label}")


# --- rendering ------------------------------------------------------------------------

_STYLE = {State.OK: "green", State.ALERT: "bold red", State.INFO: "dim", State.UNKNOWN: "yellow"}


def _fmt(value: float | int | str | None, unit: str) -> str:
    if value is None:
        return "-"
    if isinstance(value, float):
        return f"{value:.1f} {unit}".strip()
    return f"{value} {unit}".strip()


def render(report: StatusReport, console: Console) -> None:
    """Print the report as a table: check, value, threshold, verdict, detail."""
    table = Table(
        title=f"reminders status at {report.checked_at.isoformat(timespec='seconds')}",
        caption=f"overall: {report.overall.upper()} (exit status {report.exit_code})",
    )
    for column in ("check", "value", "threshold", "state", "detail"):
        table.add_column(column)
    for c in report.checks:
        threshold = "-" if c.threshold is None else f"> {c.threshold:g} {c.unit}".rstrip()
        if c.name.startswith("breaker_") and c.threshold is not None:
            threshold = f"open > {c.threshold:g} s"
        if c.name.startswith("workers_") and c.threshold is not None:
            threshold = f"< {c.threshold:g}"
        table.add_row(
            c.label,
            _fmt(c.value, c.unit),
            threshold,
            f"[{_STYLE[c.state]}]{c.state.value.upper()}[/]",
            c.detail,
        )
    console.print(table)
