"""A webhook receiver at the edge of the world: a real HTTP server on 127.0.0.1 that
verifies each request's Standard Webhooks signature with the `svix` library (another
implementation than the sender's `standardwebhooks`) and deduplicates on `webhook-id`,
as a receiver should (docs/design.md, "Webhook channel")."""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from svix.webhooks import Webhook, WebhookVerificationError


@dataclass
class Received:
    """What the receiver saw: every complete request (headers, parsed body, verified or
    not), the ids it accepted once, and how many requests ended before their declared
    body (a sender killed mid-request: nothing to verify and nobody to answer)."""

    requests: list[tuple[dict[str, str], Any, bool]] = field(default_factory=list)
    accepted: dict[str, Any] = field(default_factory=dict)  # webhook-id -> event
    duplicates: int = 0
    aborted: int = 0


class Receiver(ThreadingHTTPServer):
    daemon_threads = True

    def __init__(self, secret: str) -> None:
        super().__init__(("127.0.0.1", 0), _Handler)
        self.verifier = Webhook(secret)
        self.received = Received()
        self.lock = threading.Lock()
        #: Answers to give before the normal 200: (status, headers) each.
        self.script: list[tuple[int, dict[str, str]]] = []

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.server_address[1]}/hooks/reminders"


class _Handler(BaseHTTPRequestHandler):
    server: Receiver

    def log_message(self, format: str, *args: object) -> None:
        pass

    def do_POST(self) -> None:
        declared = int(self.headers.get("content-length", "0"))
        body = self.rfile.read(declared)
        if len(body) < declared:  # the peer closed mid-body (RFC 9112 §8: incomplete)
            with self.server.lock:
                self.server.received.aborted += 1
            self.close_connection = True
            return
        headers = {k.lower(): v for k, v in self.headers.items()}
        try:
            self.server.verifier.verify(body, headers)
            verified = True
        except WebhookVerificationError:
            verified = False
        try:
            event = json.loads(body or b"null")
        except ValueError:
            event = None
        with self.server.lock:
            self.server.received.requests.append((headers, event, verified))
            scripted = self.server.script.pop(0) if self.server.script else None
        if scripted is not None:
            status, extra = scripted
            self.send_response(status)
            for name, value in extra.items():
                self.send_header(name, value)
            self.end_headers()
            return
        if not verified:
            self.send_response(401)
            self.end_headers()
            return
        with self.server.lock:
            key = headers["webhook-id"]
            if key in self.server.received.accepted:
                self.server.received.duplicates += 1
            else:
                self.server.received.accepted[key] = event
        self.send_response(204)
        self.end_headers()


@contextmanager
def running_receiver(secret: str) -> Iterator[Receiver]:
    server = Receiver(secret)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield server
    finally:
        server.shutdown()
        server.server_close()
