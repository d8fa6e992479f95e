"""sender/providers/http.py: the blocking client over one aiohttp session, against the
fake provider (a real local HTTP server): many threads share it, closing it (or losing
it) stops its thread, and its errors fall in the classes the providers rely on."""

from __future__ import annotations

import gc
import socket
import threading
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor

import pytest

from sender.providers.http import NO_ANSWER_ERRORS, NOT_SENT_ERRORS, HttpClient
from tests.support.fake_provider import FakeProvider


@pytest.fixture
def fake() -> Iterator[FakeProvider]:
    server = FakeProvider().start()
    yield server
    server.stop()


def client_threads() -> list[threading.Thread]:
    return [t for t in threading.enumerate() if t.name == "test-http"]


def payload(i: int) -> dict[str, object]:
    return {"from": "a@example.com", "to": [f"u{i}@example.com"], "subject": "s", "text": "t"}


def test_many_threads_share_one_client_and_each_gets_its_own_answer(fake) -> None:
    client = HttpClient(connect_timeout_s=2, read_timeout_s=5, max_connections=4, name="test-http")
    try:

        def post(i: int) -> tuple[int, bytes]:
            answer = client.post_json(
                f"{fake.url}/emails", payload(i), headers={"Idempotency-Key": f"key-{i}"}
            )
            return answer.status, answer.body

        with ThreadPoolExecutor(16) as pool:
            answers = list(pool.map(post, range(200)))
    finally:
        client.close()
    assert {status for status, _ in answers} == {200}
    # Each thread got the answer to its own request: the fake gave each key its own id.
    by_key = {m["key"]: m["id"] for m in fake.state.accepted.values()}
    assert len(by_key) == 200
    assert [body for _, body in answers] == [
        f'{{"id": "{by_key[f"key-{i}"]}"}}'.encode() for i in range(200)
    ]
    assert {m["to"][0] for m in fake.state.accepted.values()} == {
        f"u{i}@example.com" for i in range(200)
    }


def test_error_statuses_are_answers_not_exceptions(fake) -> None:
    fake.inject({"kind": "429", "retry_after": 7})
    client = HttpClient(connect_timeout_s=2, read_timeout_s=5, name="test-http")
    try:
        answer = client.post_json(f"{fake.url}/emails", payload(0))
    finally:
        client.close()
    assert answer.status == 429
    assert answer.headers["retry-after"] == "7"  # case-insensitive lookup
    assert "injected 429" in answer.text


def test_refused_connection_is_a_not_sent_error() -> None:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))  # bound, never listening: connections are refused
        url = f"http://127.0.0.1:{s.getsockname()[1]}/emails"
        client = HttpClient(connect_timeout_s=2, read_timeout_s=5, name="test-http")
        try:
            with pytest.raises(NOT_SENT_ERRORS):
                client.post_json(url, payload(0))
        finally:
            client.close()


def test_read_timeout_and_dropped_connection_are_no_answer_errors(fake) -> None:
    client = HttpClient(connect_timeout_s=2, read_timeout_s=0.3, name="test-http")
    try:
        fake.inject({"kind": "timeout", "seconds": 1})
        with pytest.raises(NO_ANSWER_ERRORS) as timed_out:
            client.post_json(f"{fake.url}/emails", payload(0))
        assert not isinstance(timed_out.value, NOT_SENT_ERRORS)
        fake.inject({"kind": "drop"})
        with pytest.raises(NO_ANSWER_ERRORS) as dropped:
            client.post_json(f"{fake.url}/emails", payload(1))
        assert not isinstance(dropped.value, NOT_SENT_ERRORS)
        time.sleep(1)  # let the late answer hit the closed socket
    finally:
        client.close()


def test_close_stops_the_thread_is_idempotent_and_refuses_later_calls(fake) -> None:
    client = HttpClient(connect_timeout_s=2, read_timeout_s=5, name="test-http")
    assert client.post_json(f"{fake.url}/emails", payload(0)).status == 200
    assert len(client_threads()) == 1
    client.close()
    client.close()
    assert client_threads() == []
    with pytest.raises(RuntimeError, match="closed"):
        client.post_json(f"{fake.url}/emails", payload(1))


def test_a_client_dropped_without_close_stops_its_thread(fake) -> None:
    client = HttpClient(connect_timeout_s=2, read_timeout_s=5, name="test-http")
    assert client.post_json(f"{fake.url}/emails", payload(0)).status == 200
    del client
    gc.collect()
    deadline = time.monotonic() + 5
    while client_threads() and time.monotonic() < deadline:
        time.sleep(0.05)
    assert client_threads() == []
