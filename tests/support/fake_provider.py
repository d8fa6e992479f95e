"""A fake email provider: a real local HTTP server speaking the Resend API.

It records every request, accepts each Idempotency-Key once (a repeat returns the first
message id and sends nothing, as Resend documents) unless told not to deduplicate, and
injects faults on demand:

    POST /_faults  {"faults": [{"kind": "500"}, {"kind": "429", "retry_after": 2}, ...],
                    "always": null | {"kind": ...}, "latency_s": 0}
    kinds: "500", "429" (+ retry_after), "400", any other status code such as "503"
           (answered with that status, nothing accepted), "latency" (+ seconds),
           "timeout" (+ seconds: answer only after that long), "drop" (close without
           answering)
    POST /_mode    {"dedupe": false}: like SES or SMTP, every call is a new email with a
                    new message id, a key already accepted included (answered 200, its
                    request's status "resent"); {"dedupe": true} is the default, kept
                    across /_faults, undone by /_reset
    GET  /_stats   {"accepted": n (keys), "duplicates": n (calls that carried a key
                    already accepted, in either mode), "dedupe": bool, "requests": [...]
                    (per request: key, status, at), "messages": [...] (per accepted key,
                    then per resent email: id, key, from, to, subject, text, html,
                    authorization, at, client_gone)}
    POST /_reset

The latency (`latency_s`, a "latency" fault) passes before a message is accepted, as it
would at a provider that sends once it has done its work: a client killed meanwhile still
has its email sent. `client_gone` says that its client had closed the connection by the
time the message was accepted: it never learnt of the email.

Run in a thread (`FakeProvider().start()`) or as a process:
`python -m tests.support.fake_provider --port 8025`.
"""

from __future__ import annotations

import argparse
import json
import select
import socket
import threading
import time
import uuid
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any


class State:
    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.reset()

    def reset(self) -> None:
        self.accepted: dict[str, dict[str, Any]] = {}
        self.duplicates = 0
        self.requests: list[dict[str, Any]] = []
        self.faults: list[dict[str, Any]] = []
        self.always: dict[str, Any] | None = None
        self.latency_s = 0.0
        self.dedupe = True
        self.resent: list[dict[str, Any]] = []  # emails of keys already accepted (no dedupe)


class Handler(BaseHTTPRequestHandler):
    server: FakeServer
    protocol_version = "HTTP/1.1"
    # Headers and body go out in separate writes; without TCP_NODELAY, Nagle's algorithm
    # and the client's delayed ACK add ~40 ms to every keep-alive request.
    disable_nagle_algorithm = True

    def log_message(self, format: str, *args: Any) -> None:
        pass

    def _json(self, status: int, body: Any, headers: dict[str, str] | None = None) -> None:
        data = json.dumps(body).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        for k, v in (headers or {}).items():
            self.send_header(k, v)
        self.end_headers()
        self.wfile.write(data)

    def _body(self) -> Any:
        length = int(self.headers.get("Content-Length") or 0)
        raw = self.rfile.read(length) if length else b""
        return json.loads(raw) if raw else {}

    def do_GET(self) -> None:
        state = self.server.state
        if self.path == "/_stats":
            with state.lock:
                messages = [*state.accepted.values(), *state.resent]
                self._json(200, {"accepted": len(state.accepted), "duplicates": state.duplicates,
                                 "dedupe": state.dedupe, "requests": list(state.requests),
                                 "messages": messages})  # fmt: skip
            return
        self._json(404, {"message": "not found"})

    def do_POST(self) -> None:
        state = self.server.state
        if self.path == "/_reset":
            with state.lock:
                state.reset()
            self._json(200, {})
            return
        if self.path == "/_faults":
            body = self._body()
            with state.lock:
                state.faults = list(body.get("faults") or [])
                state.always = body.get("always")
                state.latency_s = float(body.get("latency_s") or 0)
            self._json(200, {})
            return
        if self.path == "/_mode":
            body = self._body()
            with state.lock:
                state.dedupe = bool(body.get("dedupe", True))
            self._json(200, {"dedupe": state.dedupe})
            return
        if self.path != "/emails":
            self._json(404, {"message": "not found"})
            return
        payload = self._body()
        key = self.headers.get("Idempotency-Key") or ""
        with state.lock:
            fault = state.faults.pop(0) if state.faults else state.always
            latency = state.latency_s
            record: dict[str, Any] = {"key": key, "at": time.time(), "status": None}
            state.requests.append(record)
        if latency:
            time.sleep(latency)
        kind = (fault or {}).get("kind")
        if kind == "drop":
            record["status"] = "dropped"
            self.close_connection = True
            self.connection.shutdown(socket.SHUT_RDWR)
            return
        if kind == "timeout":
            time.sleep(float(fault.get("seconds", 30)))  # type: ignore[union-attr]
        if kind == "latency":
            time.sleep(float(fault.get("seconds", 1)))  # type: ignore[union-attr]
        if isinstance(kind, str) and kind.isdigit():
            status = int(kind)
            headers = {}
            if kind == "429" and fault.get("retry_after") is not None:  # type: ignore[union-attr]
                headers["Retry-After"] = str(fault["retry_after"])  # type: ignore[index]
            record["status"] = status
            self._json(status, {"name": "fault", "message": f"injected {kind}"}, headers)
            return
        client_gone = self._client_gone()
        with state.lock:
            first = state.accepted.get(key) if key else None
            if first is not None:
                state.duplicates += 1
            if first is not None and state.dedupe:
                message = first
                record["status"] = "duplicate"
            else:
                message = {"id": str(uuid.uuid4()), "key": key, "to": payload.get("to"),
                           "subject": payload.get("subject"), "at": time.time(),
                           "from": payload.get("from"), "text": payload.get("text"),
                           "html": payload.get("html"),
                           "authorization": self.headers.get("Authorization"),
                           "client_gone": client_gone}  # fmt: skip
                if first is not None:
                    state.resent.append(message)
                    record["status"] = "resent"
                else:
                    if key:
                        state.accepted[key] = message
                    record["status"] = 200
        self._json(200, {"id": message["id"]})

    def _client_gone(self) -> bool:
        """The client has closed its end (a killed process): the connection reads as EOF.
        A client waits for this answer before it writes again, so anything readable now
        is the close."""
        try:
            readable, _, _ = select.select([self.connection], [], [], 0)
            return bool(readable) and self.connection.recv(1, socket.MSG_PEEK) == b""
        except OSError:
            return True


class FakeServer(ThreadingHTTPServer):
    daemon_threads = True
    # socketserver's default listen backlog is 5: a burst of concurrent connections
    # beyond it has its SYNs dropped and waits out a 1 s retransmit (a connect timeout).
    request_queue_size = 128

    def __init__(self, port: int = 0) -> None:
        super().__init__(("127.0.0.1", port), Handler)
        self.state = State()


class FakeProvider:
    """The fake server in a background thread of this process."""

    def __init__(self, port: int = 0) -> None:
        self.server = FakeServer(port)
        # A short poll interval: stop() waits for it (0.5 s by default).
        self.thread = threading.Thread(
            target=self.server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True
        )

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.server.server_address[1]}"

    @property
    def state(self) -> State:
        return self.server.state

    def start(self) -> FakeProvider:
        self.thread.start()
        return self

    def stop(self) -> None:
        self.server.shutdown()
        self.server.server_close()

    def inject(self, *faults: dict[str, Any], always: dict[str, Any] | None = None) -> None:
        with self.state.lock:
            self.state.faults = list(faults)
            self.state.always = always


def main() -> None:
    parser = argparse.ArgumentParser(description="fake Resend-compatible email provider")
    parser.add_argument("--port", type=int, default=8025)
    args = parser.parse_args()
    server = FakeServer(args.port)
    print(f"fake provider on http://127.0.0.1:{server.server_address[1]}", flush=True)
    server.serve_forever()


if __name__ == "__main__":
    main()
