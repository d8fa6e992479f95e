"""Process logging setup: one structlog renderer for every record (called from main()).

Every log record, whether it comes from a structlog logger or from the stdlib `logging`
calls spread through this code and third-party libraries (SQLAlchemy, uvicorn, httpx,
...), goes through one `structlog.stdlib.ProcessorFormatter` on one stderr handler
(structlog's documented stdlib integration, "Rendering Using structlog-based Formatters
Within logging"). In production (`LOG_FORMAT=json`) each record is one JSON object per
line:

    {"timestamp": "2026-03-02T08:30:00.412Z", "level": "info", "logger": "sender.service",
     "event": "delivery sent", "reminder_id": "...", "run_time_utc": "2026-03-02T08:30:00Z",
     "attempt": 1, "provider": "ses", ...}

with `exception` (the formatted traceback, a string) when the record carries one. Fields
passed as stdlib `extra=` (see `delivery_fields`) or bound with
`structlog.contextvars.bind_contextvars` or held by `DELIVERY` (the occurrence being sent)
become top-level keys. `LOG_FORMAT=console` (the
default of `reminders dev`) renders the same records for humans, without colours when
stderr is not a terminal.
"""

from __future__ import annotations

import logging
import sys
import uuid
from collections.abc import Mapping
from contextvars import ContextVar
from datetime import datetime
from typing import Literal, TextIO

import structlog
from structlog.typing import EventDict, Processor, WrappedLogger

LogFormat = Literal["json", "console"]

#: The fields of the occurrence being sent (sender.execute sets it around each send and
#: resets it after): top-level keys of every record logged meanwhile in that context, by
#: any logger (`merge_delivery`); keys a record sets itself win. One variable set once
#: per send: structlog's bind_contextvars made a variable per key (1.7 us a send against
#: 0.2 us, measured).
DELIVERY: ContextVar[Mapping[str, object] | None] = ContextVar("reminders_delivery", default=None)


def merge_delivery(logger: WrappedLogger, method_name: str, event_dict: EventDict) -> EventDict:
    """structlog processor: the fields `DELIVERY` holds, under the record's own."""
    del logger, method_name
    bound = DELIVERY.get()
    if bound:
        for key, value in bound.items():
            event_dict.setdefault(key, value)
    return event_dict


def delivery_fields(
    reminder_id: uuid.UUID | str | None,
    run_time_utc: datetime | None,
    attempt: int | None,
    provider: str | None,
    **more: object,
) -> dict[str, object]:
    """The `extra=` of a delivery event: the fields every delivery log line carries.

    Nothing is formatted here (a disabled log call must stay cheap on the sender's hot
    path): UUIDs and datetimes are rendered only when a record is emitted.

    Args:
        reminder_id: the reminder.
        run_time_utc: the occurrence (aware UTC), rendered ISO 8601 with `Z`.
        attempt: which receive of the queue message this is (1 = the first; after
            MAX_RECEIVE_COUNT receives the message goes to the dead-letter queue).
        provider: the provider that sent or was tried; None when none was.
        more: other fields (e.g. `provider_calls`, `error`), top-level keys too.

    Returns:
        a new dict, for `log.info(event, extra=...)`.
    """
    return {
        "reminder_id": reminder_id,
        "run_time_utc": run_time_utc,
        "attempt": attempt,
        "provider": provider,
        **more,
    }


_FIRST_KEYS = ("timestamp", "level", "logger", "event")


def _plain_values(_: WrappedLogger, __: str, event_dict: EventDict) -> EventDict:
    """Put timestamp, level, logger and event first; render UUIDs, datetimes (ISO 8601,
    `Z` for UTC) and exceptions (their message) as strings; drop uvicorn's
    `color_message` (the message again, with ANSI codes)."""
    event_dict.pop("color_message", None)
    out = {key: event_dict.pop(key) for key in _FIRST_KEYS if key in event_dict}
    for key, value in event_dict.items():
        if isinstance(value, uuid.UUID):
            value = str(value)
        elif isinstance(value, datetime):
            value = value.isoformat().replace("+00:00", "Z")
        elif isinstance(value, BaseException) and key != "exc_info":
            value = str(value)  # an `error=exc` field: its message
        out[key] = value
    return out


def _json_default(value: object) -> object:
    """Anything else json cannot encode (an exception, a Path, ...): its str()."""
    return str(value)


def configure_logging(
    level: str = "INFO", fmt: LogFormat = "json", *, stream: TextIO | None = None
) -> None:
    """Route every log record (structlog and stdlib) to one handler on `stream`.

    Replaces the root logger's handlers (like `logging.basicConfig(force=True)`) and
    sets its level; configures structlog to hand its records to the same handler, so a
    `structlog.get_logger()` and a `logging.getLogger()` come out alike. Safe to call
    again (tests): the last call wins.

    Args:
        level: threshold name (DEBUG, INFO, WARNING, ...), any case.
        fmt: "json" (one JSON object per line; production) or "console" (structlog's
            ConsoleRenderer; colours only when `stream` is a terminal).
        stream: where lines go; default sys.stderr (as resolved at call time).

    Raises:
        ValueError: unknown `fmt` or `level`.
    """
    if fmt not in ("json", "console"):
        raise ValueError(f"unknown log format {fmt!r} (json | console)")
    out = stream if stream is not None else sys.stderr
    # Added to records from the stdlib `logging` API (ours and third-party) before the
    # renderer; structlog's own records get the same from the chain configured below.
    stamp = structlog.processors.TimeStamper(fmt="iso", utc=True)
    foreign_pre_chain: list[Processor] = [
        structlog.contextvars.merge_contextvars,
        merge_delivery,
        structlog.stdlib.add_log_level,
        structlog.stdlib.add_logger_name,
        structlog.stdlib.ExtraAdder(),
        stamp,
    ]
    renderer: list[Processor]
    if fmt == "json":
        renderer = [
            structlog.processors.format_exc_info,  # exc_info -> "exception": str
            structlog.processors.JSONRenderer(default=_json_default),
        ]
    else:
        tty = out.isatty()
        renderer = [
            structlog.dev.ConsoleRenderer(
                colors=tty,
                exception_formatter=(
                    structlog.dev.default_exception_formatter
                    if tty
                    else structlog.dev.plain_traceback
                ),
            )
        ]
    formatter = structlog.stdlib.ProcessorFormatter(
        foreign_pre_chain=foreign_pre_chain,
        processors=[
            structlog.stdlib.ProcessorFormatter.remove_processors_meta,
            _plain_values,
            *renderer,
        ],
    )
    handler = logging.StreamHandler(out)
    handler.setFormatter(formatter)
    root = logging.getLogger()
    for old in root.handlers[:]:
        root.removeHandler(old)
        old.close()
    root.addHandler(handler)
    root.setLevel(level.upper())

    structlog.configure(
        processors=[
            structlog.stdlib.filter_by_level,
            structlog.contextvars.merge_contextvars,
            merge_delivery,
            structlog.stdlib.add_log_level,
            structlog.stdlib.add_logger_name,
            structlog.stdlib.PositionalArgumentsFormatter(),
            structlog.processors.StackInfoRenderer(),
            stamp,
            structlog.stdlib.ProcessorFormatter.wrap_for_formatter,
        ],
        logger_factory=structlog.stdlib.LoggerFactory(),
        wrapper_class=structlog.stdlib.BoundLogger,
        cache_logger_on_first_use=True,
    )
    logging.getLogger("uvicorn.access").setLevel(logging.WARNING)
    logging.getLogger("pgserver").setLevel(logging.WARNING)  # logs every initdb line at INFO
    # httpx/httpcore log every request at INFO: one line per provider call or profile
    # lookup would undo logging sent deliveries at DEBUG (docs/operations.md, "Logs").
    for chatty in ("httpx", "httpcore"):
        logging.getLogger(chatty).setLevel(
            logging.WARNING if root.level >= logging.INFO else root.level
        )
