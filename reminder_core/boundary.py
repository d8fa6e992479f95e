"""How a CLI command ends on an expected failure at start: `error: ...` lines on stderr and
a documented exit status (docs/operations.md, "Exit status"), never a traceback. Anything
else is a bug and keeps its traceback."""

from __future__ import annotations

import sys
from collections.abc import Callable
from typing import TYPE_CHECKING

from reminder_core.errors import ConfigurationError, InfrastructureError

if TYPE_CHECKING:
    from pydantic import ValidationError
    from sqlalchemy.exc import OperationalError

#: A setting is missing, malformed or inconsistent (click also exits 2 on a bad command
#: line): fix the environment or the arguments.
EXIT_CONFIGURATION = 2
#: A dependency (the database, the queue, the profile service) cannot be reached: retry
#: later, or check that it runs and that its URL is right.
EXIT_UNAVAILABLE = 3

# SQLSTATE classes and codes that mean "this server cannot be used now" (PostgreSQL
# documentation, Appendix A): 08 connection exception, 28 invalid authorization, 3D
# invalid catalog name (no such database), 53 insufficient resources (e.g. too many
# connections), 57P operator intervention (shutting down, starting up). psycopg reports a
# connection that never opened (refused, unknown host, timeout) with no SQLSTATE.
_UNAVAILABLE_SQLSTATES = ("08", "28", "3D", "53", "57P")


def run_guarded(command: Callable[[], object]) -> None:
    """Run `command`; on an expected failure print its `error:` lines to stderr and exit.

    Raises:
        SystemExit: EXIT_CONFIGURATION or EXIT_UNAVAILABLE after an expected failure.
        Exception: any other exception, unchanged (a bug: its traceback is shown).
    """
    try:
        command()
    except Exception as exc:
        failure = expected_failure(exc)
        if failure is None:
            raise
        status, lines = failure
        for line in lines:
            print(line, file=sys.stderr)
        sys.exit(status)


def expected_failure(exc: BaseException) -> tuple[int, list[str]] | None:
    """The exit status and `error: ...` lines for an expected failure, None for a bug.

    Expected: settings that do not validate (one line per setting, named by its
    environment variable), a ConfigurationError (a ValueError raised while building the
    process from its settings, see `reminder_core.errors.configuration_errors`), an
    InfrastructureError, a database that refuses or cannot take the connection, and one
    without the schema (never migrated, or by an older version: `reminders migrate`).
    """
    # Imported here, not at the top: `reminders --help` need not load SQLAlchemy.
    from pydantic import ValidationError
    from sqlalchemy.exc import OperationalError, ProgrammingError

    from reminder_core.settings import Settings

    if isinstance(exc, ValidationError) and exc.title == Settings.__name__:
        return EXIT_CONFIGURATION, settings_error_lines(exc)
    if isinstance(exc, ConfigurationError):
        return EXIT_CONFIGURATION, [f"error: {one_line(str(exc))}"]
    if isinstance(exc, InfrastructureError):
        return EXIT_UNAVAILABLE, [f"error: {one_line(str(exc))}"]
    if isinstance(exc, OperationalError) and database_unavailable(exc):
        reason = one_line(str(exc.orig))
        return EXIT_UNAVAILABLE, [f"error: cannot use the database (DATABASE_URL): {reason}"]
    if isinstance(exc, ProgrammingError) and schema_missing(exc):
        reason = one_line(str(exc.orig)).split(" LINE ")[0]
        return EXIT_CONFIGURATION, [
            f"error: the database (DATABASE_URL) lacks the reminders schema ({reason}):"
            " run `reminders migrate`"
        ]
    return None


def settings_error_lines(exc: ValidationError) -> list[str]:
    """`error: VARIABLE: reason` for each setting that failed validation; the value is not
    repeated (it may be a secret)."""
    lines = []
    for error in exc.errors(include_url=False, include_input=False):
        loc = error["loc"]
        name = str(loc[0]).upper() if loc else "settings"
        if error["type"] == "literal_error":
            expected = str((error.get("ctx") or {}).get("expected", ""))  # "'a', 'b' or 'c'"
            parts = expected.replace(" or ", ",").split(",")
            choices = "|".join(part.strip(" '") for part in parts)
            reason = f"must be one of {choices}"
        elif error["type"] == "value_error":  # a validator's own ValueError, without the
            reason = str((error.get("ctx") or {}).get("error", error["msg"]))  # "Value error, "
        else:
            reason = error["msg"]
        lines.append(f"error: {name}: {one_line(reason)}")
    return lines


def database_unavailable(exc: OperationalError) -> bool:
    """True when the driver error says the server cannot be used now (no connection, bad
    credentials, no such database, too many connections, shutting down), not that a
    statement failed."""
    sqlstate = getattr(exc.orig, "sqlstate", None)
    return sqlstate is None or str(sqlstate).startswith(_UNAVAILABLE_SQLSTATES)


#: SQLSTATEs of a statement naming a table or column the database does not have
#: (undefined_table, undefined_column): a database never migrated, or migrated by an
#: older version.
_SCHEMA_MISSING_SQLSTATES = frozenset({"42P01", "42703"})


def schema_missing(exc: BaseException) -> bool:
    """True when the driver error says a table or column of the schema is not there."""
    return getattr(getattr(exc, "orig", None), "sqlstate", None) in _SCHEMA_MISSING_SQLSTATES


def one_line(text: str) -> str:
    """`text` with its lines joined by spaces (a driver's hint lines included)."""
    return " ".join(part.strip() for part in text.splitlines() if part.strip())
