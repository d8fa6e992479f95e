"""Test doubles at the sender's edge: a counting file-sink provider and a settable clock."""

from __future__ import annotations

import threading
import time
from datetime import datetime
from pathlib import Path

from sender.providers.base import OutgoingEmail, SendReceipt
from sender.providers.file_sink import FileSinkProvider


class CountingProvider:
    """The file sink, with a call count and an optional pause or failure per call."""

    name = "file"

    def __init__(self, directory: Path, *, pause_s: float = 0.0) -> None:
        self.inner = FileSinkProvider(directory)
        self.calls: list[str] = []
        self.pause_s = pause_s
        self.fail_next: list[Exception] = []
        self._lock = threading.Lock()

    def send(self, email: OutgoingEmail, *, idempotency_key: str) -> SendReceipt:
        with self._lock:
            self.calls.append(idempotency_key)
            failure = self.fail_next.pop(0) if self.fail_next else None
        if failure is not None:
            raise failure
        time.sleep(self.pause_s)
        return self.inner.send(email, idempotency_key=idempotency_key)


class Clock:
    def __init__(self, now: datetime) -> None:
        self.now = now

    def __call__(self) -> datetime:
        return self.now
