"""`reminders` CLI (typer): api, coordinator, sweeper, sender, maintenance, dev, migrate,
token, dlq, queue, status, cells; the API's client commands (create, list, show, edit, pause,
resume, cancel, preview, login, logout: reminders/api_commands.py) and users."""

from __future__ import annotations

from typing import TYPE_CHECKING, Annotated

import typer

from coordinator.command import coordinator
from coordinator.maintenance.command import maintenance
from outbox_sweeper.command import sweeper
from reminder_api.command import Host, Port, api
from reminders import api_commands
from reminders.cells import cells
from reminders.users import users
from sender.command import sender

if TYPE_CHECKING:
    from reminder_core.dlq import Unreached
    from reminder_core.runtime import Runtime
    from reminder_core.settings import Settings

app = typer.Typer(
    help="Reminder scheduler: run a workload, or everything at once with `reminders dev`.",
    no_args_is_help=True,
    add_completion=False,
)


@app.command()
def dev(host: Host = "127.0.0.1", port: Port = 8000) -> None:
    """Run the API and every workload in one process (embedded PostgreSQL when
    DATABASE_URL is unset; state in ./.reminders)."""
    import threading

    from reminder_core.worker.signals import install_stop_handlers

    # Before the second or so of imports below: a SIGTERM then ended the process with
    # status 143 and nothing said (trial helper-55); now it is a stop during startup.
    stop = threading.Event()
    install_stop_handlers(stop)
    from reminders.dev import run_dev

    raise typer.Exit(run_dev(host, port, stop=stop))


app.command()(api)
app.command()(coordinator)
app.command()(sweeper)
app.command()(sender)
app.command()(maintenance)
api_commands.register(app)
app.add_typer(users, name="users")
app.add_typer(cells, name="cells")


dlq = typer.Typer(help="Inspect, replay or purge the dead-letter queue.", no_args_is_help=True)
app.add_typer(dlq, name="dlq")

CellOption = Annotated[
    str | None,
    typer.Option(
        "--cell",
        help="With CELLS: the cell to act on (its database and queue); default CELL, else"
        " the first cell.",
    ),
]
#: The `--cell` given to the dlq, suppressions or queue group (set by its callback).
_chosen: dict[str, str | None] = {"cell": None}


def _choose_cell(cell: CellOption = None) -> None:
    """Act on one cell of CELLS (`reminders dlq --cell b list`)."""
    _chosen["cell"] = cell


dlq.callback()(_choose_cell)


def _settings() -> Settings:
    """Settings(), with the group's `--cell` as CELL when given."""
    from reminder_core.settings import Settings

    settings = Settings()
    if _chosen["cell"] is not None:
        settings = settings.model_copy(update={"cell": _chosen["cell"]})
    return settings


def _queue_runtime(
    application_name: str = "reminders-dlq", settings: Settings | None = None
) -> Runtime:
    from reminder_core.errors import configuration_errors
    from reminder_core.logging import configure_logging
    from reminder_core.runtime import open_runtime

    settings = settings or _settings()
    configure_logging("WARNING", settings.log_format)
    with configuration_errors():
        return open_runtime(settings, application_name=application_name)


@dlq.command("list")
def dlq_list(
    limit: Annotated[int, typer.Option(min=1, help="Most rows shown.")] = 100,
    json_output: Annotated[
        bool,
        typer.Option("--json", help="Print a JSON array, one object per letter (for scripts)."),
    ] = False,
) -> None:
    """Show dead letters: occurrence, receives, when, whether recorded as failed. Ids are
    printed whole, for `replay --id` and `purge --id`."""
    import json

    from rich.console import Console

    from reminder_core.clock import utcnow
    from reminder_core.dlq import list_dead_letters
    from reminder_core.errors import InfrastructureError
    from reminders.dlq_view import letter_json, letters_table, print_whole, unseen_note

    rt = _queue_runtime()
    try:
        letters = list_dead_letters(rt.queue, limit=limit)
        try:
            counted = rt.queue.depth(now=utcnow()).dead_lettered if not letters else 0
        except InfrastructureError:
            counted = 0  # the note is a hint; the listing stands without it
    finally:
        rt.close()
    if json_output:
        typer.echo(json.dumps([letter_json(d) for d in letters], indent=2))
    else:
        print_whole(letters_table(letters), Console())
    note = unseen_note(len(letters), counted)
    if note:
        typer.echo(note, err=True)


#: `dlq replay|purge`: dead letters another reader held invisible could not be reached
#: (docs/operations.md, "Exit status"); running it again once the reader lets go finishes the job.
EXIT_NOT_REACHED = 4
#: Default of `--wait-s`: a dead-letter scan hides each letter for 30 s (the maintenance
#: workload's and the `dlq` commands'; 30 s is also SQS's default VisibilityTimeout, which
#: any other reader of the DLQ gets), plus 5 s.
DEFAULT_WAIT_S = 35.0

WaitS = Annotated[
    float,
    typer.Option(
        "--wait-s",
        min=0,
        help="Seconds to wait, at most, for dead letters another reader holds invisible"
        " (SQS), trying again every second; 0: do not wait. Still held then: exit status"
        f" {EXIT_NOT_REACHED}.",
    ),
]


def _waiting(held: int, left_s: float) -> None:
    typer.echo(
        f"waiting for {held} dead letter(s) held invisible by another reader (SQS hides a"
        f" received message for its visibility timeout); {left_s:.0f} s left (--wait-s)",
        err=True,
    )


def _exit_if_unreached(unreached: Unreached, *, by_id: bool) -> None:
    """Print what was not reached on stderr and exit: 1 for ids not in the DLQ (first),
    EXIT_NOT_REACHED for letters held by another reader."""
    if unreached.held:
        ids = f" ({', '.join(unreached.held_ids)})" if unreached.held_ids else ""
        hint = " (an id still not found then is not in the dead-letter queue)" if by_id else ""
        typer.echo(
            f"error: not reachable now (held invisible by another reader): {unreached.held}"
            f"{ids}; waited {unreached.waited_s:.0f} s; run it again once the reader lets go"
            f"{hint}",
            err=True,
        )
    if unreached.missing_ids:
        typer.echo(
            f"error: not in the dead-letter queue: {', '.join(unreached.missing_ids)}"
            " (`reminders dlq list --json` shows the ids)",
            err=True,
        )
        raise typer.Exit(1)
    if unreached.held:
        raise typer.Exit(EXIT_NOT_REACHED)


@dlq.command("replay")
def dlq_replay(
    ids: Annotated[
        list[str] | None, typer.Option("--id", help="Dead-letter id (repeatable); all if none.")
    ] = None,
    wait_s: WaitS = DEFAULT_WAIT_S,
) -> None:
    """Send dead letters back to the queue; an occurrence already sent is not sent again.

    Exit status: 0 done; 1 an id is not in the dead-letter queue;
    4 dead letters held invisible by another reader (SQS) were not reached
    within --wait-s: run it again once that reader lets go.
    """
    from reminder_core.clock import utcnow
    from reminder_core.dlq import replay

    rt = _queue_runtime()
    try:
        report = replay(
            rt.engine,
            rt.queue,
            ids or None,
            now=utcnow(),
            lease_s=rt.settings.delivery_lease_s,
            wait_s=wait_s,
            progress=_waiting,
        )
    finally:
        rt.close()
    typer.echo(
        f"redriven: {report.redriven}; already delivered (dropped, not resent): "
        f"{report.already_done}; malformed (dropped): {report.malformed}; not found: "
        f"{report.missing}; not reachable now: {report.unreached.held}"
    )
    _exit_if_unreached(report.unreached, by_id=bool(ids))


@dlq.command("purge")
def dlq_purge(
    ids: Annotated[
        list[str] | None, typer.Option("--id", help="Dead-letter id (repeatable).")
    ] = None,
    all_: Annotated[bool, typer.Option("--all", help="Purge every dead letter.")] = False,
    wait_s: WaitS = DEFAULT_WAIT_S,
) -> None:
    """Delete dead letters (their occurrences stay recorded as failed).

    Exit status: 0 done; 1 an id is not in the dead-letter queue; 2 neither --id
    nor --all; 4 dead letters held invisible by another reader (SQS) were not
    reached within --wait-s: run it again once that reader lets go.
    """
    from reminder_core.clock import utcnow
    from reminder_core.dlq import purge

    if not ids and not all_:
        typer.echo("error: give --id ID (repeatable) or --all", err=True)
        raise typer.Exit(2)
    rt = _queue_runtime()
    try:
        report = purge(
            rt.queue, None if all_ else ids, now=utcnow(), wait_s=wait_s, progress=_waiting
        )
    finally:
        rt.close()
    typer.echo(f"purged: {report.purged}")
    _exit_if_unreached(report.unreached, by_id=not all_)


suppressions_cli = typer.Typer(
    help="The suppression list: addresses not mailed after a hard bounce or complaint.",
    no_args_is_help=True,
)
app.add_typer(suppressions_cli, name="suppressions")
suppressions_cli.callback()(_choose_cell)


@suppressions_cli.command("list")
def suppressions_list(
    limit: Annotated[int, typer.Option(min=1, help="Most rows shown.")] = 100,
) -> None:
    """Show suppressed addresses, newest first: reason, provider and event, when, and how
    many reminders each holds paused."""
    from rich.console import Console
    from rich.table import Table

    from reminder_core.suppression import list_suppressions

    rt = _queue_runtime()
    try:
        with rt.engine.connect() as conn:
            entries = list_suppressions(conn, limit=limit)
    finally:
        rt.close()
    table = Table(title=f"suppression list ({len(entries)})")
    table.add_column("email", no_wrap=True)  # an address must be copyable whole
    for column in ("reason", "provider", "event", "since", "paused", "detail"):
        table.add_column(column)
    for e in entries:
        table.add_row(
            e.email,
            e.reason.value,
            e.provider or "",
            e.source_event_id or "",
            e.created_at.isoformat(timespec="seconds"),
            str(e.paused),
            e.detail or "",
        )
    Console().print(table)


@suppressions_cli.command("remove")
def suppressions_remove(
    email: Annotated[str, typer.Argument(help="The address (compared case-folded).")],
) -> None:
    """Take EMAIL off the suppression list and resume the reminders it paused (a recurring
    one at its first occurrence from now). Exit status 1 when EMAIL was not listed and
    no reminder waited on it."""
    from reminder_core.clock import utcnow
    from reminder_core.scheduling import ScheduleConfig
    from reminder_core.suppression import listed_form, remove_suppression

    if not email.strip():
        typer.echo("error: EMAIL must not be empty", err=True)
        raise typer.Exit(2)
    rt = _queue_runtime()
    try:
        result = remove_suppression(
            rt.engine,
            email,
            rt.profiles,
            now=utcnow(),
            config=ScheduleConfig.from_settings(rt.settings),
        )
    finally:
        rt.close()
    typer.echo(
        f"{'removed' if result.removed else 'not on the suppression list'}:"
        f" {listed_form(email) or email.strip()};"
        f" reminders resumed: {result.resumed}"
    )
    if result.left_paused:
        typer.echo(
            f"{result.left_paused} reminders could not be resumed now (profile unavailable);"
            " the maintenance workload resumes them"
        )
    if not result.removed and not result.resumed:
        raise typer.Exit(1)


queue_cli = typer.Typer(help="Provision the queue (SQS).", no_args_is_help=True)
app.add_typer(queue_cli, name="queue")
queue_cli.callback()(_choose_cell)


@queue_cli.command("create")
def queue_create() -> None:
    """Create the SQS queue of QUEUE_URL and its dead-letter queue `<name>-dlq`, with
    VisibilityTimeout = VISIBILITY_TIMEOUT_S and a RedrivePolicy of maxReceiveCount =
    MAX_RECEIVE_COUNT. Idempotent: an existing queue gets the current settings. Prints
    both URLs."""
    from reminder_core.boundary import EXIT_UNAVAILABLE
    from reminder_core.cells import process_settings
    from reminder_core.errors import InfrastructureError, configuration_errors
    from reminder_core.queue.sqs import ensure_queues, sqs_client, sqs_target

    with configuration_errors():
        settings = process_settings(_settings(), worker=False)  # the cell's QUEUE_URL
    if settings.queue_url.startswith(("postgres://", "postgresql://")):
        typer.echo(
            f"QUEUE_URL {settings.queue_url} is the PostgreSQL table queue: it comes with"
            " `reminders migrate`, nothing to create"
        )
        return
    try:
        target = sqs_target(
            settings.queue_url, endpoint_url=settings.sqs_endpoint_url, region=settings.aws_region
        )
        if target is None:
            raise ValueError(f"QUEUE_URL {settings.queue_url!r} names no SQS queue")
        queue_url, dlq_url = ensure_queues(
            sqs_client(target),
            target.name,
            visibility_timeout_s=settings.visibility_timeout_s,
            max_receive_count=settings.max_receive_count,
        )
    except ValueError as exc:
        typer.echo(f"error: {exc}", err=True)
        raise typer.Exit(2) from None
    except InfrastructureError as exc:
        typer.echo(f"error: {exc}", err=True)
        raise typer.Exit(EXIT_UNAVAILABLE) from None
    typer.echo(f"queue: {queue_url}")
    typer.echo(f"dead-letter queue: {dlq_url}")


@app.command()
def status(
    json_output: Annotated[
        bool, typer.Option("--json", help="Print the report as JSON (for scripts).")
    ] = False,
    cell: CellOption = None,
) -> None:
    """Lags, backlog, outbox, queue and DLQ depth, breakers and last-hour failures, each
    against its threshold (ALERT_* settings), read from the database and the queue. With
    CELLS: every cell's, each check named for its cell (`--cell NAME`: that one only).

    Exit status: 0 everything within its threshold; 1 something over its threshold
    (ALERT); 2 nothing over, but something could not be read (UNKNOWN).
    """
    import json

    from rich.console import Console

    from reminder_core.cells import cells_of
    from reminder_core.clock import utcnow
    from reminder_core.errors import configuration_errors
    from reminder_core.status import StatusReport
    from reminders.status import collect_status, in_cell, render

    _chosen["cell"] = cell
    settings = _settings()
    with configuration_errors():
        names = (
            [c.name for c in cells_of(settings)]
            if settings.cells and settings.cell is None
            else [None]
        )
    now = utcnow()
    checks = []
    for name in names:
        one = settings if name is None else settings.model_copy(update={"cell": name})
        rt = _queue_runtime("reminders-status", one)
        try:
            part = collect_status(rt.engine, rt.queue, rt.settings, now=now)
        finally:
            rt.close()
        label = one.cell if one.cells else None  # one cell: unlabelled, as before
        checks += [in_cell(c, label) for c in part.checks]
    report = StatusReport(now, checks)
    if json_output:
        typer.echo(json.dumps(report.to_json(), indent=2))
    else:
        render(report, Console())
    raise typer.Exit(report.exit_code)


#: `reminders migrate` stopped by a signal before every database was migrated (128 +
#: SIGTERM, the status the signal's default action gives).
EXIT_STOPPED = 143


@app.command()
def migrate() -> None:
    """Apply database migrations (Alembic) and exit: every cell's database with CELLS
    (and the directory's, when DIRECTORY_DATABASE_URL is another), one after another."""
    import threading

    from reminder_core.worker.signals import install_stop_handlers

    # First (a signal held since the entry point's first line is taken over): a SIGTERM
    # while the embedded PostgreSQL started killed the process past pgserver's exit hook
    # and left the server running (trial helper-57). A stop lets the start or the
    # migration under way finish, then exits with EXIT_STOPPED; a second one is a hard
    # stop (130: PostgreSQL rolls the migration's transaction back).
    stop = threading.Event()
    install_stop_handlers(stop)
    from reminder_core.cells import cells_of, directory_url
    from reminder_core.db.embedded import resolve_database_url
    from reminder_core.db.migrate import upgrade
    from reminder_core.errors import configuration_errors
    from reminder_core.logging import configure_logging
    from reminder_core.settings import Settings

    def stopped() -> None:
        if stop.is_set():
            typer.echo("stopped by a signal: not every database was migrated", err=True)
            raise typer.Exit(EXIT_STOPPED)

    stopped()
    settings = Settings()
    configure_logging(settings.log_level, settings.log_format)
    with configuration_errors():
        cells = cells_of(settings)
        urls = [c.database_url for c in cells]
        if settings.cells and directory_url(settings) not in urls:
            urls.append(directory_url(settings))
        resolved = []
        for u in urls:
            stopped()
            resolved.append(resolve_database_url(u, settings.state_dir))
    for url in resolved:
        stopped()
        upgrade(url)
    typer.echo("database is at the newest migration")


@app.command()
def token(
    user: Annotated[str, typer.Option("--user", help="User id (the token's `sub`).")],
    ttl: Annotated[int, typer.Option(help="Lifetime in seconds.", min=60)] = 30 * 86400,
    admin: Annotated[
        bool,
        typer.Option(
            "--admin",
            help="Add the reminders:admin scope: the operators' API (/v1/admin) and the"
            " console's Operations page.",
        ),
    ] = False,
) -> None:
    """Print a bearer token for USER (development; uses JWT_SECRET or ./.reminders/jwt_secret).

    A USER without a profile in the profiles file (`reminders users list`) gets the token
    and a warning on stderr: the API refuses every create with it (422) until
    `reminders users add USER ...`. With --admin the token also opens /v1/admin."""
    from reminder_core.errors import ConfigurationError
    from reminder_core.settings import Settings
    from reminder_core.tokens import ADMIN_SCOPE, MAX_SUBJECT_LENGTH, mint_token
    from reminders.users import warn_if_no_profile

    if not user or len(user) > MAX_SUBJECT_LENGTH or "\x00" in user:
        typer.echo(f"error: --user must be 1 to {MAX_SUBJECT_LENGTH} characters", err=True)
        raise typer.Exit(2)
    settings = Settings()
    try:
        typer.echo(mint_token(settings, user, ttl_s=ttl, scopes=[ADMIN_SCOPE] if admin else []))
    except ConfigurationError as exc:
        typer.echo(f"error: {exc}", err=True)
        raise typer.Exit(2) from None
    if not admin:  # an operator need not be a user with reminders
        warn_if_no_profile(settings, user)


def main(
    argv: list[str] | None = None, *, command: str | None = None, prog_name: str | None = None
) -> None:
    """Entry point of `reminders` and, with `command` (e.g. "sender"), of `python -m
    <package>`: that one subcommand, with its own --help. A bad setting or an unreachable
    database at start ends with `error: ...` on stderr and status 2 or 3
    (reminder_core/boundary.py); any other exception is a bug and keeps its traceback.

    Args:
        argv: the arguments (default: sys.argv[1:]).
        prog_name: the name --help shows (default: from sys.argv[0]).
    """
    from reminder_core.boundary import run_guarded

    if command is None:
        run_guarded(lambda: app(args=argv, prog_name=prog_name))
    else:
        single = typer.main.get_group(app).commands[command]
        run_guarded(lambda: single.main(args=argv, prog_name=prog_name))
