"""Retention (docs/design.md, "Retention"; issue 7): delivery_log partitioned weekly by
run_time_utc, partitions made ahead and dropped once expired, expired rows of the other
tables deleted in chunks; pending and in-flight work never deleted. And migration 0005,
which turns the plain delivery_log of 0004 into the partitioned one without losing a row.

Expected values come from the rules as the issue states them: a partition goes only when
its whole week is older than the retention period and it holds no `sending` row; weeks
are ISO 8601 weeks (Monday 00:00 UTC, checked with `date.isoweekday()`); unpublished
outbox rows, queue messages and pending reminders are never deleted.
"""

from __future__ import annotations

import logging
import threading
import time
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import UTC, date, datetime, timedelta

import pytest
from sqlalchemy import Connection, Engine, create_engine, text
from sqlalchemy.exc import IntegrityError

from coordinator.maintenance.maintainer import Maintainer
from coordinator.maintenance.retention import Retention, week_start
from coordinator.service import Coordinator
from reminder_core.db.migrate import upgrade
from reminder_core.queue import PostgresQueue
from reminder_core.settings import Settings
from reminder_core.store import delivery_log
from tests.integration.helpers import insert_due_reminders
from tests.support.locks import reading
from tests.support.maintenance import make_maintainer
from tests.support.sending import Clock, CountingProvider, make_sender
from tests.support.workloads import fresh_database as empty_database

WEEK = timedelta(days=7)
# Monday 2031-03-03 00:00 UTC: the first week of the scenarios below.
MONDAY = datetime(2031, 3, 3, tzinfo=UTC)
TERMINAL = ("sent", "failed", "missed")


def test_weeks_are_iso_weeks_starting_monday_utc() -> None:
    assert date(2031, 3, 3).isoweekday() == 1  # a Monday (ISO 8601: Monday is day 1)
    assert week_start(datetime(2031, 3, 3, tzinfo=UTC)) == MONDAY
    assert week_start(datetime(2031, 3, 9, 23, 59, 59, tzinfo=UTC)) == MONDAY  # Sunday
    assert week_start(datetime(2031, 3, 10, tzinfo=UTC)) == MONDAY + WEEK
    # 2031-03-10 00:30 in Paris (UTC+1) is still Sunday 23:30 UTC: the week is UTC's.
    paris = datetime(2031, 3, 10, 0, 30, tzinfo=UTC) - timedelta(hours=1)
    assert week_start(paris.astimezone(UTC)) == MONDAY


# --- fixtures and helpers -----------------------------------------------------------------


def weekly_partitions(db: Engine) -> dict[str, datetime]:
    """Partition name -> week start, for every weekly partition of delivery_log."""
    return {f"delivery_log_p{start:%Y%m%d}": start for start in Retention(db).partitions()}


def drop_weekly_partitions(db: Engine) -> None:
    with db.begin() as conn:
        conn.execute(text("TRUNCATE delivery_log"))
        for start in weekly_partitions(db).values():
            outcome = conn.execute(
                text("SELECT reminders_delivery_log_drop_partition(:w, 'infinity')"), {"w": start}
            ).scalar_one()
            assert outcome == "dropped"


@pytest.fixture
def partitions(db: Engine) -> Iterator[None]:
    """The test starts with no weekly partition (only the default one), and the test
    run's shared database gets back the ones migration 0005 made (empty) afterwards."""
    before = weekly_partitions(db)
    drop_weekly_partitions(db)
    yield
    drop_weekly_partitions(db)
    with db.begin() as conn:
        for start in before.values():
            conn.execute(text("SELECT reminders_delivery_log_create_partition(:w)"), {"w": start})


def reminder(db: Engine, *, status: str = "completed", next_run: datetime | None = None) -> str:
    with db.begin() as conn:
        return str(
            conn.execute(
                text(
                    "INSERT INTO reminders (user_id, title, start_local, timezone, rrule,"
                    " status, next_run_utc) VALUES ('alice', 'Water the plants',"
                    " '2031-01-01T09:00', 'UTC', 'FREQ=HOURLY', :status, :next) RETURNING id"
                ),
                {"status": status, "next": next_run},
            ).scalar_one()
        )


def deliver(db: Engine, reminder_id: str, run_time: datetime, status: str) -> None:
    """A delivery row as the sender leaves it (`sending` under a lease, or terminal)."""
    with db.begin() as conn:
        conn.execute(
            text(
                "INSERT INTO delivery_log (reminder_id, user_id, run_time_utc, status, sent_at,"
                " locked_at, lease_token) VALUES (:r, 'alice', :t, :s, :sent, :locked, :lease)"
            ),
            {
                "r": reminder_id,
                "t": run_time,
                "s": status,
                "sent": run_time if status == "sent" else None,
                "locked": run_time if status == "sending" else None,
                "lease": uuid.uuid4() if status == "sending" else None,
            },
        )


def rows_by_week(db: Engine) -> dict[datetime, list[str]]:
    """Statuses of the delivery rows, by week of run_time_utc."""
    out: dict[datetime, list[str]] = {}
    with db.connect() as conn:
        for r in conn.execute(text("SELECT run_time_utc, status FROM delivery_log")):
            out.setdefault(week_start(r.run_time_utc), []).append(r.status)
    return {k: sorted(v) for k, v in sorted(out.items())}


def partition_of(db: Engine, run_time: datetime) -> str:
    with db.connect() as conn:
        return str(
            conn.execute(
                text("SELECT tableoid::regclass::text FROM delivery_log WHERE run_time_utc = :t"),
                {"t": run_time},
            ).scalar_one()
        )


def maintenance(db: Engine, settings: Settings, retention: Retention) -> Maintainer:
    return make_maintainer(
        db, PostgresQueue(db, name="reminders", max_receive_count=5), settings,
        retention=retention,
    )  # fmt: skip


# --- delivery_log partitions ----------------------------------------------------------------


@pytest.mark.usefixtures("partitions")
def test_a_tick_makes_the_partitions_ahead_and_runs_again_after_the_interval(
    db: Engine, settings: Settings
) -> None:
    now = datetime(2032, 5, 12, 15, tzinfo=UTC)  # a Wednesday
    assert date(2032, 5, 10).isoweekday() == 1
    m = maintenance(db, settings, Retention(db, partitions_ahead=4))
    assert m.run_once(now).counts == {"partitions_created": 5}
    made = {f"delivery_log_p{d}" for d in (20320510, 20320517, 20320524, 20320531, 20320607)}
    assert made <= set(weekly_partitions(db))
    # Not due again within RETENTION_INTERVAL_S (600 s); then nothing is missing.
    assert m.run_once(now + timedelta(seconds=599)).counts == {}
    assert m.run_once(now + timedelta(seconds=600)).counts == {}
    # A week later the next week is made.
    assert m.run_once(now + WEEK).counts == {"partitions_created": 1}
    assert "delivery_log_p20320614" in weekly_partitions(db)


@pytest.mark.usefixtures("partitions")
def test_expired_weeks_go_by_partition_and_a_sending_row_keeps_its_week(
    db: Engine, settings: Settings, caplog: pytest.LogCaptureFixture
) -> None:
    # Eight weeks of deliveries, the maintenance running through them; retention 28 days.
    m = maintenance(db, settings, Retention(db, delivery_log_retention_days=28, partitions_ahead=1))
    rid = reminder(db)
    # In flight since week 1: its reminder still points at it (the reaper leaves it to
    # the next claim), so the row stays `sending`.
    in_flight = MONDAY + WEEK + timedelta(days=3)
    live = reminder(db, status="pending", next_run=in_flight)
    weeks = [MONDAY + k * WEEK for k in range(8)]
    for k, start in enumerate(weeks):
        m.run_once(start + timedelta(days=2, hours=12))  # every Wednesday noon
        for n, status in enumerate(TERMINAL):
            deliver(db, rid, start + timedelta(days=1, hours=n), status)
        if k == 1:
            deliver(db, live, in_flight, "sending")
        m.run_once(start + timedelta(days=4))
    now = MONDAY + 8 * WEEK + timedelta(days=2, hours=12)  # Wednesday 2031-04-30 12:00
    cutoff = now - timedelta(days=28)  # Wednesday 2031-04-02 12:00
    assert weeks[3] + WEEK <= cutoff < weeks[4] + WEEK  # weeks 0-3 whole before it
    with caplog.at_level(logging.WARNING, logger="coordinator.maintenance.retention"):
        counts = m.run_once(now).counts
    # Week 3 expires now (0 and 2 went on earlier Wednesdays); week 1 is kept again.
    assert counts == {"partitions_created": 1, "partitions_dropped": 1, "partitions_kept": 1}
    assert "kept: it holds a `sending` row" in caplog.text
    assert (
        rows_by_week(db)
        == {
            weeks[1]: sorted([*TERMINAL, "sending"]),  # the whole week stays with its live row
            **{w: sorted(TERMINAL) for w in weeks[4:]},
        }
    )
    names = set(weekly_partitions(db))
    assert {f"delivery_log_p{w:%Y%m%d}" for w in (weeks[0], weeks[2], weeks[3])} & names == set()
    assert {f"delivery_log_p{w:%Y%m%d}" for w in [weeks[1], *weeks[4:]]} <= names
    # Once the occurrence ends, its week goes at the next run.
    with db.begin() as conn:
        conn.execute(text("UPDATE delivery_log SET status = 'failed' WHERE status = 'sending'"))
    assert m.run_once(now + timedelta(seconds=600)).counts == {"partitions_dropped": 1}
    assert weeks[1] not in rows_by_week(db)
    with db.connect() as conn:  # reminders are not retention's business
        assert conn.execute(text("SELECT count(*) FROM reminders")).scalar_one() == 2


@pytest.mark.usefixtures("partitions")
def test_the_default_partition_takes_any_week_and_keeps_only_what_is_not_expired(
    db: Engine,
) -> None:
    now = datetime(2033, 6, 8, 12, tzinfo=UTC)
    retention = Retention(db, delivery_log_retention_days=90, partitions_ahead=2, batch_size=2)
    rid = reminder(db)
    # No partition covers these: a replay of 2020, an occurrence in 2040.
    old = [datetime(2020, 1, 6, h, tzinfo=UTC) for h in range(5)]
    for t in old:
        deliver(db, rid, t, "sent")
    deliver(db, rid, datetime(2020, 1, 7, tzinfo=UTC), "sending")
    deliver(db, rid, datetime(2040, 1, 2, tzinfo=UTC), "sent")
    assert partition_of(db, old[0]) == "delivery_log_default"
    result = retention.run(now)
    assert (result.delivery_log_deleted, result.more) == (5, False)  # 3 chunks of <= 2
    assert rows_by_week(db) == {
        week_start(datetime(2020, 1, 7, tzinfo=UTC)): ["sending"],
        week_start(datetime(2040, 1, 2, tzinfo=UTC)): ["sent"],
    }


@pytest.mark.usefixtures("partitions")
def test_a_new_partition_takes_over_the_rows_the_default_held_for_its_week(
    db: Engine,
) -> None:
    now = datetime(2034, 1, 4, 12, tzinfo=UTC)
    assert date(2034, 1, 2).isoweekday() == 1
    rid = reminder(db)
    ahead = datetime(2034, 1, 31, 9, tzinfo=UTC)  # week of Monday 2034-01-30: 4 weeks ahead
    deliver(db, rid, ahead, "sending")
    deliver(db, rid, ahead + timedelta(hours=1), "sent")
    with db.connect() as conn:
        before = conn.execute(text("SELECT * FROM delivery_log ORDER BY run_time_utc")).all()
    assert partition_of(db, ahead) == "delivery_log_default"
    result = Retention(db, partitions_ahead=4).run(now)
    assert (result.partitions_created, result.rows_moved) == (5, 2)
    assert partition_of(db, ahead) == "delivery_log_p20340130"
    with db.connect() as conn:
        after = conn.execute(text("SELECT * FROM delivery_log ORDER BY run_time_utc")).all()
    assert after == before  # same rows, same ids, same lease
    # The unique key holds across the move.
    with pytest.raises(IntegrityError):
        deliver(db, rid, ahead, "sent")


@pytest.mark.usefixtures("partitions")
def test_busy_locks_make_retention_wait_for_the_next_run(db: Engine) -> None:
    now = datetime(2035, 3, 7, 12, tzinfo=UTC)
    retention = Retention(db, partitions_ahead=0, lock_timeout_s=0.2)
    with db.connect() as reader:
        reader.execute(text("SELECT count(*) FROM delivery_log"))  # holds ACCESS SHARE
        started = time.monotonic()
        assert retention.run(now).partitions_created == 0
        assert time.monotonic() - started < 5
        reader.rollback()
    assert retention.run(now).partitions_created == 1


def test_truncate_empties_every_partition(db: Engine) -> None:
    rid = reminder(db)
    deliver(db, rid, datetime.now(UTC), "sent")  # this week's partition (made by 0005)
    deliver(db, rid, datetime(2020, 1, 6, tzinfo=UTC), "sent")  # the default partition
    with db.begin() as conn:
        conn.execute(text("TRUNCATE delivery_log, reminders RESTART IDENTITY CASCADE"))
        assert conn.execute(text("SELECT count(*) FROM delivery_log")).scalar_one() == 0


def test_sender_heartbeat_and_completion_reach_a_row_in_a_weekly_partition(
    db: Engine, settings: Settings
) -> None:
    now = datetime.now(UTC).replace(microsecond=0)  # this week: a partition made by 0005
    with db.begin() as conn:  # (again, if a retention test on this database dropped it)
        delivery_log.create_partition(conn, week_start=week_start(now))
    insert_due_reminders(db, 1, next_run_utc=now)
    queue = PostgresQueue(db, name="reminders", max_receive_count=5)
    Coordinator(db, queue, lookahead_s=0, batch_size=10, worker_id="c").run_once(now)
    provider = CountingProvider(settings.effective_mail_dir, pause_s=1.0)
    # The heartbeat and the completion of a leased row (a first send has no row yet).
    sender = make_sender(db, queue, settings, provider, Clock(now), leaseless_first_send=False)
    done: dict[str, int] = {}
    worker = threading.Thread(target=lambda: done.update(sender.run_once(now).counts))
    worker.start()
    while not provider.calls:
        time.sleep(0.02)
    beat = now + timedelta(seconds=20)
    assert sender.heartbeat(beat) == 1
    with db.connect() as conn:
        row = conn.execute(
            text("SELECT status, locked_at, tableoid::regclass::text AS part FROM delivery_log")
        ).one()
    worker.join(10)
    sender.close()
    assert (row.status, row.locked_at) == ("sending", beat)
    assert row.part == f"delivery_log_p{week_start(now):%Y%m%d}"
    assert done == {"sent": 1}
    with db.connect() as conn:
        assert conn.execute(text("SELECT status FROM delivery_log")).scalar_one() == "sent"


# --- chunked deletes ------------------------------------------------------------------------


def test_published_outbox_rows_go_in_chunks_unpublished_ones_never(db: Engine) -> None:
    now = datetime(2031, 6, 1, 12, tzinfo=UTC)
    with db.begin() as conn:
        for published, n in ((now - timedelta(days=2), 12), (now - timedelta(hours=1), 3)):
            conn.execute(
                text(
                    "INSERT INTO outbox (payload, published_at, created_at)"
                    " SELECT '{}'::jsonb, :p, :p FROM generate_series(1, :n)"
                ),
                {"p": published, "n": n},
            )
        conn.execute(  # claimed long ago, never published (the sweeper's work)
            text(
                "INSERT INTO outbox (payload, created_at)"
                " SELECT '{}'::jsonb, :c FROM generate_series(1, 4)"
            ),
            {"c": now - timedelta(days=30)},
        )
    retention = Retention(db, outbox_retention_days=1, batch_size=5, max_chunks=2)
    first = retention.run(now)
    assert (first.outbox_deleted, first.more) == (10, True)  # two full chunks, rows left
    second = retention.run(now)
    assert (second.outbox_deleted, second.more) == (2, False)
    with db.connect() as conn:
        left = conn.execute(
            text(
                "SELECT published_at IS NULL AS unpublished, count(*) AS n FROM outbox"
                " GROUP BY 1 ORDER BY 1"
            )
        ).all()
    assert [tuple(r) for r in left] == [(False, 3), (True, 4)]


def test_a_full_chunk_makes_the_maintenance_run_retention_again_at_once(
    db: Engine, settings: Settings
) -> None:
    now = datetime(2031, 6, 1, 12, tzinfo=UTC)
    with db.begin() as conn:
        conn.execute(
            text(
                "INSERT INTO outbox (payload, published_at, created_at)"
                " SELECT '{}'::jsonb, :p, :p FROM generate_series(1, 7)"
            ),
            {"p": now - timedelta(days=3)},
        )
    m = maintenance(db, settings, Retention(db, partitions_ahead=0, batch_size=3, max_chunks=1))
    first = m.run_once(now)
    assert (first.counts.get("outbox_deleted"), first.more) == (3, True)
    assert m.run_once(now + timedelta(seconds=1)).counts.get("outbox_deleted") == 3
    assert m.run_once(now + timedelta(seconds=2)).counts.get("outbox_deleted") == 1
    assert m.run_once(now + timedelta(seconds=3)).counts.get("outbox_deleted") is None


def test_webhook_events_expire_but_never_inside_the_rematch_window(db: Engine) -> None:
    now = datetime(2031, 6, 1, 12, tzinfo=UTC)
    with db.begin() as conn:
        for n, age in enumerate((timedelta(days=100), timedelta(days=91), timedelta(days=10))):
            conn.execute(
                text(
                    "INSERT INTO webhook_events (provider, event_id, kind, recipient, reason,"
                    " received_at, raw_body, outcome) VALUES ('ses', :e, 'hard_bounce',"
                    " 'a@example.com', 'r', :at, '{}', 'unmatched')"
                ),
                {"e": f"e{n}", "at": now - age},
            )
    assert Retention(db, webhook_events_retention_days=90).run(now).webhook_events_deleted == 2
    # A rematch window longer than the retention wins: nothing younger than it goes.
    keep = Retention(db, webhook_events_retention_days=1, keep_webhook_events_s=30 * 86400)
    assert keep.run(now).webhook_events_deleted == 0
    with db.connect() as conn:
        assert conn.execute(text("SELECT event_id FROM webhook_events")).scalars().all() == ["e2"]


def test_pending_and_in_flight_work_is_never_deleted(db: Engine) -> None:
    now = datetime(2031, 6, 1, 12, tzinfo=UTC)
    long_ago = now - timedelta(days=400)
    insert_due_reminders(db, 2, next_run_utc=long_ago)  # pending, very late
    queue = PostgresQueue(db, name="reminders", max_receive_count=1)
    queue.send_batch([{"n": 1}, {"n": 2}], now=long_ago, delays_s=[0, 0])
    queue.receive(now=long_ago, max_messages=1, visibility_timeout_s=30)
    queue.receive(now=long_ago + timedelta(minutes=1), max_messages=2, visibility_timeout_s=30)
    assert queue.depth(now=now).dead_lettered == 1  # received more than once: DLQ
    with db.begin() as conn:
        conn.execute(
            text("INSERT INTO outbox (payload, created_at) VALUES ('{}', :c)"), {"c": long_ago}
        )
    Retention(db, outbox_retention_days=1, webhook_events_retention_days=1).run(now)
    with db.connect() as conn:
        counts = {
            t: conn.execute(text(f"SELECT count(*) FROM {t}")).scalar_one()
            for t in ("reminders", "queue_messages", "outbox")
        }
    assert counts == {"reminders": 2, "queue_messages": 2, "outbox": 1}


# --- migration 0005 -------------------------------------------------------------------------


@pytest.fixture
def fresh_database(admin_url: str) -> Iterator[str]:
    """An empty database of its own (this test migrates it step by step)."""
    with empty_database(admin_url, "reminders_mig") as (url, _):
        yield url


def test_migration_0005_keeps_every_delivery_row_and_its_constraints(fresh_database: str) -> None:
    from alembic import command

    from reminder_core.db.migrate import alembic_config

    assert date(2019, 12, 30).isoweekday() == 1  # Monday of ISO week 1 of 2020
    upgrade(fresh_database, "0004")
    engine = create_engine(fresh_database)
    this_week = week_start(datetime.now(UTC))
    times = [
        datetime(2019, 12, 30, 8, tzinfo=UTC),  # long expired: a partition of its own
        this_week - 20 * WEEK + timedelta(days=3),
        this_week + timedelta(hours=1),
        this_week + timedelta(days=6, hours=23, minutes=59),  # last minute of the week
        this_week + 30 * WEEK,  # further ahead than the 4 weeks made ahead
    ]
    try:
        rid = reminder(engine)
        for n, t in enumerate(times):
            deliver(engine, rid, t, ("sent", "sending", "failed", "missed", "cancelled")[n])
        with engine.connect() as conn:
            before = conn.execute(text("SELECT * FROM delivery_log ORDER BY id")).all()
        upgrade(fresh_database)
        with engine.connect() as conn:
            after = conn.execute(text("SELECT * FROM delivery_log ORDER BY id")).all()
            kind = conn.execute(
                text("SELECT relkind FROM pg_class WHERE relname = 'delivery_log'")
            ).scalar_one()
            pk = conn.execute(
                text(
                    "SELECT array_agg(a.attname ORDER BY k.n) FROM pg_constraint c,"
                    " unnest(c.conkey) WITH ORDINALITY AS k(attnum, n)"
                    " JOIN pg_attribute a ON a.attnum = k.attnum"
                    " WHERE c.conname = 'pk_delivery_log' AND a.attrelid = c.conrelid"
                )
            ).scalar_one()
            where = dict(
                conn.execute(
                    text("SELECT run_time_utc, tableoid::regclass::text FROM delivery_log")
                ).all()
            )
        # Every row and value kept (later migrations add columns, NULL on old rows).
        columns = list(before[0]._mapping) if before else []
        assert [tuple(r._mapping[c] for c in columns) for r in after] == [tuple(r) for r in before]
        assert kind == "p"  # a partitioned table
        assert pk == ["id", "run_time_utc"]
        assert where == {
            times[0]: "delivery_log_p20191230",
            times[1]: f"delivery_log_p{week_start(times[1]):%Y%m%d}",
            times[2]: f"delivery_log_p{this_week:%Y%m%d}",
            times[3]: f"delivery_log_p{this_week:%Y%m%d}",
            times[4]: f"delivery_log_p{times[4]:%Y%m%d}",  # every week with rows has one
        }
        # Constraints still hold: the unique occurrence, the checks (the foreign key to
        # reminders is gone since 0016: test_migration_0016_...).
        for bad in (
            lambda: deliver(engine, rid, times[2], "sent"),
            lambda: deliver(engine, rid, this_week + timedelta(hours=5), "done"),
        ):
            with pytest.raises(IntegrityError):
                bad()
        command.check(alembic_config(fresh_database))  # the models say the same
        # And back: 0004's plain table with the same rows.
        command.downgrade(alembic_config(fresh_database), "0004")
        with engine.connect() as conn:
            assert conn.execute(text("SELECT * FROM delivery_log ORDER BY id")).all() == before
            assert (
                conn.execute(
                    text("SELECT relkind FROM pg_class WHERE relname = 'delivery_log'")
                ).scalar_one()
                == "r"
            )
    finally:
        engine.dispose()


# --- migration 0016 -------------------------------------------------------------------------


def _provider_indexes(conn: Connection) -> dict[str, tuple[str, bool]]:
    """Table name -> (definition, valid) of the (provider, provider_message_id) index of
    delivery_log and of each of its partitions."""
    rows = conn.execute(
        text(
            "SELECT t.relname, pg_get_indexdef(i.indexrelid), i.indisvalid"
            " FROM pg_index i JOIN pg_class t ON t.oid = i.indrelid"
            " WHERE (t.relname = 'delivery_log' OR t.oid IN (SELECT inhrelid FROM pg_inherits"
            "        WHERE inhparent = 'delivery_log'::regclass))"
            "   AND pg_get_indexdef(i.indexrelid) LIKE '%(provider, provider_message_id)%'"
        )
    ).all()
    return {name: (definition, valid) for name, definition, valid in rows}


def _foreign_keys(conn: Connection) -> list[str]:
    return list(
        conn.execute(
            text(
                "SELECT conname FROM pg_constraint WHERE contype = 'f'"
                " AND conrelid = 'delivery_log'::regclass"
            )
        ).scalars()
    )


def test_migration_0016_drops_the_foreign_key_and_indexes_only_rows_with_a_message_id(
    fresh_database: str,
) -> None:
    from alembic import command

    from reminder_core.db.migrate import alembic_config

    upgrade(fresh_database, "0015")
    engine = create_engine(fresh_database)
    this_week = week_start(datetime.now(UTC))
    try:
        rid = reminder(engine)
        times = [this_week - 30 * WEEK, this_week + timedelta(hours=1), this_week + 2 * WEEK]
        for t in times:
            deliver(engine, rid, t, "sending")
        with engine.begin() as conn:
            conn.execute(
                text(
                    "UPDATE delivery_log SET status = 'sent', sent_at = run_time_utc,"
                    " provider = 'resend', provider_message_id = 'msg-' || extract(epoch"
                    " FROM run_time_utc)::bigint, locked_at = NULL, lease_token = NULL"
                    " WHERE run_time_utc = :t"
                ),
                {"t": times[1]},
            )
            before = conn.execute(text("SELECT * FROM delivery_log ORDER BY id")).all()
            assert _foreign_keys(conn) == ["fk_delivery_log_reminder_id_reminders"]
            partitions = set(_provider_indexes(conn)) - {"delivery_log"}
        assert len(partitions) >= 3  # the old week, this week's, the ones made ahead

        upgrade(fresh_database)
        with engine.begin() as conn:
            assert conn.execute(text("SELECT * FROM delivery_log ORDER BY id")).all() == before
            assert _foreign_keys(conn) == []
            indexes = _provider_indexes(conn)
            # The parent's index and one on every partition, each partial and valid (a
            # partitioned index is valid only once every partition's index is attached).
            assert set(indexes) == partitions | {"delivery_log"}
            for name, (definition, valid) in indexes.items():
                assert definition.endswith("WHERE (provider_message_id IS NOT NULL)"), name
                assert valid, name
            found = delivery_log.get_by_provider_message(
                conn, provider="resend",
                provider_message_id=f"msg-{int(times[1].timestamp())}",
            )  # fmt: skip
            assert found is not None
            assert found.run_time_utc == times[1]
            # A partition made after the upgrade gets the partial index from the parent.
            far = week_start(this_week + 40 * WEEK)
            conn.execute(text("SELECT reminders_delivery_log_create_partition(:w)"), {"w": far})
            made = _provider_indexes(conn)
            assert made[f"delivery_log_p{far:%Y%m%d}"][0].endswith(
                "WHERE (provider_message_id IS NOT NULL)"
            )
        command.check(alembic_config(fresh_database))  # the models say the same

        # No foreign key: a row naming no reminder is accepted ...
        deliver(engine, str(uuid.uuid4()), this_week + timedelta(hours=2), "sent")
        # ... and the downgrade deletes it (as the cascade would have), keeps the rest,
        # and restores the foreign key and the full index.
        command.downgrade(alembic_config(fresh_database), "0015")
        with engine.begin() as conn:
            assert conn.execute(text("SELECT * FROM delivery_log ORDER BY id")).all() == before
            assert _foreign_keys(conn) == ["fk_delivery_log_reminder_id_reminders"]
            assert not _provider_indexes(conn)["delivery_log"][0].endswith("NOT NULL)")
        with pytest.raises(IntegrityError):
            deliver(engine, str(uuid.uuid4()), this_week + timedelta(hours=3), "sent")
    finally:
        engine.dispose()


def test_migration_0016_interrupted_is_finished_by_running_it_again(fresh_database: str) -> None:
    # What a run killed during its concurrent builds leaves (trial finding: the re-run
    # failed on the foreign key already gone, and an invalid index could be attached):
    # the key dropped, the parent's index made, one partition's index attached, another's
    # invalid (a concurrent build that failed), the rest not started.
    from alembic import command

    from reminder_core.db.migrate import alembic_config

    upgrade(fresh_database, "0015")
    engine = create_engine(fresh_database, isolation_level="AUTOCOMMIT")
    this_week = week_start(datetime.now(UTC))
    try:
        rid = reminder(engine)
        for t in (this_week + timedelta(hours=1), this_week + timedelta(hours=2)):
            deliver(engine, rid, t, "sent")  # two rows of one user in this week's partition
        with engine.connect() as conn:
            parts = sorted(set(_provider_indexes(conn)) - {"delivery_log"})
            this = f"delivery_log_p{this_week:%Y%m%d}"
            done = next(p for p in parts if p != this)
            for sql in (
                "ALTER TABLE delivery_log DROP CONSTRAINT fk_delivery_log_reminder_id_reminders",
                "CREATE INDEX ix_delivery_log_provider_message_new ON ONLY delivery_log"
                " (provider, provider_message_id) WHERE provider_message_id IS NOT NULL",
                f'CREATE INDEX "{done}_provider_message_idx" ON "{done}"'
                " (provider, provider_message_id) WHERE provider_message_id IS NOT NULL",
                f"ALTER INDEX ix_delivery_log_provider_message_new ATTACH PARTITION"
                f' "{done}_provider_message_idx"',
            ):
                conn.execute(text(sql))
            with pytest.raises(IntegrityError):  # duplicate user_id: the build fails ...
                conn.execute(
                    text(f'CREATE UNIQUE INDEX CONCURRENTLY "{this}_provider_message_idx"'
                         f' ON "{this}" (user_id)')
                )  # fmt: skip
            invalid = conn.execute(
                text("SELECT NOT indisvalid FROM pg_index WHERE indexrelid = CAST(:i AS regclass)"),
                {"i": f"{this}_provider_message_idx"},
            ).scalar_one()
            assert invalid  # ... and leaves its index behind, invalid

        upgrade(fresh_database)
        upgrade(fresh_database)  # and once more: nothing left to do
        with engine.connect() as conn:
            assert _foreign_keys(conn) == []
            indexes = _provider_indexes(conn)
            assert set(indexes) == set(parts) | {"delivery_log"}
            for name, (definition, valid) in indexes.items():
                assert definition.endswith("WHERE (provider_message_id IS NOT NULL)"), name
                assert valid, name
            names = set(
                conn.execute(
                    text("SELECT relname FROM pg_class WHERE relname LIKE :p"),
                    {"p": "ix_delivery_log_provider_message%"},
                ).scalars()
            )
            assert names == {"ix_delivery_log_provider_message"}
        command.check(alembic_config(fresh_database))
    finally:
        engine.dispose()


@contextmanager
def _at_0015(url: str) -> Iterator[tuple[Engine, uuid.UUID]]:
    """The database at `url` migrated to 0015 (before 0016) with one reminder; its engine
    and the reminder's id, the engine disposed at the end."""
    upgrade(url, "0015")
    engine = create_engine(url)
    try:
        yield engine, reminder(engine)
    finally:
        engine.dispose()


def test_migration_0016_does_not_queue_writes_behind_a_long_transaction(
    fresh_database: str,
) -> None:
    # Trial finding: a transaction holding a lock on delivery_log made the key's drop wait
    # for it, and every write queued behind that wait (8.5 s). Under lock_timeout the
    # drop gives up every LOCK_TIMEOUT and tries again, so a write waits at most about
    # that long; the migration finishes once the long transaction ends.
    with _at_0015(fresh_database) as (engine, rid):
        hold_s = 6.0
        reader = reading(engine, "delivery_log", hold_s)
        migrating = threading.Thread(target=upgrade, args=(fresh_database, "0016"))
        started = time.monotonic()
        migrating.start()
        time.sleep(1.0)  # the drop is waiting for the reader now
        waits = []
        for n in range(3):
            before = time.monotonic()
            deliver(engine, rid, datetime.now(UTC) + timedelta(minutes=n), "sent")
            waits.append(time.monotonic() - before)
        reader.join()
        migrating.join(60)
        assert not migrating.is_alive()
        assert time.monotonic() - started >= hold_s - 1.5  # it did wait for the reader
        assert max(waits) < 3.5, waits  # lock_timeout 2 s, plus the retry's pause
        with engine.connect() as conn:
            assert _foreign_keys(conn) == []
            assert conn.execute(text("SELECT version_num FROM alembic_version")).scalar() == "0016"


def test_migration_0016_never_deadlocks_a_writer_that_holds_reminders(
    fresh_database: str,
) -> None:
    # Trial finding: the key's drop held delivery_log and waited for reminders, so a
    # writer that had read reminders (as the sender's begin does) and then wrote a
    # delivery row met a deadlock, which PostgreSQL ended by aborting the writer when the
    # writer had waited longer: here it waits behind the drop's queued lock, which waits
    # for a reader of delivery_log. Now the drop takes reminders without waiting.
    with _at_0015(fresh_database) as (engine, rid):
        outcome: list[object] = []
        holding = threading.Event()

        def writer() -> None:
            try:
                with engine.begin() as conn:
                    conn.execute(text("SELECT count(*) FROM reminders"))
                    holding.set()
                    time.sleep(1.0)  # the drop is queued for delivery_log by now
                    conn.execute(
                        text(
                            "INSERT INTO delivery_log (reminder_id, user_id, run_time_utc,"
                            " status, sent_at) VALUES (:r, 'alice', now(), 'sent', now())"
                        ),
                        {"r": rid},
                    )
                outcome.append("committed")
            except Exception as exc:  # the deadlock, if any, is the finding
                outcome.append(exc)

        # The drop gets delivery_log once this reader ends.
        threads = [reading(engine, "delivery_log", 1.5), threading.Thread(target=writer)]
        threads[1].start()
        holding.wait(5)
        upgrade(fresh_database, "0016")
        for thread in threads:
            thread.join(30)
        assert outcome == ["committed"]
        with engine.connect() as conn:
            assert _foreign_keys(conn) == []
            assert conn.execute(text("SELECT count(*) FROM delivery_log")).scalar_one() == 1
