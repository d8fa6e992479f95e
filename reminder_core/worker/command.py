"""`python -m <workload>`: one workload's command, with its --help, run as the `reminders`
CLI runs it (expected failures at start end with `error: ...` and a documented exit
status: reminder_core.boundary)."""

from __future__ import annotations

from collections.abc import Callable

import typer

from reminder_core.boundary import run_guarded


def run_command(
    command: Callable[..., None], *, prog_name: str, argv: list[str] | None = None
) -> None:
    """Parse `argv` (default: sys.argv[1:]) for `command` (a typer command function: its
    docstring is the help, its parameters the options) and run it.

    Raises:
        SystemExit: always, with the command's exit status (0 after --help; 2 for a bad
            option or setting, 3 for an unreachable dependency).
    """
    app = typer.Typer(add_completion=False)
    app.command()(command)
    click_command = typer.main.get_command(app)
    run_guarded(lambda: click_command.main(args=argv, prog_name=prog_name))
