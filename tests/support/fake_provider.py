"""A fake email provider: a real local HTTP server speaking the Resend API.

It records every request, accepts each Idempotency-Key once (a repeat returns the first
message id and sends nothing, as Resend documents) unless told not to deduplicate, and
injects faults on demand. A repeat of an accepted key with another payload is answered
409 `invalid_idempotent_request` and sends nothing, as Resend documents ("this
idempotency key has already been used on a request that had a different payload";
resend.com/docs/dashboard/emails/idempotency-keys):

    POST /_faults  {"faults": [{"kind": "500"}, {"kind": "429", "retry_after": 2}, ...],
                    "always": null | {"kind": ...}, "latency_s": 0}
    kinds: "500", "429" (+ retry_after), "400", any other status code such as "503"
           (answered with that status, nothing accepted), "latency" (+ seconds),
           "timeout" (+ seconds: answer only after that long), "drop" (close without
           answering), "message_id" (+ id: accept the message as usual but answer, and
           record, `id` as its message id: any text a provider might send, "\u0000"
           and "\ud800" escapes included), "raw" (+ status, body_hex: answer `status`
           with exactly these bytes as the body, nothing accepted: invalid UTF-8, NUL)
    POST /_mode    {"dedupe": false}: like SES or SMTP, every call is a new email with a
                    new message id, a key already accepted included (answered 200, its
                    request's status "resent"); {"dedupe": true} is the default, kept
                    across /_faults, undone by /_reset
    POST /_webhooks {"url": "http://.../v1/webhooks/resend", "secret": "whsec_...",
                    "delay_s": 0.5, "events": ["email.sent"], "retry_s": [0.5, 1, 2, 4, 8]}
                    (see "Webhooks" below); {"url": null} turns them off (the default),
                    and so does /_reset
    GET  /_stats   {"accepted": n (keys), "duplicates": n (calls that carried a key
                    already accepted, in either mode), "dedupe": bool, "requests": [...]
                    (per request: key, status, at), "messages": [...] (per accepted key,
                    then per resent email: id, key, from, to, subject, text, html, tags,
                    authorization, at, client_gone, webhooks), "webhooks": {"enabled",
                    "posted", "failed", "pending", "retried", "answers", "last_error"}}
    POST /_reset   everything back to the start: faults, mode, records, webhooks (those
                    not yet posted are dropped)

The latency (`latency_s`, a "latency" fault) passes before a message is accepted, as it
would at a provider that sends once it has done its work: a client killed meanwhile still
has its email sent. `client_gone` says that its client had closed the connection by the
time the message was accepted: it never learnt of the email.

Webhooks. With `/_webhooks` on, every message the fake accepts (a key's first acceptance
and, without dedupe, every resent email; also when its client is already gone: the
provider accepted a call whose sender died, and tells so) gets, `delay_s` after it was
accepted, one webhook per type of `events` ("email.sent", "email.delivered"), POSTed to
`url` by a background worker (never the request's thread), as Resend sends them: a JSON
body {"type", "created_at", "data": {"created_at", "email_id" (the message id the call
was answered with), "from", "to" (a list), "subject", "tags" (an object: name -> value
of the request's `tags` list)}}, signed the Standard Webhooks way with `secret` (headers
svix-id, svix-timestamp, svix-signature; svix's `Webhook.sign`). Like Svix, which
delivers Resend's webhooks, a POST that fails (no connection, a timeout, 429 or 5xx) is
tried again after each pause of `retry_s` (seconds; Svix waits 5 s, 5 min, 30 min, ...,
compressed here), with the same svix-id and a new timestamp and signature; any 2xx is
`posted`, any other answer, or the last failure, `failed` (it is not tried again).
`answers` counts the 2xx answers by their JSON `status` ("processed", "ignored", ...);
`pending`, the webhooks not yet posted or given up. Each message lists its webhooks
(type, id, status "pending" / "posted" / "failed", http_status, answer, attempts,
posted_at: time.time() of the final answer).

Run in a thread (`FakeProvider().start()`) or as a process:
`python -m tests.support.fake_provider --port 8025`.
"""

from __future__ import annotations

import argparse
import base64
import heapq
import itertools
import json
import os
import secrets
import select
import socket
import string
import threading
import time
import uuid
from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import httpx
from svix.webhooks import Webhook

#: Webhook event types the fake can send (Resend's names).
WEBHOOK_EVENTS = ("email.sent", "email.delivered")
#: Pauses before each new try of a failed webhook POST (Svix: 5 s, 5 min, 30 min, ...).
WEBHOOK_RETRY_S = (0.5, 1.0, 2.0, 4.0, 8.0)
WEBHOOK_WORKERS = 4  # concurrent webhook POSTs
WEBHOOK_TIMEOUT_S = 10.0  # per POST


def new_webhook_secret() -> str:
    """A signing secret as Resend shows one: "whsec_" + base64 of 24 random bytes."""
    return "whsec_" + base64.b64encode(os.urandom(24)).decode()


@dataclass(frozen=True)
class WebhookConfig:
    url: str
    secret: str
    delay_s: float
    events: tuple[str, ...]
    retry_s: tuple[float, ...]

    @classmethod
    def parse(cls, body: dict[str, Any]) -> WebhookConfig | None:
        """The body of POST /_webhooks; None: webhooks off.

        Raises:
            ValueError: a malformed setting (answered 400).
        """
        url = body.get("url")
        if url is None:
            return None
        if not isinstance(url, str) or not url.startswith(("http://", "https://")):
            raise ValueError(f"url must be an http(s) URL: {url!r}")
        secret = body.get("secret")
        if not isinstance(secret, str) or not secret.startswith("whsec_"):
            raise ValueError("secret must be a whsec_<base64> string")
        Webhook(secret)  # refuses a secret that is not base64
        events = tuple(body.get("events") or ("email.sent",))
        unknown = set(events) - set(WEBHOOK_EVENTS)
        if unknown:
            raise ValueError(f"unknown events {sorted(unknown)}; known: {WEBHOOK_EVENTS}")
        delay_s = float(body.get("delay_s") or 0)
        retry_s = tuple(float(x) for x in body.get("retry_s", WEBHOOK_RETRY_S))
        if delay_s < 0 or any(x < 0 for x in retry_s):
            raise ValueError("delay_s and retry_s must not be negative")
        return cls(url, secret, delay_s, events, retry_s)


class State:
    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.reset()

    def reset(self) -> None:
        self.accepted: dict[str, dict[str, Any]] = {}
        self.payloads: dict[str, Any] = {}  # the request body each accepted key came with
        self.duplicates = 0
        self.requests: list[dict[str, Any]] = []
        self.faults: list[dict[str, Any]] = []
        self.always: dict[str, Any] | None = None
        self.latency_s = 0.0
        self.dedupe = True
        self.resent: list[dict[str, Any]] = []  # emails of keys already accepted (no dedupe)
        self.webhooks: WebhookConfig | None = None
        self.webhook_counts: dict[str, Any] = {
            "posted": 0, "failed": 0, "retried": 0, "answers": {}, "last_error": None,
        }  # fmt: skip


@dataclass(order=True)
class _Job:
    due: float
    seq: int
    url: str = field(compare=False)
    secret: str = field(compare=False)
    msg_id: str = field(compare=False)
    body: str = field(compare=False)
    retry_s: tuple[float, ...] = field(compare=False)
    record: dict[str, Any] = field(compare=False)  # the message's entry for this webhook
    generation: int = field(compare=False)
    attempts: int = field(compare=False, default=0)


class WebhookDispatcher:
    """Posts the webhooks of accepted messages from WEBHOOK_WORKERS daemon threads, each
    when it is due, and tries failed ones again (see the module docstring).

    Counts and each message's webhook entries live in `state` (under its lock, which is
    never taken while this dispatcher's own lock is held). `clear()` (on /_reset) drops
    what is not yet posted; a POST already under way then counts nowhere.
    """

    def __init__(self, state: State, workers: int = WEBHOOK_WORKERS) -> None:
        self.state = state
        self._cond = threading.Condition()
        self._heap: list[_Job] = []
        self._seq = itertools.count()
        self._busy = 0
        self._generation = 0
        self._closed = False
        self._client = httpx.Client(timeout=WEBHOOK_TIMEOUT_S)
        self._threads = [
            threading.Thread(target=self._work, name=f"fake-webhooks-{i}", daemon=True)
            for i in range(workers)
        ]
        for thread in self._threads:
            thread.start()

    def schedule(
        self, config: WebhookConfig, message: dict[str, Any], records: Sequence[dict[str, Any]]
    ) -> None:
        """Queue the webhooks of one accepted `message`, one per entry of `records`
        (made by `entries`, already in the message's `webhooks` list)."""
        fires_at = message["at"] + config.delay_s
        with self._cond:
            for record in records:
                body = _event_body(record["type"], message, fires_at)
                heapq.heappush(
                    self._heap,
                    _Job(fires_at, next(self._seq), config.url, config.secret, record["id"],
                         body, config.retry_s, record, self._generation),
                )  # fmt: skip
            self._cond.notify(len(records))

    @staticmethod
    def entries(config: WebhookConfig) -> list[dict[str, Any]]:
        """A message's webhook entries, one per event type, before they are posted."""
        return [
            {"type": t, "id": _svix_id(), "status": "pending", "http_status": None,
             "answer": None, "attempts": 0, "posted_at": None}
            for t in config.events
        ]  # fmt: skip

    def pending(self) -> int:
        with self._cond:
            return len(self._heap) + self._busy

    def clear(self) -> None:
        with self._cond:
            self._heap.clear()
            self._generation += 1

    def close(self) -> None:
        with self._cond:
            self._closed = True
            self._heap.clear()
            self._cond.notify_all()
        for thread in self._threads:
            thread.join(WEBHOOK_TIMEOUT_S + 1)
        self._client.close()

    def _next(self) -> _Job | None:
        """The earliest job once it is due (None: closed)."""
        with self._cond:
            while not self._closed:
                if not self._heap:
                    self._cond.wait()
                    continue
                wait = self._heap[0].due - time.time()
                if wait > 0:
                    self._cond.wait(wait)
                    continue
                self._busy += 1
                return heapq.heappop(self._heap)
            return None

    def _work(self) -> None:
        while (job := self._next()) is not None:
            try:
                self._post(job)
            finally:
                with self._cond:
                    self._busy -= 1

    def _post(self, job: _Job) -> None:
        job.attempts += 1
        now = datetime.now(UTC)
        headers = {
            "Content-Type": "application/json",
            "User-Agent": "fake-provider-webhooks",
            "svix-id": job.msg_id,
            "svix-timestamp": str(int(now.timestamp())),
            "svix-signature": Webhook(job.secret).sign(job.msg_id, now, job.body),
        }
        status: int | None = None
        answer: str | None = None
        try:
            response = self._client.post(job.url, content=job.body.encode(), headers=headers)
            status = response.status_code
            answer = _answer(response)
            retry = status == 429 or status >= 500
            error = None if 200 <= status < 300 else f"HTTP {status}: {response.text[:200]}"
        except httpx.HTTPError as exc:
            retry, error = True, f"{type(exc).__name__}: {exc}"
        again = retry and job.attempts <= len(job.retry_s)
        with self._cond:
            current = job.generation == self._generation and not self._closed
            if current and again:
                job.due = time.time() + job.retry_s[job.attempts - 1]
                heapq.heappush(self._heap, job)
                self._cond.notify()
        if not current:
            return
        with self.state.lock:
            counts = self.state.webhook_counts
            job.record.update(attempts=job.attempts, http_status=status, answer=answer)
            if error is not None:
                counts["last_error"] = error
            if again:
                counts["retried"] += 1
                return
            job.record["posted_at"] = time.time()
            if error is None:
                job.record["status"] = "posted"
                counts["posted"] += 1
                counts["answers"][answer] = counts["answers"].get(answer, 0) + 1
            else:
                job.record["status"] = "failed"
                counts["failed"] += 1


def _svix_id() -> str:
    """An id shaped like Svix's: "msg_" + 27 letters and digits."""
    alphabet = string.ascii_letters + string.digits
    return "msg_" + "".join(secrets.choice(alphabet) for _ in range(27))


def _event_body(kind: str, message: dict[str, Any], fires_at: float) -> str:
    """Resend's webhook payload for `kind` about an accepted `message`."""
    to = message.get("to")
    created = datetime.fromtimestamp(fires_at, UTC)
    return json.dumps(
        {
            "type": kind,
            "created_at": created.strftime("%Y-%m-%dT%H:%M:%S.") + f"{created:%f}"[:3] + "Z",
            "data": {
                "created_at": datetime.fromtimestamp(message["at"], UTC).isoformat(),
                "email_id": message["id"],
                "from": message.get("from"),
                "to": [to] if isinstance(to, str) else list(to or []),
                "subject": message.get("subject"),
                "tags": dict(message.get("tags") or {}),
            },
        }
    )


def _answer(response: httpx.Response) -> str:
    """A webhook answer's JSON `status` ("processed", "ignored", ...), else "HTTP <code>"."""
    try:
        status = response.json().get("status")
    except (ValueError, AttributeError):
        status = None
    return status if isinstance(status, str) else f"HTTP {response.status_code}"


def _tags(payload: dict[str, Any]) -> dict[str, Any]:
    """The request's `tags` ([{"name", "value"}, ...]) as {name: value}."""
    tags = payload.get("tags")
    if not isinstance(tags, list):
        return {}
    return {
        t["name"]: t.get("value")
        for t in tags
        if isinstance(t, dict) and isinstance(t.get("name"), str)
    }


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
                webhooks = {
                    "enabled": state.webhooks is not None,
                    **state.webhook_counts,
                    "pending": self.server.dispatcher.pending(),
                }
                self._json(200, {"accepted": len(state.accepted), "duplicates": state.duplicates,
                                 "dedupe": state.dedupe, "requests": list(state.requests),
                                 "messages": messages, "webhooks": webhooks})  # fmt: skip
            return
        self._json(404, {"message": "not found"})

    def do_POST(self) -> None:
        state = self.server.state
        if self.path == "/_reset":
            with state.lock:
                state.reset()
            self.server.dispatcher.clear()
            self._json(200, {})
            return
        if self.path == "/_webhooks":
            try:
                config = WebhookConfig.parse(self._body())
            except (ValueError, TypeError) as exc:
                self._json(400, {"message": str(exc)})
                return
            with state.lock:
                state.webhooks = config
            shown = None if config is None else {**config.__dict__, "secret": "whsec_..."}
            self._json(200, {"webhooks": shown})
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
        if kind == "raw":
            record["status"] = int(fault["status"])  # type: ignore[index]
            data = bytes.fromhex(fault["body_hex"])  # type: ignore[index]
            self.send_response(int(fault["status"]))  # type: ignore[index]
            self.send_header("Content-Type", "text/plain")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)
            return
        if isinstance(kind, str) and kind.isdigit():
            status = int(kind)
            headers = {}
            if kind == "429" and fault.get("retry_after") is not None:  # type: ignore[union-attr]
                headers["Retry-After"] = str(fault["retry_after"])  # type: ignore[index]
            record["status"] = status
            self._json(status, {"name": "fault", "message": f"injected {kind}"}, headers)
            return
        client_gone = self._client_gone()
        webhooks: list[dict[str, Any]] = []
        with state.lock:
            config = state.webhooks
            first = state.accepted.get(key) if key else None
            if first is not None:
                state.duplicates += 1
            mismatch = first is not None and state.dedupe and state.payloads[key] != payload
            if mismatch:
                record["status"] = "invalid_idempotent_request"
            elif first is not None and state.dedupe:
                message = first
                record["status"] = "duplicate"
            else:
                message_id = fault["id"] if kind == "message_id" else str(uuid.uuid4())  # type: ignore[index]
                message = {"id": message_id, "key": key, "to": payload.get("to"),
                           "subject": payload.get("subject"), "at": time.time(),
                           "from": payload.get("from"), "text": payload.get("text"),
                           "html": payload.get("html"), "tags": _tags(payload),
                           "authorization": self.headers.get("Authorization"),
                           "client_gone": client_gone}  # fmt: skip
                if config is not None:
                    webhooks = WebhookDispatcher.entries(config)
                message["webhooks"] = webhooks
                if first is not None:
                    state.resent.append(message)
                    record["status"] = "resent"
                else:
                    if key:
                        state.accepted[key] = message
                        state.payloads[key] = payload
                    record["status"] = 200
        if mismatch:
            self._json(409, {"statusCode": 409, "name": "invalid_idempotent_request",
                             "message": "This idempotency key has already been used on a "
                                        "request that had a different payload."})  # fmt: skip
            return
        if webhooks and config is not None:
            # Queued before answering: the answer may never reach a client that is gone.
            self.server.dispatcher.schedule(config, message, webhooks)
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
        self.dispatcher = WebhookDispatcher(self.state)

    def server_close(self) -> None:
        super().server_close()
        self.dispatcher.close()


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

    def set_webhooks(
        self,
        url: str | None,
        secret: str = "",
        delay_s: float = 0.0,
        events: Sequence[str] = ("email.sent",),
        retry_s: Sequence[float] = WEBHOOK_RETRY_S,
    ) -> None:
        """As POST /_webhooks: post `events` for every message accepted from now on to
        `url`, `delay_s` after acceptance (url None: off)."""
        body = {"url": url, "secret": secret, "delay_s": delay_s, "events": list(events),
                "retry_s": list(retry_s)}  # fmt: skip
        config = WebhookConfig.parse(body)
        with self.state.lock:
            self.state.webhooks = config


def main() -> None:
    parser = argparse.ArgumentParser(description="fake Resend-compatible email provider")
    parser.add_argument("--port", type=int, default=8025)
    args = parser.parse_args()
    server = FakeServer(args.port)
    print(f"fake provider on http://127.0.0.1:{server.server_address[1]}", flush=True)
    server.serve_forever()


if __name__ == "__main__":
    main()
