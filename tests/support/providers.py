"""Resend providers for tests, closed after each test (tests/conftest.py).

A `ResendProvider` owns an HTTP client thread and its connections; tests build many, so
they are made here and closed by the autouse fixture `_close_test_providers`.
"""

from __future__ import annotations

from sender.providers.resend import ResendProvider

_open: list[ResendProvider] = []


def resend_provider(
    url: str,
    *,
    name: str = "resend",
    api_key: str = "test-key",
    read_timeout_s: float = 5.0,
    connect_timeout_s: float = 1.0,
    max_connections: int = 32,
) -> ResendProvider:
    """A ResendProvider to `url` (e.g. a FakeProvider's), closed when the test ends."""
    provider = ResendProvider(
        base_url=url,
        api_key=api_key,
        name=name,
        read_timeout_s=read_timeout_s,
        connect_timeout_s=connect_timeout_s,
        max_connections=max_connections,
    )
    _open.append(provider)
    return provider


def close_test_providers() -> None:
    """Close every provider `resend_provider` made since the last call."""
    while _open:
        _open.pop().close()
