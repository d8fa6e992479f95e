"""Sender-level failover (issue 5; docs/design.md, "Retries and the dead-letter queue",
"Provider failover"): the real Sender, Coordinator, PostgresQueue and Maintenance over a
FailoverProvider whose primary and backup are two real local fakes of the Resend API
(tests/support/fake_provider.py), scaled in time (breakers reset after 1 s, outages of a
few seconds).

Expected behaviour, from issue 5 and docs/design.md, "Retries and the dead-letter queue"
and "Provider failover":
- an open or failing primary sends traffic to the backup; its breaker opens after
  `fail_max` consecutive failures (pybreaker README, "fail_max") and lets one half-open
  probe through per `reset_timeout` (pybreaker README, "reset_timeout"); a successful probe
  closes it and traffic returns to the primary;
- no message is dead-lettered by an outage: while every breaker is open the senders stop
  receiving (each receive counts toward the maximum receive count) and resume on the
  half-open probe, which risks one message;
- an ambiguous timeout is retried on the same provider with the same idempotency key, the
  backup never called (it cannot deduplicate against the primary), also by another worker
  that takes the delivery row over: the provider that may hold the message is recorded on
  the row (`delivery_log.provider`).
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterator
from datetime import UTC, datetime, timedelta

import pytest
from sqlalchemy import Engine, text

from coordinator.service import Coordinator
from reminder_core.clock import utcnow
from reminder_core.domain.localtime import idempotency_key
from reminder_core.domain.retry import RetryPolicy
from reminder_core.queue import PostgresQueue
from reminder_core.settings import Settings
from reminder_core.worker.loop import TickResult
from sender.providers.failover import FailoverProvider
from sender.service import Sender
from tests.integration.helpers import insert_due_reminders
from tests.integration.test_failover import EMAIL, closed_port, failover, keys_seen, new_key
from tests.support import sending
from tests.support.fake_provider import FakeProvider
from tests.support.maintenance import make_maintainer

FAIL_MAX = 3
RESET_S = 1.0
MAX_RECEIVE_COUNT = 5  # docs/design.md, "Retries and the dead-letter queue": the default
QUICK = RetryPolicy(attempts=2, base_s=0.02, max_wait_s=0.5, budget_s=60)


@pytest.fixture
def start_fake() -> Iterator[Callable[[int], FakeProvider]]:
    """Starts fake providers (on a given port, 0 for any); stops them after the test."""
    started: list[FakeProvider] = []

    def start(port: int = 0) -> FakeProvider:
        fake = FakeProvider(port).start()
        started.append(fake)
        return fake

    yield start
    for fake in started:
        fake.stop()


@pytest.fixture
def queue(db: Engine) -> PostgresQueue:
    return PostgresQueue(db, name="reminders", max_receive_count=MAX_RECEIVE_COUNT)


@pytest.fixture
def make_sender(
    db: Engine, queue: PostgresQueue, settings: Settings
) -> Iterator[Callable[..., Sender]]:
    """Builds Senders over a FailoverProvider; closes them after the test."""
    senders: list[Sender] = []

    def make(provider: FailoverProvider, retry: RetryPolicy, leaseless: bool = True) -> Sender:
        sender = sending.make_sender(
            db, queue, settings, provider, utcnow, retry=retry, leaseless_first_send=leaseless
        )
        senders.append(sender)
        return sender

    yield make
    for sender in senders:
        sender.close()


def due_over(db: Engine, start: datetime, count: int, step_s: float, title: str) -> None:
    """`count` one-time reminders due `step_s` apart from `start`."""
    for i in range(count):
        insert_due_reminders(
            db, 1, next_run_utc=start + timedelta(seconds=i * step_s), title=f"{title} {i}"
        )


def deliveries(db: Engine) -> dict[str, tuple[str, str | None, int]]:
    """{idempotency key: (status, provider, attempt_count)} of every delivery row."""
    with db.connect() as conn:
        rows = conn.execute(
            text("SELECT reminder_id, run_time_utc, status, provider, attempt_count"
                 " FROM delivery_log")
        ).all()  # fmt: skip
    return {
        idempotency_key(r.reminder_id, r.run_time_utc): (r.status, r.provider, r.attempt_count)
        for r in rows
    }


def sent_count(db: Engine) -> int:
    sql = "SELECT count(*) FROM delivery_log WHERE status = 'sent'"
    with db.connect() as conn:
        return int(conn.execute(text(sql)).scalar_one())


def receive_counts(db: Engine) -> dict[object, tuple[int, bool]]:
    """{queue message id: (receive_count, dead_lettered)}."""
    with db.connect() as conn:
        rows = conn.execute(
            text("SELECT id, receive_count, dead_lettered FROM queue_messages")
        ).all()
    return {r.id: (r.receive_count, r.dead_lettered) for r in rows}


def accepted(fake: FakeProvider) -> set[str]:
    with fake.state.lock:
        return set(fake.state.accepted)


def assert_nothing_dead_lettered(db: Engine, queue: PostgresQueue, settings: Settings) -> None:
    now = datetime.now(UTC)
    assert queue.depth(now=now).dead_lettered == 0
    maintenance = make_maintainer(db, queue, settings)
    assert maintenance.run_once(now).counts == {}  # nothing recorded failed, nothing stuck


# --- primary down, backup up ----------------------------------------------------------------


@pytest.mark.parametrize("outage", ["503", "refused"])
def test_primary_outage_goes_to_the_backup_without_dead_letters_and_the_probe_brings_it_back(
    db: Engine,
    queue: PostgresQueue,
    settings: Settings,
    start_fake: Callable[[int], FakeProvider],
    make_sender: Callable[[FailoverProvider, RetryPolicy], Sender],
    outage: str,
) -> None:
    n, outage_s = 30, 2.5
    backup = start_fake(0)
    port = closed_port()
    primary = start_fake(0) if outage == "503" else None
    if primary is not None:
        primary.inject(always={"kind": "503"})
    primary_url = primary.url if primary is not None else f"http://127.0.0.1:{port}"
    fp = failover(primary_url, backup.url, fail_max=FAIL_MAX, reset_timeout_s=RESET_S)
    sender = make_sender(fp, QUICK)
    coordinator = Coordinator(db, queue, lookahead_s=0, batch_size=1000, worker_id="c")
    ticks: list[TickResult] = []
    opened: list[tuple[int, int]] = []  # (sent before, sent after) of ticks ending "open"

    def tick() -> None:
        now = datetime.now(UTC)
        coordinator.run_once(now)
        before = sent_count(db)
        ticks.append(sender.run_once(now))
        if fp.breaker_states()["primary"] == "open":
            opened.append((before, sent_count(db)))
        time.sleep(0.02)

    # N reminders come due over the outage.
    t0 = datetime.now(UTC)
    due_over(db, t0, n, outage_s / n, "during")
    deadline = time.monotonic() + outage_s + 5
    while (datetime.now(UTC) < t0 + timedelta(seconds=outage_s) or sent_count(db) < n) and (
        time.monotonic() < deadline
    ):
        tick()

    during = deliveries(db)
    assert len(during) == n
    # Each one sent at its first receive, through the backup, in one sender attempt (the
    # failover happens inside the provider call): no retry, no receive burnt.
    assert set(during.values()) == {("sent", "backup", 1)}
    assert accepted(backup) == set(during)
    assert backup.state.duplicates == 0
    assert sum(t.processed for t in ticks) == n
    assert {k for t in ticks for k in t.counts} == {"sent"}  # never providers_unavailable
    # The breaker was first seen open after the tick in which the FAIL_MAX-th send failed.
    assert opened
    assert opened[0][0] < FAIL_MAX <= opened[0][1]
    if primary is not None:
        with primary.state.lock:
            calls = list(primary.state.requests)
        assert accepted(primary) == set()
        assert {r["status"] for r in calls} == {503}
        assert {r["key"] for r in calls} <= set(during)  # each failed over to the backup
        at = [r["at"] for r in calls]
        # The first FAIL_MAX calls came back to back (not yet open)...
        assert at[FAIL_MAX - 1] - at[0] < RESET_S
        # ...then at most one call (the half-open probe) per reset timeout, and the outage
        # outlasted at least one failed probe.
        assert len(calls) > FAIL_MAX
        gaps = [b - a for a, b in zip(at[FAIL_MAX - 1 :], at[FAIL_MAX:], strict=False)]
        assert min(gaps) >= RESET_S - 0.01, gaps
    assert_nothing_dead_lettered(db, queue, settings)

    # The primary comes back (on its address); nothing called it since its last probe.
    if primary is None:
        primary = start_fake(port)
    else:
        primary.inject()
    recovered = datetime.now(UTC)
    calls_before = len(keys_seen(primary))
    assert fp.breaker_states()["primary"] == "open"
    # M more come due once the probe is due (the last failed probe was before recovery).
    m = 5
    due_over(db, recovered + timedelta(seconds=RESET_S), m, 0.05, "after")
    deadline = time.monotonic() + RESET_S + 5
    while sent_count(db) < n + m and time.monotonic() < deadline:
        tick()

    after = {k: v for k, v in deliveries(db).items() if k not in during}
    assert len(after) == m
    assert set(after.values()) == {("sent", "primary", 1)}
    with primary.state.lock:
        back = primary.state.requests[calls_before:]
    assert [r["status"] for r in back] == [200] * m  # the first one was the probe
    assert accepted(primary) == set(after)
    assert len(accepted(backup)) == n  # traffic returned to the primary
    assert fp.breaker_states()["primary"] == "closed"
    assert sum(t.processed for t in ticks) == n + m
    assert_nothing_dead_lettered(db, queue, settings)


# --- both providers down ------------------------------------------------------------------


def test_both_down_the_sender_stops_receiving_then_delivers_everything_once(
    db: Engine,
    queue: PostgresQueue,
    settings: Settings,
    start_fake: Callable[[int], FakeProvider],
    make_sender: Callable[[FailoverProvider, RetryPolicy], Sender],
) -> None:
    primary, backup = start_fake(0), start_fake(0)
    primary.inject(always={"kind": "503"})
    backup.inject(always={"kind": "500"})
    fp = failover(primary.url, backup.url, fail_max=FAIL_MAX, reset_timeout_s=RESET_S)
    sender = make_sender(fp, QUICK)
    coordinator = Coordinator(db, queue, lookahead_s=0, batch_size=1000, worker_id="c")
    # Three groups of 4: the first trips both breakers, the others come due (and wait,
    # visible) while they are open.
    t0 = datetime.now(UTC)
    for g, offset_s in enumerate((0.0, 0.5, 1.6)):
        insert_due_reminders(db, 4, next_run_utc=t0 + timedelta(seconds=offset_s), title=f"g{g}")
    n = 12
    stats = {"not_ready": 0, "probes": 0, "max_receive_count": 0}

    def tick() -> None:
        now = datetime.now(UTC)
        coordinator.run_once(now)
        before = receive_counts(db)
        wait_s = fp.seconds_until_ready()
        states = fp.breaker_states()
        result = sender.run_once(now)
        after = receive_counts(db)
        if wait_s > 0.05:
            # Every breaker open, no probe due: the sender must not receive.
            assert after == before
            assert result.processed == 0
            assert result.counts == {"providers_unavailable": 1}
            stats["not_ready"] += 1
        elif "closed" not in states.values():
            assert result.processed <= 1  # only the half-open probe's message
            stats["probes"] += result.processed
        for receive_count, dead_lettered in after.values():
            assert not dead_lettered
            assert receive_count < MAX_RECEIVE_COUNT
            stats["max_receive_count"] = max(stats["max_receive_count"], receive_count)
        time.sleep(0.03)

    outage_end = time.monotonic() + 3.0
    while time.monotonic() < outage_end:
        tick()
    assert fp.breaker_states() == {"primary": "open", "backup": "open"}
    assert sent_count(db) == 0
    assert stats["not_ready"] >= 10
    assert stats["probes"] >= 1  # the outage outlasted a failed probe

    primary.inject()
    backup.inject()
    deadline = time.monotonic() + RESET_S + 5
    while sent_count(db) < n and time.monotonic() < deadline:
        tick()

    rows = deliveries(db)
    assert len(rows) == n
    # The primary is tried first, so its probe (due no later than the backup's) closes it
    # and it takes everything; the backup only ever answered 500.
    assert {status for status, _, _ in rows.values()} == {"sent"}
    assert {provider for _, provider, _ in rows.values()} == {"primary"}
    assert accepted(primary) == set(rows)
    assert accepted(backup) == set()
    assert primary.state.duplicates == 0
    assert fp.breaker_states()["primary"] == "closed"
    assert receive_counts(db) == {}  # every message deleted after its send
    assert_nothing_dead_lettered(db, queue, settings)
    with db.connect() as conn:
        assert conn.execute(text("SELECT DISTINCT status FROM reminders")).scalars().all() == [
            "completed"
        ]


# --- ambiguous timeouts -------------------------------------------------------------------


def claim_one_due(db: Engine, queue: PostgresQueue) -> datetime:
    """One one-time reminder due now, claimed into `queue`; returns that now (aware UTC)."""
    now = datetime.now(UTC)
    insert_due_reminders(db, 1, next_run_utc=now)
    Coordinator(db, queue, lookahead_s=0, batch_size=10, worker_id="c").run_once(now)
    return now


def slow_primary(
    start_fake: Callable[[int], FakeProvider], *faults: dict[str, object]
) -> tuple[FakeProvider, FakeProvider, FailoverProvider]:
    """A primary fake given `faults` (one per call), a healthy backup, and the failover
    over them whose client gives up reading after 0.5 s (an answer later than that is an
    ambiguous timeout)."""
    primary, backup = start_fake(0), start_fake(0)
    primary.inject(*faults)
    return primary, backup, failover(primary.url, backup.url, fail_max=FAIL_MAX, read_timeout_s=0.5)


def test_timeout_after_send_is_retried_on_the_primary_with_the_same_key_backup_never_called(
    db: Engine,
    queue: PostgresQueue,
    start_fake: Callable[[int], FakeProvider],
    make_sender: Callable[..., Sender],
) -> None:
    # The first call is answered after 1.5 s (the client gives up at 0.5 s, after sending);
    # the retry takes 0.3 s, long enough to look at the row while it is in flight.
    primary, backup, fp = slow_primary(
        start_fake, {"kind": "timeout", "seconds": 1.5}, {"kind": "latency", "seconds": 0.3}
    )
    # A first send without a lease: leased at its first (ambiguous) failure, retried
    # in process under that lease (docs/design.md, "First sends without a lease").
    sender = make_sender(fp, RetryPolicy(attempts=4, base_s=0.02, max_wait_s=0.5, budget_s=60))
    assert sender.leaseless_first_send
    now = claim_one_due(db, queue)

    result: list[TickResult] = []
    worker = threading.Thread(target=lambda: result.append(sender.run_once(now)))
    worker.start()
    deadline = time.monotonic() + 5
    while len(keys_seen(primary)) < 2 and time.monotonic() < deadline:
        time.sleep(0.01)
    # The retry is in flight: a worker crashing now leaves the row naming the primary.
    (in_flight,) = deliveries(db).values()
    worker.join(10)

    assert in_flight[:2] == ("sending", "primary")
    assert result[0].counts == {"sent": 1}
    (key,) = deliveries(db)
    assert deliveries(db)[key] == ("sent", "primary", 2)
    assert keys_seen(primary) == [key, key]
    assert keys_seen(backup) == []
    deadline = time.monotonic() + 3
    while primary.state.duplicates < 1 and time.monotonic() < deadline:
        time.sleep(0.05)  # the first call finishes late on the primary: a duplicate
    assert (accepted(primary), primary.state.duplicates) == ({key}, 1)
    assert fp.pinned_provider(key) is None
    assert fp.breaker_states() == {"primary": "closed", "backup": "closed"}


def test_an_ambiguous_first_send_without_a_lease_is_retried_on_its_provider_only(
    db: Engine,
    queue: PostgresQueue,
    start_fake: Callable[[int], FakeProvider],
    make_sender: Callable[..., Sender],
) -> None:
    # A first send without a lease whose one allowed call fails ambiguously: leased at
    # that failure, its row released naming the primary, and the next receive goes to
    # the primary only, with the same key. docs/design.md, "First sends without a lease".
    primary, backup, fp = slow_primary(start_fake, {"kind": "timeout", "seconds": 1.5})
    sender = make_sender(fp, RetryPolicy(attempts=1, base_s=0.02, max_wait_s=0.5, budget_s=60))
    assert sender.leaseless_first_send
    now = claim_one_due(db, queue)

    assert sender.run_once(now).counts == {"retry": 1}
    ((key, released),) = deliveries(db).items()
    assert released == ("sending", "primary", 1)
    fp.unpin(key)  # as another worker would see it: only the row names the primary
    later = datetime.now(UTC) + timedelta(minutes=5)  # past the backoff
    assert sender.run_once(later).counts == {"sent": 1}

    assert deliveries(db)[key] == ("sent", "primary", 2)
    assert keys_seen(primary) == [key, key]
    assert keys_seen(backup) == []


@pytest.mark.parametrize("primary_state", ["failing", "breaker_open"])
def test_a_worker_taking_over_an_ambiguous_row_sends_only_to_the_provider_it_names(
    db: Engine,
    queue: PostgresQueue,
    start_fake: Callable[[int], FakeProvider],
    make_sender: Callable[[FailoverProvider, RetryPolicy], Sender],
    primary_state: str,
) -> None:
    primary, backup = start_fake(0), start_fake(0)
    now = claim_one_due(db, queue)

    # Worker A: one attempt, which reaches the primary and times out (the primary takes
    # the message 0.6 s later); A gives the row and the message back.
    primary.inject({"kind": "timeout", "seconds": 0.6})
    fp_a = failover(primary.url, backup.url, fail_max=FAIL_MAX, reset_timeout_s=RESET_S,
                    read_timeout_s=0.3)  # fmt: skip
    a = make_sender(fp_a, RetryPolicy(attempts=1, base_s=0.02))
    assert a.run_once(now).counts == {"retry": 1}
    (key,) = deliveries(db)
    assert deliveries(db)[key] == ("sending", "primary", 1)
    with db.connect() as conn:
        assert conn.execute(text("SELECT locked_at FROM delivery_log")).scalar_one() is None
    deadline = time.monotonic() + 3
    while key not in accepted(primary) and time.monotonic() < deadline:
        time.sleep(0.02)
    assert key in accepted(primary)  # the ambiguous attempt was in fact delivered

    # The primary now fails with 503 (which would fail over a fresh key). Worker B has a
    # fresh FailoverProvider: no pin in memory, only the row says where the key went.
    primary.inject(always={"kind": "503"})
    fp_b = failover(primary.url, backup.url, fail_max=FAIL_MAX, reset_timeout_s=RESET_S)
    assert fp_b.pinned_provider(key) is None
    others: list[str] = []
    if primary_state == "breaker_open":
        # Other traffic opens B's breaker on the primary (and goes to the backup).
        others = [new_key() for _ in range(FAIL_MAX)]
        receipts = [fp_b.send(EMAIL, idempotency_key=k) for k in others]
        assert {r.provider for r in receipts} == {"backup"}
        assert fp_b.breaker_states()["primary"] == "open"
    # Enough in-process attempts to trip the breaker and wait for its probe; the primary
    # recovers while B waits.
    b = make_sender(fp_b, RetryPolicy(attempts=6, base_s=0.02, max_wait_s=2, budget_s=60))
    recovery = threading.Timer(0.5, primary.inject)
    recovery.start()
    try:
        # A's backoff has passed (measured from now: A's run took a while on a loaded
        # machine, and it hid the message from the time it gave it back)
        result = b.run_once(datetime.now(UTC) + timedelta(seconds=1))
    finally:
        recovery.cancel()

    assert result.counts == {"sent": 1}
    assert deliveries(db)[key][:2] == ("sent", "primary")
    assert key not in keys_seen(backup)
    assert accepted(backup) == set(others)
    assert accepted(primary) == {key}
    assert primary.state.duplicates == 1  # B's send was deduplicated by the primary
    assert set(keys_seen(primary)) - set(others) == {key}
    assert keys_seen(primary).count(key) >= 2  # A's attempt, then B's (failures, probe)
    assert fp_b.breaker_states()["primary"] == "closed"
