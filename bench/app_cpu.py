"""The API application's own CPU per request, in process, without a server or a client
(issue 15): `POST /v1/reminders` (bench/api_load.py's body; also with an Idempotency-Key)
and `GET /v1/reminders?limit=1` beside the floor `GET /healthz` through the same app
(middleware, routing), rounds alternated in one process.

bench/api_load.py measures the API as deployed (uvicorn, HTTP, several processes), where
the client and the machine's drift make a difference of 0.1 ms per create hard to see;
here each request is one ASGI call on the event loop (the route's worker thread included),
and CPU is this process's (`time.process_time`), PostgreSQL's work excluded. A scratch
database migrated like production, 100 users with profiles, the default limits on
(RATE_LIMIT_PER_MINUTE, QUOTA_LIVE_REMINDERS).

Usage: python -m bench.app_cpu [--n 1500] [--repeat 3]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import statistics
import time
import uuid
from collections.abc import Awaitable, Callable, Sequence
from typing import Any

from bench.api_load import BODY, JWT_SECRET, USERS


async def call(app: Any, method: str, path: str, headers: list[tuple[bytes, bytes]],
               body: bytes = b"", query: bytes = b"") -> int:  # fmt: skip
    """One HTTP request as an ASGI call (ASGI 3.0 `http` scope); its status."""
    scope = {
        "type": "http", "asgi": {"version": "3.0"}, "http_version": "1.1", "method": method,
        "scheme": "http", "path": path, "raw_path": path.encode(), "query_string": query,
        "root_path": "", "headers": headers, "client": ("127.0.0.1", 1),
        "server": ("127.0.0.1", 80), "state": {},
    }  # fmt: skip
    delivered = False

    async def receive() -> dict[str, Any]:
        nonlocal delivered
        if not delivered:
            delivered = True
            return {"type": "http.request", "body": body, "more_body": False}
        await asyncio.Event().wait()  # no disconnect while the request runs
        raise AssertionError("unreachable")

    status: list[int] = []

    async def send(message: dict[str, Any]) -> None:
        if message["type"] == "http.response.start":
            status.append(message["status"])

    await app(scope, receive, send)
    return status[0]


async def cpu_per_call(fn: Callable[[int], Awaitable[int]], n: int, offset: int,
                       expect: int) -> float:  # fmt: skip
    """CPU µs of this process per `fn(i)` over `n` calls; every answer must be `expect`."""
    started = time.process_time()
    for i in range(n):
        status = await fn(offset + i)
        if status != expect:
            raise SystemExit(f"answered {status}, expected {expect}")
    return (time.process_time() - started) / n * 1e6


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--n", type=int, default=1500, help="requests per kind per round")
    parser.add_argument("--repeat", type=int, default=3, help="alternated rounds")
    args = parser.parse_args(argv)

    from bench.support import scratch_database, state_directory

    with scratch_database("reminders_bench_app_cpu") as url:
        state = state_directory("bench-app-cpu-")
        profiles = {f"u{i}": {"email": f"u{i}@example.com", "timezone": "Europe/Paris"}
                    for i in range(USERS)}  # fmt: skip
        (state / "profiles.json").write_text(json.dumps(profiles))
        os.environ.update(
            DATABASE_URL=url, JWT_SECRET=JWT_SECRET, STATE_DIR=str(state), LOG_LEVEL="WARNING",
            QUEUE_URL="postgres://bench",
        )  # fmt: skip
        from reminder_api.main import _cells, create_app, open_runtime
        from reminder_core.settings import Settings
        from reminder_core.tokens import mint_token

        settings = Settings()
        rt = open_runtime(settings, application_name="reminders-api")
        app = create_app(rt.settings, rt.engine, rt.profiles, cells=_cells(rt))
        from reminder_core.gc_policy import apply_gc_policy

        apply_gc_policy(settings.gc_gen0_threshold)  # as `reminders api` sets up
        body = json.dumps(BODY).encode()
        auth = [b"Bearer " + mint_token(settings, f"u{i}").encode() for i in range(USERS)]

        run_id = uuid.uuid4().hex[:8]

        def headers(i: int, *extra: tuple[bytes, bytes]) -> list[tuple[bytes, bytes]]:
            return [(b"host", b"bench"), (b"authorization", auth[i % USERS]), *extra]

        kinds: dict[str, tuple[Callable[[int], Awaitable[int]], int]] = {
            "POST /v1/reminders": (
                lambda i: call(app, "POST", "/v1/reminders", headers(
                    i, (b"content-type", b"application/json"),
                    (b"content-length", str(len(body)).encode())), body),
                201,
            ),
            # A careful client's create: a fresh Idempotency-Key per call (its lookup).
            "POST /v1/reminders, keyed": (
                lambda i: call(app, "POST", "/v1/reminders", headers(
                    i, (b"content-type", b"application/json"),
                    (b"content-length", str(len(body)).encode()),
                    (b"idempotency-key", f"bench-{run_id}-{i}".encode())), body),
                201,
            ),
            "GET /v1/reminders?limit=1": (
                lambda i: call(app, "GET", "/v1/reminders", headers(i), query=b"limit=1"),
                200,
            ),
            "GET /healthz (floor)": (
                lambda _: call(app, "GET", "/healthz", [(b"host", b"bench")]),
                200,
            ),
        }  # fmt: skip
        results: dict[str, list[float]] = {name: [] for name in kinds}

        async def run() -> None:
            async with app.router.lifespan_context(app):
                offset = 0
                for fn, expect in kinds.values():  # warm-up: pools, caches, statements
                    await cpu_per_call(fn, 200, offset, expect)
                    offset += 200
                for round_ in range(args.repeat):
                    order = list(kinds) if round_ % 2 == 0 else list(reversed(kinds))
                    for name in order:
                        fn, expect = kinds[name]
                        results[name].append(await cpu_per_call(fn, args.n, offset, expect))
                        offset += args.n

        try:
            asyncio.run(run())
        finally:
            rt.close()
    print(f"the API app's CPU per request, in process ({args.repeat} x {args.n:,}, median):")
    median = {name: statistics.median(r) for name, r in results.items()}
    for name, rounds in results.items():
        spread = ", ".join(f"{x:.0f}" for x in rounds)
        print(f"  {name:<28} {median[name]:6.0f} µs CPU   (rounds {spread})")
    floor = median["GET /healthz (floor)"]
    create = median["POST /v1/reminders"]
    print(f"  create above the floor: {create - floor:.0f} µs ({create / floor:.1f} x the floor)")
    keyed = median["POST /v1/reminders, keyed"]
    print(f"  a key costs a create {keyed - create:.0f} µs ({keyed / create:.2f} x)")


if __name__ == "__main__":
    main()
