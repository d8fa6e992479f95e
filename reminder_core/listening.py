"""Whether a host and port can be listened on, asked before a server starts (`reminders
dev`, `reminders api`): uvicorn's own failure is a log record after the database opened."""

from __future__ import annotations

import errno
import socket


def bind_problem(host: str, port: int) -> str | None:
    """Why `host:port` cannot be bound now, None when it can (checked before the banner
    is printed): "already in use" for EADDRINUSE, else the system's reason (an address
    this machine does not have, EADDRNOTAVAIL; a host name that does not resolve)."""
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    with socket.socket(family, socket.SOCK_STREAM) as probe:
        probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            probe.bind((host, port))
        except socket.gaierror as exc:
            return f"cannot listen there: {host!r} does not resolve ({exc.strerror})"
        except OSError as exc:
            if exc.errno == errno.EADDRINUSE:
                return "already in use (another `reminders dev` or `reminders api`?); try --port"
            return f"cannot listen there: {exc.strerror or exc}"
    return None
