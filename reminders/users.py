"""`reminders users add|list`: the development profiles file (PROFILES_FILE, default
STATE_DIR/profiles.json) that `LocalProfileSource` reads, and the profile check of
`reminders token` (docs/cli.md, "Users")."""

from __future__ import annotations

import json
import os
import re
from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer

from reminders.api_commands import fail

if TYPE_CHECKING:
    from reminder_core.settings import Settings

#: RFC 5321 §4.5.3.1: a local part of at most 64 octets, a path of at most 256 (so an
#: address of at most 254 characters).
MAX_LOCAL_PART = 64
MAX_ADDRESS = 254
#: A bare address `local@domain`: no display name, no spaces or RFC 5322 specials in the
#: local part; the domain a dot-separated list of LDH labels (RFC 1035 §2.3.1, at most 63
#: characters each).
_ADDRESS = re.compile(
    r"[^@\s<>()\[\]\\,;:\"\x00-\x1f\x7f]+"
    r"@[A-Za-z0-9](?:[A-Za-z0-9-]{0,61}[A-Za-z0-9])?(?:\.[A-Za-z0-9](?:[A-Za-z0-9-]{0,61}[A-Za-z0-9])?)*"
)

users = typer.Typer(
    help="Users of the development profiles file (PROFILES_FILE, default"
    " ./.reminders/profiles.json): who `reminders dev` and `reminders api` can send to."
    " Exit status: 0 done; 1 refused (a user already there); 2 a bad argument or an"
    " unreadable file.",
    no_args_is_help=True,
)


def email_problem(email: str) -> str | None:
    """Why `email` is not a bare address `local@domain` (RFC 5321 lengths), None if it is."""
    if len(email) > MAX_ADDRESS:
        return f"longer than {MAX_ADDRESS} characters (RFC 5321 §4.5.3.1.3)"
    if not _ADDRESS.fullmatch(email):
        return "is not an address local@domain (no display name, spaces or <>)"
    if len(email.rsplit("@", 1)[0]) > MAX_LOCAL_PART:
        return f"local part longer than {MAX_LOCAL_PART} characters (RFC 5321 §4.5.3.1.1)"
    return None


def _profiles_file() -> Path:
    from reminder_core.settings import Settings

    settings = Settings()
    if settings.profile_service_url:
        typer.echo(
            f"note: PROFILE_SERVICE_URL is set: the API reads profiles from"
            f" {settings.profile_service_url}, not from {settings.effective_profiles_file}",
            err=True,
        )
    return settings.effective_profiles_file


def read_profiles(path: Path) -> dict[str, object]:
    """The profiles file as a JSON object ({} when it does not exist).

    Raises:
        typer.Exit: 2 the file is unreadable or not a JSON object (printed on stderr).
    """
    try:
        raw = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        return {}
    except OSError as exc:
        raise fail(f"cannot read the profiles file {path}: {exc}", 2) from None
    try:
        data = json.loads(raw or "{}")
    except ValueError as exc:
        raise fail(f"the profiles file {path} is not JSON ({exc}): fix or remove it", 2) from None
    if not isinstance(data, dict):
        raise fail(f"the profiles file {path} must hold a JSON object", 2)
    return data


@users.command("add")
def add(
    user_id: Annotated[str, typer.Argument(help="The user id: the token's `sub`.")],
    email: Annotated[str, typer.Option("--email", help="Where the reminders go.")],
    timezone: Annotated[
        str, typer.Option("--timezone", "--tz", help="IANA zone, e.g. Europe/Paris.")
    ],
    quiet_hours: Annotated[
        list[str] | None,
        typer.Option(
            "--quiet-hours",
            help="No email between these local times, e.g. 22:00-07:30 (crosses midnight),"
            " or 22:00-07:30@fri,sat (windows starting on those days); repeatable.",
        ),
    ] = None,
) -> None:
    """Add a user (email, IANA timezone, optional quiet hours) to the profiles file; an id
    already there is refused (exit 1). The API reads the file again on change: no restart
    needed."""
    import fcntl

    from reminder_core.domain.localtime import load_zone
    from reminder_core.errors import InvalidSchedule
    from reminder_core.tokens import MAX_SUBJECT_LENGTH

    if not user_id or len(user_id) > MAX_SUBJECT_LENGTH or "\x00" in user_id:
        raise fail(f"USER_ID must be 1 to {MAX_SUBJECT_LENGTH} characters", 2)
    problem = email_problem(email)
    if problem:
        raise fail(f"--email {email!r} {problem}", 2)
    try:
        load_zone(timezone)
    except InvalidSchedule as exc:
        raise fail(f"--timezone: {exc.reason}", 2) from None
    windows = quiet_hours_entries(quiet_hours or [])
    path = _profiles_file()
    path.parent.mkdir(parents=True, exist_ok=True)
    with (path.parent / f".{path.name}.lock").open("w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # two `users add` at once: both kept
        data = read_profiles(path)
        if user_id in data:
            raise fail(
                f"user {user_id!r} already has a profile in {path}: {json.dumps(data[user_id])}"
                " (edit the file to change it)",
                1,
            )
        profile: dict[str, object] = {"email": email, "timezone": timezone}
        if windows:
            profile["quiet_hours"] = windows
        data[user_id] = profile
        tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
        tmp.write_text(json.dumps(data, indent=2) + "\n", encoding="utf-8")
        tmp.replace(path)
    quiet = f", quiet {', '.join(quiet_hours or [])}" if windows else ""
    typer.echo(f"added {user_id} <{email}> ({timezone}{quiet}) to {path}")


def quiet_hours_entries(specs: list[str]) -> list[dict[str, object]]:
    """The profile's `quiet_hours` member of `--quiet-hours` values "HH:MM-HH:MM" or
    "HH:MM-HH:MM@day,day" (days mon..sun), checked as the sender will read them
    (`reminder_core.domain.quiet_hours.parse_windows`).

    Raises:
        typer.Exit: 2 a value not of that form (printed on stderr).
    """
    from reminder_core.domain.quiet_hours import parse_windows

    entries: list[dict[str, object]] = []
    for spec in specs:
        span, at, days = spec.partition("@")
        start, dash, end = span.partition("-")
        if not dash:
            raise fail(f"--quiet-hours {spec!r}: write START-END, e.g. 22:00-07:30", 2)
        if at and not days.strip():
            raise fail(f"--quiet-hours {spec!r}: name the days after '@', e.g. @sat,sun", 2)
        entry: dict[str, object] = {"start": start.strip(), "end": end.strip()}
        if days:
            entry["days"] = [d.strip() for d in days.split(",")]
        entries.append(entry)
    try:
        parse_windows(entries)
    except ValueError as exc:
        raise fail(f"--quiet-hours: {exc}", 2) from None
    return entries


@users.command("list")
def list_users(
    json_output: Annotated[
        bool, typer.Option("--json", help="Print the file's JSON object (for scripts).")
    ] = False,
) -> None:
    """List the users of the profiles file: id, email, timezone (an entry the API cannot
    use, without an email, is shown as such)."""
    path = _profiles_file()
    data = read_profiles(path)
    if json_output:
        typer.echo(json.dumps(data, indent=2))
        return
    from rich.console import Console
    from rich.table import Table

    table = Table(title=f"{path} ({len(data)})")
    for column in ("user", "email", "timezone", "quiet hours"):
        table.add_column(column, no_wrap=True)
    for user_id, entry in sorted(data.items()):
        fields = entry if isinstance(entry, dict) else {}
        email = fields.get("email")
        table.add_row(
            user_id,
            email if isinstance(email, str) else "(none: unusable)",
            str(fields.get("timezone") or "UTC"),
            _quiet_text(fields.get("quiet_hours")),
        )
    Console().print(table)


def _quiet_text(raw: object) -> str:
    """`--quiet-hours` notation of a profile's windows ("" for none)."""
    if not isinstance(raw, list):
        return "" if raw is None else "(unusable)"
    parts = []
    for w in raw:
        if not isinstance(w, dict):
            return "(unusable)"
        days = w.get("days")
        suffix = "@" + ",".join(map(str, days)) if isinstance(days, list) else ""
        parts.append(f"{w.get('start')}-{w.get('end')}{suffix}")
    return " ".join(parts)


def warn_if_no_profile(settings: Settings, user_id: str) -> None:
    """For `reminders token`: a warning on stderr when the profiles file has no usable
    profile for `user_id` (the API then refuses every create with 422 "user", or 503 for
    a broken timezone). Nothing is checked when PROFILE_SERVICE_URL is set. Never raises:
    the token is printed either way (a profile added later is read without a restart)."""
    from reminder_core.errors import InfrastructureError, ProfileDataError
    from reminder_core.profiles import LocalProfileSource

    if settings.profile_service_url:
        return
    path = settings.effective_profiles_file
    try:
        profile = LocalProfileSource(path).get(user_id)
    except (InfrastructureError, ProfileDataError) as exc:
        typer.echo(f"warning: cannot check the profile of {user_id!r}: {exc}", err=True)
        return
    if profile is None:
        typer.echo(
            f"warning: {user_id!r} has no profile in {path}: the API refuses every reminder"
            f" this token creates (422, no email address); add one with `reminders users add"
            f" {user_id} --email ADDRESS --timezone ZONE`",
            err=True,
        )
