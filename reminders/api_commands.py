"""`reminders create|list|show|edit|pause|resume|cancel|preview|login|logout`: the REST
API's reminders from the command line, through `reminders.client` (docs/cli.md).

httpx, pydantic and rich are imported inside the commands: `reminders --help` stays fast.
"""

from __future__ import annotations

import inspect
import json
import os
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Literal
from urllib.parse import urlsplit

import typer

if TYPE_CHECKING:
    from reminders.client import OccurrenceList, Reminder, ReminderClient, Schedule

#: Exit statuses of these commands (docs/cli.md, "Exit status"): the API refused the
#: request or failed (any 4xx/5xx, e.g. 401 a bad token, 404, 409, 412, 422, 503).
EXIT_REFUSED = 1
#: A bad command line, or no token (typer's own usage errors are 2 too).
EXIT_USAGE = 2
#: No answer from the API (connection refused, timeout): is it running at --api-url?
EXIT_UNREACHABLE = 3

DEFAULT_API_URL = "http://127.0.0.1:8000"
TOKEN_ENV = "REMINDERS_TOKEN"
API_URL_ENV = "REMINDERS_API_URL"

EXIT_HELP = (
    "Exit status: 0 done; 1 the API refused the request or failed (its problem's title,"
    " detail and field errors on stderr); 2 a bad command line or no token; 3 the API"
    " did not answer."
)

ApiUrl = Annotated[
    str | None,
    typer.Option(
        "--api-url",
        envvar=API_URL_ENV,
        show_envvar=True,
        help=f"API root. Default: the one saved by `reminders login`, else {DEFAULT_API_URL}.",
    ),
]
JsonOut = Annotated[
    bool, typer.Option("--json", help="Print the API's JSON (for scripts) instead of text.")
]


def _reminder_id(value: str) -> str:
    """A reminder id as the API gives it (a UUID), in its canonical form; anything else is
    a usage error (status 2) before any request: an id is put in the request's path, and
    `../calendar-feed` made `cancel` revoke the calendar feed (trial helper-57)."""
    import uuid  # here: `reminders --help` stays fast

    try:
        return str(uuid.UUID(value))
    except ValueError:
        raise typer.BadParameter(f"{value!r} is not a reminder id (a UUID)") from None


ReminderId = Annotated[
    str,
    typer.Argument(help="The reminder's id (`reminders list`).", callback=_reminder_id),
]
IfVersion = Annotated[
    int | None,
    typer.Option(
        "--if-version",
        help="Only if the reminder is still at this version (`version`, its ETag; sent as"
        " If-Match); changed since: 412, exit 1.",
    ),
]
TimeZone = Annotated[
    str | None, typer.Option("--tz", help="IANA zone, e.g. Europe/Paris. Default: the profile's.")
]
Rrule = Annotated[
    str | None, typer.Option("--rrule", help="RFC 5545 rule, e.g. FREQ=WEEKLY;BYDAY=MO,WE.")
]
Exdates = Annotated[
    list[str] | None,
    typer.Option("--exdate", help="Wall-clock time of the rule to leave out (repeatable)."),
]
#: `--dst` values: each names the member of the API's `dst` object it sets.
DST_VALUES = {
    "shift": "nonexistent",
    "skip": "nonexistent",
    "first": "ambiguous",
    "last": "ambiguous",
    "both": "ambiguous",
}
DstOption = Annotated[
    list[str] | None,
    typer.Option(
        "--dst",
        help="DST policy (repeatable): shift or skip a time DST skips; first, last or both"
        " for a time it repeats. Default: shift, first.",
    ),
]
Misfire = Annotated[
    str | None, typer.Option("--misfire", help="Occurrences found late: latest, skip or all.")
]
MaxLateness = Annotated[
    int | None, typer.Option("--max-lateness-s", help="Seconds late still sent (misfire skip).")
]
Limit = Annotated[int, typer.Option("--limit", min=1, max=100, help="How many occurrences.")]
START_HELP = "Wall-clock start YYYY-MM-DDTHH:MM[:SS] (a date YYYY-MM-DD with --all-day)."
AllDay = Annotated[bool, typer.Option("--all-day", help="Fires at the all-day time (09:00).")]


# --------------------------------------------------------------------------- config file


def config_path() -> Path:
    """Where `reminders login` keeps the token: $XDG_CONFIG_HOME/reminders/credentials.json
    (default ~/.config; XDG Base Directory Specification)."""
    base = os.environ.get("XDG_CONFIG_HOME") or str(Path.home() / ".config")
    return Path(base) / "reminders" / "credentials.json"


def _saved() -> dict[str, str]:
    """The saved {"token": ..., "api_url": ...}; {} when there is none or it is unreadable."""
    try:
        data = json.loads(config_path().read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return {}
    return {k: v for k, v in data.items() if isinstance(v, str)} if isinstance(data, dict) else {}


def _save(values: dict[str, str]) -> Path:
    """Write `values` to config_path() atomically, readable by this user only (0600, in a
    0700 directory). Returns the path."""
    path = config_path()
    path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w", encoding="utf-8") as fh:
        fh.write(json.dumps(values, indent=2) + "\n")
    os.chmod(tmp, 0o600)  # in case it existed with another mode
    os.replace(tmp, path)
    return path


def fail(message: str, status: int) -> typer.Exit:
    """Print `error: message` on stderr; return the Exit(status) for the caller to raise."""
    typer.echo(f"error: {message}", err=True)
    return typer.Exit(status)


# --------------------------------------------------------------------------- the client


@contextmanager
def api(api_url: str | None, token: str | None = None) -> Iterator[ReminderClient]:
    """A client for `api_url` (else the saved URL, else DEFAULT_API_URL) with `token`,
    else the token of REMINDERS_TOKEN, else the saved one; turns the client's errors into
    an `error:` block on stderr and the exit statuses above.

    Raises:
        typer.Exit: EXIT_USAGE no token; EXIT_REFUSED an ApiError (or an unexpected body);
            EXIT_UNREACHABLE no answer.
    """
    from reminders.client import (
        ApiError,
        ApiUnreachable,
        ClientError,
        InvalidApiUrl,
        ReminderClient,
    )

    saved = _saved()
    token = token or os.environ.get(TOKEN_ENV) or saved.get("token")
    if not token:
        raise fail(
            f"no token: set {TOKEN_ENV} or run `reminders login` (a development token:"
            " `reminders token --user ID`)",
            EXIT_USAGE,
        )
    url = api_url or saved.get("api_url") or DEFAULT_API_URL
    try:  # `http://[::1` and a port that is no number raise (trial helper-57: a traceback)
        parts = urlsplit(url)
        usable = parts.scheme in ("http", "https") and bool(parts.hostname)
        parts.port  # noqa: B018 (its check: ValueError)
    except ValueError:
        usable = False
    if not usable:
        raise fail(f"--api-url {url!r} is not an http(s) URL, e.g. {DEFAULT_API_URL}", EXIT_USAGE)
    import httpx

    try:
        parts.hostname.encode("idna")  # type: ignore[union-attr]  # an empty or long label
        client = ReminderClient(url, token.strip())
    except (ValueError, httpx.InvalidURL) as exc:  # httpx's checks; UnicodeError is a ValueError
        raise fail(f"--api-url {url!r} cannot be used: {exc}", EXIT_USAGE) from None
    try:
        yield client
    except ApiError as exc:
        # A 422's detail repeats its field errors, printed one a line below.
        repeated = all(f"{e.field}: {e.message}" in exc.detail for e in exc.errors)
        detail = f": {exc.detail}" if exc.detail and not (exc.errors and repeated) else ""
        typer.echo(f"error: {exc.status} {exc.title}{detail}", err=True)
        for fe in exc.errors:
            typer.echo(f"  {fe.field}: {fe.message}", err=True)
        if exc.status == 401:
            typer.echo(f"  (set {TOKEN_ENV} or run `reminders login` with a valid token)", err=True)
        raise typer.Exit(EXIT_REFUSED) from None
    except ApiUnreachable as exc:
        raise fail(str(exc), EXIT_UNREACHABLE) from None
    except InvalidApiUrl as exc:
        raise fail(str(exc), EXIT_USAGE) from None
    except ClientError as exc:
        raise fail(str(exc), EXIT_REFUSED) from None
    finally:
        client.close()


def dst_policy(values: list[str] | None) -> dict[str, str]:
    """`--dst` values as the members of the API's `dst` object ({} when none given).

    Raises:
        typer.Exit: EXIT_USAGE an unknown value, or two for the same member.
    """
    policy: dict[str, str] = {}
    for value in values or ():
        member = DST_VALUES.get(value)
        if member is None:
            raise fail(f"--dst {value!r}: one of {', '.join(DST_VALUES)}", EXIT_USAGE)
        if member in policy:
            raise fail(f"--dst {policy[member]} and {value}: one {member} policy", EXIT_USAGE)
        policy[member] = value
    return policy


def _schedule(
    start: str,
    timezone: str | None,
    rrule: str | None,
    exdates: list[str] | None,
    all_day: bool,
    dst: list[str] | None,
) -> Schedule:
    from reminders.client import Schedule

    policy = dst_policy(dst)
    return Schedule(
        start_local=start,
        timezone=timezone,
        rrule=rrule,
        exdates=tuple(exdates or ()),
        all_day=all_day,
        dst_nonexistent=policy.get("nonexistent"),
        dst_ambiguous=policy.get("ambiguous"),
    )


# --------------------------------------------------------------------------- output


def _when(value: object) -> str:
    from datetime import datetime

    return value.isoformat().replace("+00:00", "Z") if isinstance(value, datetime) else "-"


def _print_reminder(r: Reminder, json_output: bool) -> None:
    """One reminder: the API's JSON object, or one `name: value` line per field."""
    if json_output:
        typer.echo(r.model_dump_json(indent=2))
        return
    schedule = r.start_local + (" (all day)" if r.all_day else "")
    lines = [
        ("id", str(r.id)),
        ("title", r.title),
        ("status", r.status + (f" ({r.paused_reason})" if r.paused_reason else "")),
        ("version", str(r.version)),
        ("start", schedule),
        ("timezone", r.timezone or "(the profile's)"),
        ("rule", r.rrule or "one-time"),
        ("exdates", ", ".join(r.exdates) or "-"),
        ("next run", _when(r.next_run_utc)),
        ("dst", f"nonexistent={r.dst.nonexistent} ambiguous={r.dst.ambiguous}"),
        ("misfire", f"{r.misfire.policy} (max lateness {r.misfire.max_lateness_s} s)"),
    ]
    if r.body:
        lines.append(("body", r.body))
    if r.last_error:
        lines.append(("last error", r.last_error))
    for name, value in lines:
        typer.echo(f"{name + ':':<10} {value}")


def _print_reminders(items: list[Reminder], next_cursor: str | None, json_output: bool) -> None:
    if json_output:
        typer.echo(
            json.dumps(
                {
                    "items": [r.model_dump(mode="json") for r in items],
                    "next_cursor": next_cursor,
                },
                indent=2,
            )
        )
        return
    from rich.console import Console
    from rich.table import Table

    from reminders.dlq_view import print_whole

    table = Table(title=f"reminders ({len(items)})")
    table.add_column("id", no_wrap=True)  # an id must be copyable whole
    for column in ("title", "status", "next run (UTC)", "schedule"):
        table.add_column(column)
    for r in items:
        zone = r.timezone or "profile zone"
        table.add_row(
            str(r.id),
            r.title,
            r.status,
            _when(r.next_run_utc),
            f"{r.start_local} {zone}" + (f", {r.rrule}" if r.rrule else ""),
        )
    print_whole(table, Console())
    if next_cursor:
        typer.echo(f"more: --cursor {next_cursor} (or --all)", err=True)


def _print_occurrences(occurrences: OccurrenceList, json_output: bool) -> None:
    if json_output:
        typer.echo(occurrences.model_dump_json(indent=2))
        return
    from rich.console import Console
    from rich.table import Table

    from reminders.dlq_view import print_whole

    table = Table(title=f"occurrences in {occurrences.timezone} ({len(occurrences.items)})")
    for column in ("UTC", "local", "note"):
        table.add_column(column, no_wrap=True)
    for o in occurrences.items:
        note = "skipped (DST)" if o.skipped else f"shifted from {o.rule_local}" if o.shifted else ""
        table.add_row(_when(o.run_time_utc), o.local, note)
    print_whole(table, Console())


# --------------------------------------------------------------------------- commands


def create(
    title: Annotated[str, typer.Argument(help="The email's subject line.")],
    start: Annotated[str, typer.Option("--at", help=START_HELP)],
    body: Annotated[str | None, typer.Option("--body", help="The email's text.")] = None,
    timezone: TimeZone = None,
    rrule: Rrule = None,
    exdate: Exdates = None,
    all_day: AllDay = False,
    dst: DstOption = None,
    misfire: Misfire = None,
    max_lateness_s: MaxLateness = None,
    idempotency_key: Annotated[
        str | None,
        typer.Option(
            "--idempotency-key",
            help="Sent as Idempotency-Key: running the same command again returns the"
            " reminder created first instead of a second one.",
        ),
    ] = None,
    api_url: ApiUrl = None,
    json_output: JsonOut = False,
) -> None:
    """Create a one-time or recurring reminder (POST /v1/reminders)."""
    schedule = _schedule(start, timezone, rrule, exdate, all_day, dst)
    with api(api_url) as client:
        created = client.create(
            title,
            schedule,
            body=body,
            misfire_policy=misfire,
            max_lateness_s=max_lateness_s,
            idempotency_key=idempotency_key,
        )
    if created.replayed:
        typer.echo("note: created earlier with this idempotency key (replayed)", err=True)
    _print_reminder(created.reminder, json_output)


def list_(
    status: Annotated[
        list[str] | None,
        typer.Option(
            "--status",
            help="Only this status (repeatable): pending, claimed, paused, completed,"
            " cancelled, failed.",
        ),
    ] = None,
    limit: Annotated[int, typer.Option("--limit", min=1, max=100, help="Page size.")] = 50,
    cursor: Annotated[
        str | None, typer.Option("--cursor", help="Next page: the previous `next_cursor`.")
    ] = None,
    all_pages: Annotated[
        bool, typer.Option("--all", help="Every page, one after another.")
    ] = False,
    api_url: ApiUrl = None,
    json_output: JsonOut = False,
) -> None:
    """List your reminders, newest first (GET /v1/reminders). The API has no text search:
    filter by --status."""
    if all_pages and cursor is not None:
        raise fail("--cursor and --all exclude each other (--all reads every page)", EXIT_USAGE)
    with api(api_url) as client:
        if all_pages:
            items, next_cursor = list(client.iter_all(status=status or ())), None
        else:
            page = client.list(status=status or (), limit=limit, cursor=cursor)
            items, next_cursor = page.items, page.next_cursor
    _print_reminders(items, next_cursor, json_output)


def show(reminder_id: ReminderId, api_url: ApiUrl = None, json_output: JsonOut = False) -> None:
    """Show one reminder (GET /v1/reminders/{id}); another user's id is a 404."""
    with api(api_url) as client:
        reminder = client.get(reminder_id)
    _print_reminder(reminder, json_output)


def edit(
    reminder_id: ReminderId,
    title: Annotated[str | None, typer.Option("--title", help="New title.")] = None,
    body: Annotated[str | None, typer.Option("--body", help="New text.")] = None,
    clear_body: Annotated[bool, typer.Option("--clear-body", help="No text.")] = False,
    start: Annotated[str | None, typer.Option("--at", help=START_HELP)] = None,
    timezone: TimeZone = None,
    profile_zone: Annotated[
        bool, typer.Option("--profile-tz", help="Follow the profile's zone again.")
    ] = False,
    rrule: Rrule = None,
    one_time: Annotated[bool, typer.Option("--one-time", help="Drop the rule.")] = False,
    exdate: Exdates = None,
    clear_exdates: Annotated[bool, typer.Option("--clear-exdates", help="No exclusions.")] = False,
    all_day_flag: Annotated[
        bool, typer.Option("--all-day", help="Make it all-day (fires at the all-day time).")
    ] = False,
    timed: Annotated[bool, typer.Option("--timed", help="Make it timed again.")] = False,
    dst: DstOption = None,
    misfire: Misfire = None,
    max_lateness_s: MaxLateness = None,
    if_version: IfVersion = None,
    api_url: ApiUrl = None,
    json_output: JsonOut = False,
) -> None:
    """Change the fields given, the others stay (PATCH /v1/reminders/{id}). A schedule
    change recomputes the next run from now."""
    from reminders.client import UNSET

    policy = dst_policy(dst)
    for flag, value, clear in (
        ("--body/--clear-body", body, clear_body),
        ("--tz/--profile-tz", timezone, profile_zone),
        ("--rrule/--one-time", rrule, one_time),
        ("--exdate/--clear-exdates", exdate, clear_exdates),
        ("--all-day/--timed", True if all_day_flag else None, timed),
    ):
        if value is not None and clear:
            raise fail(f"give one of {flag}", EXIT_USAGE)
    all_day = True if all_day_flag else False if timed else None
    changes = (title, body, start, timezone, rrule, exdate, all_day, dst, misfire, max_lateness_s)
    if all(v is None for v in changes) and not (clear_body or profile_zone or one_time
                                                 or clear_exdates):  # fmt: skip
        # An empty PATCH changes nothing and exited 0 (trial helper-53): say so.
        raise fail("nothing to change: give at least one option (see --help)", EXIT_USAGE)
    with api(api_url) as client:
        reminder = client.update(
            reminder_id,
            if_match=if_version,
            title=UNSET if title is None else title,
            body=None if clear_body else UNSET if body is None else body,
            start_local=UNSET if start is None else start,
            timezone=None if profile_zone else UNSET if timezone is None else timezone,
            rrule=None if one_time else UNSET if rrule is None else rrule,
            exdates=() if clear_exdates else UNSET if exdate is None else tuple(exdate),
            all_day=UNSET if all_day is None else all_day,
            dst_nonexistent=policy.get("nonexistent"),
            dst_ambiguous=policy.get("ambiguous"),
            misfire_policy=misfire,
            max_lateness_s=max_lateness_s,
        )
    _print_reminder(reminder, json_output)


def _transition(action: Literal["pause", "resume", "cancel"], doc: str) -> Callable[..., None]:
    """The `reminders ACTION ID` command: `ReminderClient.<action>`, printed."""

    def command(
        reminder_id: ReminderId,
        if_version: IfVersion = None,
        api_url: ApiUrl = None,
        json_output: JsonOut = False,
    ) -> None:
        with api(api_url) as client:
            reminder: Reminder = getattr(client, action)(reminder_id, if_match=if_version)
        _print_reminder(reminder, json_output)

    command.__doc__ = doc
    command.__name__ = action
    return command


pause = _transition("pause", "Stop sending until resumed (POST /v1/reminders/{id}/pause).")
resume = _transition(
    "resume",
    "Send again (POST /v1/reminders/{id}/resume): a recurring reminder continues with its"
    " first occurrence from now.",
)
cancel = _transition(
    "cancel",
    "Cancel: nothing more is sent (DELETE /v1/reminders/{id}); cancelling twice is fine.",
)


def preview(
    reminder_id: Annotated[
        str | None,
        typer.Argument(
            help="A saved reminder; omitted: the schedule of --at ...",
            callback=lambda value: None if value is None else _reminder_id(value),
        ),
    ] = None,
    start: Annotated[str | None, typer.Option("--at", help=START_HELP)] = None,
    timezone: TimeZone = None,
    rrule: Rrule = None,
    exdate: Exdates = None,
    all_day: AllDay = False,
    dst: DstOption = None,
    from_: Annotated[
        str | None,
        typer.Option("--from", help="From this instant, e.g. 2027-03-01T00:00:00Z (default now)."),
    ] = None,
    limit: Limit = 10,
    api_url: ApiUrl = None,
    json_output: JsonOut = False,
) -> None:
    """The next occurrences of a saved reminder (GET /v1/reminders/{id}/occurrences), or
    of a schedule that is not saved (--at ..., POST /v1/occurrences:preview)."""
    if reminder_id is not None and start is not None:
        raise fail("give a reminder id or --at (a schedule to preview), not both", EXIT_USAGE)
    if reminder_id is None and start is None:
        raise fail("give a reminder id, or --at (a schedule to preview)", EXIT_USAGE)
    if reminder_id is not None and from_ is not None:
        raise fail("--from previews an unsaved schedule (--at) only", EXIT_USAGE)
    schedule = _schedule(start, timezone, rrule, exdate, all_day, dst) if start else None
    with api(api_url) as client:
        if schedule is None:
            occurrences = client.occurrences(str(reminder_id), limit=limit)
        else:
            occurrences = client.preview(schedule, limit=limit, from_utc=from_)
    _print_occurrences(occurrences, json_output)


def login(
    api_url: ApiUrl = None,
    verify: Annotated[
        bool, typer.Option("--verify/--no-verify", help="Check the token with the API first.")
    ] = True,
) -> None:
    """Save a bearer token (read from stdin, or asked for without echo) in
    $XDG_CONFIG_HOME/reminders/credentials.json (mode 0600) for the other commands;
    REMINDERS_TOKEN, when set, still wins. A refused token is not saved (exit 1)."""
    import sys

    if sys.stdin.isatty():
        token = typer.prompt("Token", hide_input=True)
    else:
        token = sys.stdin.readline()
    token = token.strip()
    if not token:
        raise fail(
            "no token given (pipe one in, e.g. `reminders token --user ID | reminders login`)",
            EXIT_USAGE,
        )
    url = api_url or _saved().get("api_url") or DEFAULT_API_URL
    if verify:
        with api(url, token) as client:
            client.list(limit=1)
    path = _save({"token": token, "api_url": url})
    typer.echo(f"token saved in {path} for {url}")


def logout() -> None:
    """Delete the token `reminders login` saved (REMINDERS_TOKEN is not touched)."""
    path = config_path()
    try:
        path.unlink()
    except FileNotFoundError:
        typer.echo(f"not logged in (no {path})")
        return
    typer.echo(f"removed {path}")


def register(app: typer.Typer) -> None:
    """Add these commands to the `reminders` app, each help text ending with EXIT_HELP."""
    for name, command in (
        ("create", create),
        ("list", list_),
        ("show", show),
        ("edit", edit),
        ("pause", pause),
        ("resume", resume),
        ("cancel", cancel),
        ("preview", preview),
        ("login", login),
        ("logout", logout),
    ):
        app.command(name, help=f"{inspect.cleandoc(command.__doc__ or '')}\n\n{EXIT_HELP}")(command)
