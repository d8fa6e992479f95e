"""A fake user profile service: a real local HTTP server speaking the contract of
`reminder_core/profile_service.py` (docs/configuration.md, "Profile service").

    GET /users/{percent-encoded user id}  → 200 {"email", "timezone"} | 404
    (401 when a token is configured and the request's bearer token differs)

Every request is recorded with its raw request target, exactly as it arrived on the wire.
Faults are consumed one per request (then `always`, if set):

    {"kind": "status", "status": 503}    answer that status, JSON body
    {"kind": "latency", "seconds": 2}    wait, then answer normally
    {"kind": "drop"}                     close the connection without answering
    {"kind": "body", "body": "..."}      answer 200 with this raw body

Usage: `with FakeProfileService({"alice": {...}}) as svc: svc.url ...`.
"""

from __future__ import annotations

import json
import socket
import sys
import threading
import time
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from types import TracebackType
from typing import Any
from urllib.parse import unquote


@dataclass
class Seen:
    """One request as received: raw target, Authorization and Accept headers."""

    target: str
    authorization: str | None
    accept: str | None
    at: float = field(default_factory=time.monotonic)


class _Handler(BaseHTTPRequestHandler):
    server: _Server
    protocol_version = "HTTP/1.1"
    disable_nagle_algorithm = True

    def log_message(self, format: str, *args: Any) -> None:
        pass

    def _answer(self, status: int, body: bytes) -> None:
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def do_GET(self) -> None:
        svc = self.server.svc
        with svc.lock:
            svc.requests.append(
                Seen(self.path, self.headers.get("Authorization"), self.headers.get("Accept"))
            )
            fault = svc.faults.pop(0) if svc.faults else svc.always
            token = svc.token
        kind = (fault or {}).get("kind")
        if kind == "latency":
            time.sleep(float(fault["seconds"]))  # type: ignore[index]
        elif kind == "drop":
            self.close_connection = True
            self.connection.shutdown(socket.SHUT_RDWR)
            return
        elif kind == "status":
            status = int(fault["status"])  # type: ignore[index]
            self._answer(status, json.dumps({"detail": f"injected {status}"}).encode())
            return
        elif kind == "body":
            self._answer(200, str(fault["body"]).encode())  # type: ignore[index]
            return
        if token is not None and self.headers.get("Authorization") != f"Bearer {token}":
            self._answer(401, b'{"detail": "bad token"}')
            return
        prefix, _, segment = self.path.partition("/users/")
        if prefix or not segment or "/" in segment or "?" in segment:
            self._answer(400, b'{"detail": "not a /users/{id} path"}')
            return
        with svc.lock:
            profile = svc.profiles.get(unquote(segment))
        if profile is None:
            self._answer(404, b'{"detail": "no such user"}')
        else:
            self._answer(200, json.dumps(profile).encode())


class _Server(ThreadingHTTPServer):
    daemon_threads = True  # a handler sleeping in a latency fault never blocks shutdown

    def __init__(self, svc: FakeProfileService) -> None:
        super().__init__(("127.0.0.1", 0), _Handler)
        self.svc = svc

    def handle_error(self, request: Any, client_address: Any) -> None:
        if isinstance(sys.exc_info()[1], ConnectionError):
            return  # clients hanging up (timeouts, closed pools) are part of the tests
        super().handle_error(request, client_address)


class FakeProfileService:
    """The fake server on a free port of 127.0.0.1, in a background thread.

    Args:
        profiles: {user id: JSON object answered for it}; mutable while running.
        token: when set, requests must carry `Authorization: Bearer <token>`.
    """

    def __init__(self, profiles: dict[str, Any] | None = None, *, token: str | None = None) -> None:
        self.lock = threading.Lock()
        self.profiles: dict[str, Any] = dict(profiles or {})
        self.token = token
        self.faults: list[dict[str, Any]] = []
        self.always: dict[str, Any] | None = None
        self.requests: list[Seen] = []
        self._server = _Server(self)
        self._thread = threading.Thread(
            target=self._server.serve_forever, kwargs={"poll_interval": 0.02}, daemon=True
        )

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self._server.server_address[1]}"

    def inject(self, *faults: dict[str, Any], always: dict[str, Any] | None = None) -> None:
        """Answer the next requests with `faults`, one each, then with `always` (None:
        normally)."""
        with self.lock:
            self.faults = list(faults)
            self.always = always

    def targets(self) -> list[str]:
        """The raw request targets received so far, in order."""
        with self.lock:
            return [r.target for r in self.requests]

    def __enter__(self) -> FakeProfileService:
        self._thread.start()
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self._server.shutdown()
        self._server.server_close()
