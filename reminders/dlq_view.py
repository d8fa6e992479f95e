"""What `reminders dlq list` prints: a table whose ids are never cut, or JSON for scripts."""

from __future__ import annotations

from datetime import datetime

from rich.console import Console
from rich.table import Table

from reminder_core.queue import DeadLetter

ID_COLUMNS = ("id", "reminder_id")


def letter_json(letter: DeadLetter) -> dict[str, object]:
    """One dead letter as `reminders dlq list --json` prints it: `id` (what `replay --id`
    and `purge --id` take), `reminder_id`, `run_time_utc` (as queued, ISO 8601),
    `receive_count`, `dead_lettered_at` and `recorded_at` (ISO 8601 UTC, or null: unknown,
    not yet recorded)."""
    return {
        "id": letter.message_id,
        "reminder_id": _text(letter.body.get("reminder_id")),
        "run_time_utc": _text(letter.body.get("run_time_utc")),
        "receive_count": letter.receive_count,
        "dead_lettered_at": _instant(letter.dead_lettered_at),
        "recorded_at": _instant(letter.recorded_at),
    }


def letters_table(letters: list[DeadLetter]) -> Table:
    """The dead letters as a table; the id columns never wrap (an id must be copyable
    whole): print it with `print_whole`."""
    table = Table(title=f"dead-letter queue ({len(letters)})")
    for column in ("id", "reminder_id", "run_time_utc", "receives", "dead-lettered", "recorded"):
        table.add_column(column, no_wrap=column in ID_COLUMNS)
    for d in letters:
        row = letter_json(d)
        table.add_row(
            str(row["id"]),
            str(row["reminder_id"] or ""),
            str(row["run_time_utc"] or ""),
            str(d.receive_count),
            d.dead_lettered_at.isoformat(timespec="seconds") if d.dead_lettered_at else "",
            "yes" if d.recorded_at else "not yet",
        )
    return table


def print_whole(table: Table, console: Console) -> None:
    """Print `table` at its natural width when the console is narrower (80 columns
    without a terminal): a long line wraps in the terminal, but no id is cut short."""
    natural = console.measure(table, options=console.options.update_width(10_000)).maximum
    if natural > console.width:
        console = Console(width=natural, file=console.file, no_color=console.no_color)
    console.print(table)


def unseen_note(seen: int, dead_lettered: int) -> str | None:
    """A warning when a scan saw no dead letter but the queue counts some (SQS: another
    reader, such as the maintenance workload, hides the letters it scans for 30 s, and the
    approximate counts lag); None otherwise."""
    if seen or dead_lettered <= 0:
        return None
    return (
        f"note: the dead-letter queue counts about {dead_lettered} message(s), but this scan"
        " saw none: another reader (the maintenance workload, another `reminders dlq`"
        " command) hides the letters it scans for 30 s, and SQS's counts lag by up to a"
        " minute; run it again shortly"
    )


def _text(value: object) -> str | None:
    return None if value is None else str(value)


def _instant(value: datetime | None) -> str | None:
    return None if value is None else value.isoformat()
