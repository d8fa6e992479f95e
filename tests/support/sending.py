"""The sender as the tests make it (`make_sender`, the one builder), and test doubles at
its edge: a counting file-sink provider and a settable clock."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path

from sqlalchemy import Engine

from reminder_core.domain.retry import RetryPolicy
from reminder_core.links import LinkSigner
from reminder_core.profiles import LocalProfileSource
from reminder_core.queue import Queue
from reminder_core.scheduling import ScheduleConfig
from reminder_core.settings import Settings
from sender.providers.base import OutgoingEmail, Provider, SendReceipt
from sender.providers.file_sink import FileSinkProvider
from sender.providers.webhook import WebhookChannel
from sender.render import Renderer
from sender.service import Sender

#: The sender tests' instant (the default clock of `make_sender`).
NOW = datetime(2030, 1, 1, 12, 0, 0, tzinfo=UTC)
MAIL_FROM = "Reminders <reminders@example.com>"


class CountingProvider:
    """The file sink, with a call count and an optional pause or failure per call; like
    the file sink it delivers each key once (the sender's first sends go leaseless)."""

    name = "file"
    deduplicates_keys = True

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


def make_sender(
    db: Engine,
    queue: Queue,
    settings: Settings,
    provider: Provider,
    clock: Callable[[], datetime] | None = None,
    *,
    renderer: Renderer | None = None,
    retry: RetryPolicy | None = None,
    visibility_timeout_s: float = 30,
    lease_s: float = 60,
    links: LinkSigner | None = None,
    webhooks: WebhookChannel | None = None,
    leaseless_first_send: bool | None = None,
) -> Sender:
    """A sender on `queue` calling `provider`, profiles from the settings' file, the
    shipped templates unless `renderer` is given, a 30 s visibility timeout and a 60 s
    lease. `clock` (its rows' timestamps) defaults to a clock fixed at NOW; pass
    `reminder_core.clock.utcnow` for real time. One call per receive unless `retry` says
    more: most sender tests follow the queue. First sends go without a lease as shipped
    (SENDER_LEASELESS_FIRST_SEND, where the queue and provider allow it) unless
    `leaseless_first_send` says otherwise. The caller closes it if it starts threads it
    must stop (`Sender.close`)."""
    return Sender(
        db,
        queue,
        LocalProfileSource(settings.effective_profiles_file),
        renderer or Renderer(),
        provider,
        mail_from=MAIL_FROM,
        visibility_timeout_s=visibility_timeout_s,
        lease_s=lease_s,
        schedule_config=ScheduleConfig.from_settings(settings),
        retry=retry or RetryPolicy(attempts=1),
        clock=clock or Clock(NOW),
        links=links,
        webhooks=webhooks,
        leaseless_first_send=(
            settings.sender_leaseless_first_send
            if leaseless_first_send is None
            else leaseless_first_send
        ),
    )
