"""`reminders dlq list|replay|purge` and `reminders token` as a user runs them (typer's
CliRunner, real database)."""

from __future__ import annotations

import json
import time
from datetime import UTC, datetime

import pytest
from sqlalchemy import Engine, text
from typer.testing import CliRunner

from reminder_core.settings import Settings
from reminder_core.tokens import verify_principal, verify_token
from reminders.cli import app


@pytest.fixture
def env(settings: Settings, database_url: str) -> dict[str, str]:
    return {
        "DATABASE_URL": database_url,
        "JWT_SECRET": settings.jwt_secret or "",
        "QUEUE_URL": "postgres://reminders",
    }


def dead_letter(db: Engine, reminder_id: str, run_time: datetime) -> int:
    with db.begin() as conn:
        return int(
            conn.execute(
                text(
                    "INSERT INTO queue_messages (queue_name, body, visible_at, receive_count,"
                    " dead_lettered, dead_lettered_at) VALUES ('reminders', CAST(:b AS jsonb),"
                    " :t, 5, true, :t) RETURNING id"
                ),
                {
                    "b": f'{{"reminder_id": "{reminder_id}", "user_id": "alice",'
                    f' "run_time_utc": "{run_time.isoformat()}", "version": 1}}',
                    "t": run_time,
                },
            ).scalar_one()
        )


def test_dlq_list_replay_and_purge(db: Engine, env: dict[str, str]) -> None:
    run_time = datetime(2030, 1, 1, 9, tzinfo=UTC)
    with db.begin() as conn:
        rid = str(
            conn.execute(
                text(
                    "INSERT INTO reminders (user_id, title, start_local, timezone, status)"
                    " VALUES ('alice', 't', '2030-01-01T09:00', 'UTC', 'failed') RETURNING id"
                )
            ).scalar_one()
        )
        conn.execute(
            text(
                "INSERT INTO delivery_log (reminder_id, user_id, run_time_utc, status)"
                " VALUES (:r, 'alice', :t, 'failed')"
            ),
            {"r": rid, "t": run_time},
        )
    first = dead_letter(db, rid, run_time)
    second = dead_letter(db, rid, run_time)
    runner = CliRunner()

    listed = runner.invoke(app, ["dlq", "list"], env=env | {"COLUMNS": "80"})  # no TTY
    assert listed.exit_code == 0, listed.output
    assert rid in listed.stdout  # whole, never cut to "556bd5f4-d…" (new-user trial)
    assert str(first) in listed.stdout

    as_json = runner.invoke(app, ["dlq", "list", "--json"], env=env)
    assert as_json.exit_code == 0, as_json.output
    assert json.loads(as_json.stdout) == [
        {
            "id": str(letter),
            "reminder_id": rid,
            "run_time_utc": run_time.isoformat(),
            "receive_count": 5,
            "dead_lettered_at": run_time.isoformat(),
            "recorded_at": None,
        }
        for letter in (first, second)
    ]

    replayed = runner.invoke(app, ["dlq", "replay", "--id", str(first)], env=env)
    assert replayed.exit_code == 0, replayed.output
    assert "redriven: 1" in replayed.output
    with db.connect() as conn:
        assert conn.execute(text("SELECT status FROM delivery_log")).scalar_one() == "sending"
        body = conn.execute(
            text("SELECT body FROM queue_messages WHERE id = :i AND NOT dead_lettered"),
            {"i": first},
        ).scalar_one()
    assert body["replay"] is True

    missing = runner.invoke(app, ["dlq", "replay", "--id", "999999"], env=env)
    assert missing.exit_code == 1
    assert "not found: 1" in missing.stdout
    assert "error: not in the dead-letter queue: 999999" in missing.stderr

    refused = runner.invoke(app, ["dlq", "purge"], env=env)
    assert refused.exit_code == 2
    purged = runner.invoke(app, ["dlq", "purge", "--all"], env=env)
    assert purged.exit_code == 0, purged.output
    assert "purged: 1" in purged.output  # the second letter; the first was redriven
    with db.connect() as conn:
        assert (
            conn.execute(
                text("SELECT count(*) FROM queue_messages WHERE id = :i"), {"i": second}
            ).scalar_one()
            == 0
        )


def test_token_command_mints_a_token_the_api_accepts(settings: Settings) -> None:
    env = {
        "JWT_SECRET": settings.jwt_secret or "",
        "PROFILES_FILE": str(settings.effective_profiles_file),  # alice has a profile there
    }
    result = CliRunner().invoke(app, ["token", "--user", "alice"], env=env)
    assert result.exit_code == 0, result.output
    assert result.stderr == ""  # no "has no profile" warning
    token = result.stdout.strip()
    assert verify_token(token, key=settings.jwt_key(), settings=settings) == "alice"
    assert not verify_principal(token, key=settings.jwt_key(), settings=settings).admin
    # --admin: the reminders:admin scope (RFC 8693 §4.2 `scope` claim), and no profile
    # warning for an operator without reminders.
    sre = CliRunner().invoke(app, ["token", "--user", "sre", "--admin"], env=env)
    assert sre.exit_code == 0, sre.output
    assert sre.stderr == ""
    principal = verify_principal(sre.stdout.strip(), key=settings.jwt_key(), settings=settings)
    assert (principal.subject, principal.scopes) == ("sre", frozenset({"reminders:admin"}))
    empty = CliRunner().invoke(app, ["token", "--user", ""], env=env)
    assert empty.exit_code == 2


def test_replay_leaves_a_row_held_under_a_live_lease_to_its_sender(db: Engine) -> None:
    # Break-it trial: replay reset a `sending` row a live sender held (lease cleared), so a
    # second sender called the provider for the same key at the same time.
    from datetime import UTC, datetime, timedelta

    from reminder_core.dlq import replay
    from reminder_core.queue import PostgresQueue

    now = datetime(2030, 1, 1, 12, tzinfo=UTC)
    queue = PostgresQueue(db, name="reminders", max_receive_count=1)
    with db.begin() as conn:
        rid = conn.execute(
            text(
                "INSERT INTO reminders (user_id, title, start_local, timezone, next_run_utc,"
                " status) VALUES ('alice', 'x', '2030-01-01T12:00', 'UTC', :n, 'failed')"
                " RETURNING id"
            ),
            {"n": now},
        ).scalar_one()
        conn.execute(
            text(
                "INSERT INTO delivery_log (reminder_id, user_id, run_time_utc, status,"
                " locked_at, lease_token) VALUES (:r, 'alice', :n, 'sending', :locked,"
                " gen_random_uuid())"
            ),
            {"r": rid, "n": now, "locked": now - timedelta(seconds=5)},
        )
    body = {"reminder_id": str(rid), "run_time_utc": now.isoformat(), "user_id": "alice",
            "version": 1}  # fmt: skip
    queue.send_batch([body], now=now, delays_s=[0])
    queue.receive(now=now, max_messages=1, visibility_timeout_s=1)
    queue.receive(now=now + timedelta(seconds=2), max_messages=1, visibility_timeout_s=1)
    assert queue.depth(now=now).dead_lettered == 1
    assert replay(db, queue, None, now=now, lease_s=45).redriven == 1
    with db.connect() as conn:
        row = conn.execute(text("SELECT status, lease_token FROM delivery_log")).one()
    assert row.status == "sending"
    assert row.lease_token is not None  # still the live sender's
    replay_later = now + timedelta(seconds=60)  # the lease has ended: the replay takes it
    with db.begin() as conn:
        conn.execute(text("DELETE FROM queue_messages"))
    queue.send_batch([body], now=replay_later, delays_s=[0])
    queue.receive(now=replay_later, max_messages=10, visibility_timeout_s=1)
    queue.receive(now=replay_later + timedelta(seconds=2), max_messages=10, visibility_timeout_s=1)
    assert replay(db, queue, None, now=replay_later, lease_s=45).redriven == 1
    with db.connect() as conn:
        row = conn.execute(text("SELECT status, lease_token FROM delivery_log")).one()
    assert (row.status, row.lease_token) == ("sending", None)


def test_replay_on_the_postgres_queue_reaches_letters_other_readers_are_reading(
    db: Engine, env: dict[str, str]
) -> None:
    # Issue 12 on SQS: letters held invisible by another reader were silently skipped. The
    # table queue hides no dead letter: the maintenance workload's read of the unrecorded
    # ones locks them only for its transaction (queue_message_lock_dead_unrecorded), and a
    # plain SELECT is never blocked by a row lock, while an UPDATE of a locked row waits for
    # the lock holder's transaction to end (PostgreSQL docs, "Row-Level Locks").
    import threading

    from reminder_core.dlq import replay
    from reminder_core.queue import PostgresQueue

    run_time = datetime(2030, 1, 1, 9, tzinfo=UTC)
    queue = PostgresQueue(db, name="reminders", max_receive_count=5)
    scanned = dead_letter(db, "00000000-0000-4000-8000-000000000001", run_time)
    assert [d.message_id for d in queue.dead_letters(limit=10, unrecorded_only=True)] == [
        str(scanned)
    ]
    assert queue.depth(now=run_time).dead_lettered_held == 0

    replayed = CliRunner().invoke(app, ["dlq", "replay"], env=env)

    assert replayed.exit_code == 0, replayed.output
    assert "redriven: 1;" in replayed.stdout
    assert "not reachable now: 0" in replayed.stdout
    assert replayed.stderr == ""  # nothing held, nothing waited for
    # An id that is not there is said so at once (with the default --wait-s of 35 s).
    started = time.monotonic()
    unknown = CliRunner().invoke(app, ["dlq", "purge", "--id", "999999"], env=env)
    assert unknown.exit_code == 1, unknown.output
    assert (unknown.stdout, unknown.stderr) == (
        "purged: 0\n",
        "error: not in the dead-letter queue: 999999 (`reminders dlq list --json` shows the ids)\n",
    )
    assert time.monotonic() - started < 10

    locked = dead_letter(db, "00000000-0000-4000-8000-000000000002", run_time)
    reports = []
    with db.connect() as reader:
        reader.execute(
            text("SELECT id FROM queue_messages WHERE id = :i FOR UPDATE"), {"i": locked}
        )
        thread = threading.Thread(
            target=lambda: reports.append(replay(db, queue, None, now=run_time, wait_s=0))
        )
        thread.start()
        thread.join(timeout=1)
        assert thread.is_alive()  # the redrive waits for the lock, it does not skip it
        reader.commit()
    thread.join(timeout=10)
    (report,) = reports
    assert (report.redriven, report.missing, report.unreached.held) == (1, 0, 0)
