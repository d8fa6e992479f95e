"""Sender: one delivery row per occurrence, sent once; cancel wins; leases; failures.

Rules under test are docs/design.md, "Exactly once per occurrence" through
"Retries and the dead-letter queue", and issue #2's sender paragraph.
"""

from __future__ import annotations

import email
import email.policy
import threading
import time
from datetime import datetime, timedelta
from pathlib import Path

from sqlalchemy import Engine, event, text

from coordinator.service import Coordinator
from reminder_core.errors import TransientDeliveryError
from reminder_core.queue import PostgresQueue
from reminder_core.settings import Settings
from sender.providers.base import OutgoingEmail, SendReceipt
from sender.render import Renderer
from sender.service import Outcome, Sender
from tests.integration.helpers import insert_due_reminders, insert_sending_rows
from tests.support.sending import NOW, Clock, CountingProvider, make_sender


def claim(db: Engine, queue: PostgresQueue) -> None:
    Coordinator(db, queue, lookahead_s=0, batch_size=1000, worker_id="c").run_once(NOW)


def one(db: Engine, sql: str) -> object:
    with db.connect() as conn:
        return conn.execute(text(sql)).one()


def receive_one(queue: PostgresQueue, at: datetime = NOW):
    (msg,) = queue.receive(now=at, max_messages=1, visibility_timeout_s=30)
    return msg


def test_sends_once_and_completes_in_one_go(db, queue, settings, provider) -> None:
    insert_due_reminders(db, 1, next_run_utc=NOW, user_id="alice", title="Dentist", timezone=None)
    claim(db, queue)
    sender = make_sender(db, queue, settings, provider)

    assert sender.run_once(NOW).counts == {"sent": 1}

    row = one(
        db,
        "SELECT d.status, d.recipient, d.provider, d.provider_message_id,"
        " d.attempt_count, d.sent_at, d.lease_token, r.status AS r_status,"
        " r.next_run_utc, r.claimed_by, r.id AS rid"
        " FROM delivery_log d JOIN reminders r ON r.id = d.reminder_id",
    )
    assert row.status == "sent"
    assert row.recipient == "alice@example.com"
    assert row.provider == "file"
    assert row.attempt_count == 1
    assert row.sent_at == NOW
    assert row.lease_token is None
    assert (row.r_status, row.next_run_utc, row.claimed_by) == ("completed", None, None)
    key = f"{row.rid}-20300101T120000Z"
    assert provider.calls == [key]
    assert row.provider_message_id == f"<{key}@reminders>"
    # The message is deleted: nothing left to receive, even after the visibility timeout.
    assert (
        queue.receive(now=NOW + timedelta(hours=1), max_messages=10, visibility_timeout_s=30) == []
    )

    msg = email.message_from_bytes(
        (settings.effective_mail_dir / f"{key}.eml").read_bytes(), policy=email.policy.default
    )
    assert msg["To"] == "alice@example.com"
    assert "Dentist" in msg["Subject"]
    # Rendered in the profile's zone: 12:00Z is 07:00 EST in New York.
    assert "2030-01-01 07:00 EST" in msg.get_body(("plain",)).get_content()


def test_duplicate_message_is_dropped_without_a_second_send(db, queue, settings, provider) -> None:
    insert_due_reminders(db, 1, next_run_utc=NOW)
    claim(db, queue)
    # The sweeper's republish after a slow fast path: the same payload twice.
    (payload,) = [receive_one(queue).body]
    queue.send_batch([payload, payload], now=NOW, delays_s=[0, 0])
    sender = make_sender(db, queue, settings, provider)
    outcomes = [
        sender.handle(m, NOW)
        for m in queue.receive(now=NOW, max_messages=10, visibility_timeout_s=30)
    ]
    assert outcomes == [Outcome.SENT, Outcome.DUPLICATE]
    assert len(provider.calls) == 1
    assert len(list(settings.effective_mail_dir.glob("*.eml"))) == 1


def test_cancel_after_claim_wins(db, queue, settings, provider) -> None:
    insert_due_reminders(db, 1, next_run_utc=NOW)
    claim(db, queue)
    with db.begin() as conn:
        conn.execute(
            text(
                "UPDATE reminders SET status = 'cancelled', next_run_utc = NULL,"
                " claimed_by = NULL, claimed_at = NULL, version = version + 1"
            )
        )
    sender = make_sender(db, queue, settings, provider)
    assert sender.run_once(NOW).counts == {"cancelled": 1}
    assert provider.calls == []
    row = one(
        db,
        "SELECT d.status, r.status AS r_status FROM delivery_log d"
        " JOIN reminders r ON r.id = d.reminder_id",
    )
    assert (row.status, row.r_status) == ("cancelled", "cancelled")


def test_two_senders_with_the_same_occurrence_send_it_once(db, queue, settings) -> None:
    insert_due_reminders(db, 1, next_run_utc=NOW)
    claim(db, queue)
    payload = receive_one(queue).body
    queue.send_batch([payload], now=NOW, delays_s=[0])
    msgs = queue.receive(now=NOW, max_messages=10, visibility_timeout_s=30)
    assert len(msgs) == 1
    first, second = receive_one(queue, NOW + timedelta(seconds=31)), msgs[0]
    slow = CountingProvider(settings.effective_mail_dir, pause_s=1.0)
    outcomes: dict[int, Outcome] = {}

    def run(i: int, m) -> None:
        outcomes[i] = make_sender(db, queue, settings, slow).handle(m, NOW)

    t1 = threading.Thread(target=run, args=(1, first))
    t1.start()
    time.sleep(0.3)  # the first worker holds the lease while the provider is slow
    run(2, second)
    t1.join(10)
    assert outcomes == {1: Outcome.SENT, 2: Outcome.BUSY}
    assert len(slow.calls) == 1
    assert one(db, "SELECT status FROM delivery_log").status == "sent"


def test_expired_lease_is_taken_over_with_the_same_key(db, queue, settings, provider) -> None:
    insert_due_reminders(db, 1, next_run_utc=NOW)
    claim(db, queue)
    msg = receive_one(queue)
    rid = msg.body["reminder_id"]
    # A worker inserted the row, then died before calling the provider.
    with db.begin() as conn:
        conn.execute(
            text(
                "INSERT INTO delivery_log (reminder_id, user_id, run_time_utc, status,"
                " attempt_count, locked_at, lease_token) VALUES (:r, 'alice', :t, 'sending',"
                " 1, :locked, gen_random_uuid())"
            ),
            {"r": rid, "t": NOW, "locked": NOW},
        )
    sender = make_sender(db, queue, settings, provider, Clock(NOW + timedelta(seconds=30)))
    assert sender.handle(msg, NOW + timedelta(seconds=30)) == Outcome.BUSY  # lease still live
    assert provider.calls == []
    later = NOW + timedelta(seconds=61)  # lease_s = 60 has passed
    sender = make_sender(db, queue, settings, provider, Clock(later))
    msg2 = receive_one(queue, later)
    assert sender.handle(msg2, later) == Outcome.SENT
    assert provider.calls == [f"{rid}-20300101T120000Z"]
    row = one(db, "SELECT status, attempt_count FROM delivery_log")
    assert (row.status, row.attempt_count) == ("sent", 2)


def test_a_cancel_ends_the_sending_row_a_dead_sender_left_but_not_a_live_one(
    db, queue, settings, provider
) -> None:
    # Break-it trial: a sender died holding a batch; its reminders were cancelled; when the
    # messages came back the cancel was dropped as a "duplicate" of the row the dead sender
    # had begun, and that row stayed `sending` until the reaper recorded it `failed`.
    insert_due_reminders(db, 2, next_run_utc=NOW)
    claim(db, queue)
    insert_sending_rows(db, NOW, {"Due 1": NOW - timedelta(seconds=120), "Due 2": NOW})
    with db.begin() as conn:
        conn.execute(
            text(
                "UPDATE reminders SET status = 'cancelled', next_run_utc = NULL,"
                " claimed_by = NULL, claimed_at = NULL, version = version + 1"
            )
        )
    sender = make_sender(db, queue, settings, provider)  # lease_s = 60
    assert sender.run_once(NOW).counts == {"cancelled": 1, "duplicate": 1}
    assert provider.calls == []
    with db.connect() as conn:
        rows = conn.execute(
            text(
                "SELECT r.title, d.status, d.lease_token IS NULL AS released, d.error"
                " FROM delivery_log d JOIN reminders r ON r.id = d.reminder_id ORDER BY 1"
            )
        ).all()
    (dead, live) = rows
    assert (dead.title, dead.status, dead.released) == ("Due 1", "cancelled", True)
    assert dead.error.startswith("superseded: reminder is cancelled; ended a sending row")
    # Under a live lease its holder finishes the row: the cancel leaves it alone.
    assert (live.title, live.status, live.released, live.error) == ("Due 2", "sending", False, None)


def test_completion_is_fenced_by_the_lease_token(db, queue, settings) -> None:
    insert_due_reminders(db, 1, next_run_utc=NOW)
    claim(db, queue)
    msg = receive_one(queue)
    taken_over = threading.Event()
    stale = CountingProvider(settings.effective_mail_dir)

    class Hijack(CountingProvider):
        def send(self, email: OutgoingEmail, *, idempotency_key: str) -> SendReceipt:
            # While this worker is inside the provider call its lease expires and another
            # worker takes the row over (new token).
            with db.begin() as conn:
                conn.execute(text("UPDATE delivery_log SET lease_token = gen_random_uuid()"))
            taken_over.set()
            return super().send(email, idempotency_key=idempotency_key)

    hijack = Hijack(settings.effective_mail_dir)
    # The stale worker reports the occurrence as someone else's, not as sent by it.
    # The lease's fencing (a leaseless first send: test_leaseless_first_send.py).
    sender = make_sender(db, queue, settings, hijack, leaseless_first_send=False)
    assert sender.handle(msg, NOW) == Outcome.BUSY
    assert taken_over.is_set()
    row = one(
        db,
        "SELECT d.status, r.status AS r_status FROM delivery_log d"
        " JOIN reminders r ON r.id = d.reminder_id",
    )
    # The stale worker changed nothing: the new holder completes the row.
    assert (row.status, row.r_status) == ("sending", "claimed")
    assert stale.calls == []


def test_user_without_profile_fails_permanently(db, queue, settings, provider) -> None:
    insert_due_reminders(db, 1, next_run_utc=NOW, user_id="nobody")
    claim(db, queue)
    sender = make_sender(db, queue, settings, provider)
    assert sender.run_once(NOW).counts == {"failed": 1}
    row = one(
        db,
        "SELECT d.status, d.error, r.status AS r_status, r.last_error"
        " FROM delivery_log d JOIN reminders r ON r.id = d.reminder_id",
    )
    assert (row.status, row.r_status) == ("failed", "failed")
    assert "no profile" in row.error
    assert row.last_error == row.error
    assert provider.calls == []
    assert queue.depth(now=NOW + timedelta(hours=1)).not_visible == 0


def test_transient_error_releases_the_lease_and_retries_after_retry_after(
    db, queue, settings, provider
) -> None:
    insert_due_reminders(db, 1, next_run_utc=NOW)
    claim(db, queue)
    provider.fail_next.append(TransientDeliveryError("429 Too Many Requests", retry_after_s=7))
    sender = make_sender(db, queue, settings, provider)
    assert sender.run_once(NOW).counts == {"retry": 1}
    row = one(db, "SELECT status, error, locked_at, lease_token FROM delivery_log")
    assert (row.status, row.locked_at, row.lease_token) == ("sending", None, None)
    assert "429" in row.error
    # Retry-After: hidden for 7 s, then retried and sent with the same key.
    assert (
        queue.receive(now=NOW + timedelta(seconds=6), max_messages=1, visibility_timeout_s=30) == []
    )
    later = NOW + timedelta(seconds=7)
    sender = make_sender(db, queue, settings, provider, Clock(later))
    assert sender.run_once(later).counts == {"sent": 1}
    assert len(set(provider.calls)) == 1
    assert len(provider.calls) == 2
    assert one(db, "SELECT attempt_count FROM delivery_log").attempt_count == 2


def test_html_is_escaped_and_templates_can_be_overridden(
    db, queue, settings, provider, tmp_path
) -> None:
    insert_due_reminders(db, 1, next_run_utc=NOW, title="<script>alert(1)</script>")
    claim(db, queue)
    overrides = tmp_path / "templates"
    overrides.mkdir()
    (overrides / "reminder.subject.j2").write_text("Heads up: {{ title }}\n")
    sender = make_sender(db, queue, settings, provider, renderer=Renderer(overrides))
    assert sender.run_once(NOW).counts == {"sent": 1}
    (path,) = settings.effective_mail_dir.glob("*.eml")
    msg = email.message_from_bytes(path.read_bytes(), policy=email.policy.default)
    assert msg["Subject"].startswith("Heads up: <script>")
    html = msg.get_body(("html",)).get_content()
    assert "<script>" not in html
    assert "&lt;script&gt;" in html


def test_malformed_message_is_dropped(db, queue, settings, provider) -> None:
    queue.send_batch([{"reminder_id": "not-a-uuid"}], now=NOW, delays_s=[0])
    sender = make_sender(db, queue, settings, provider)
    assert sender.run_once(NOW).counts == {"dropped": 1}
    assert queue.depth(now=NOW + timedelta(hours=1)).not_visible == 0


def test_a_busy_occurrence_comes_back_when_the_lease_ends(db, queue, settings, provider) -> None:
    # A duplicate message for an occurrence another worker is sending is hidden until that
    # worker's lease (lease_s = 60) ends, instead of coming back at every visibility
    # timeout and burning receives toward the dead-letter queue.
    insert_due_reminders(db, 1, next_run_utc=NOW)
    claim(db, queue)
    msg = receive_one(queue)
    with db.begin() as conn:
        conn.execute(
            text(
                "INSERT INTO delivery_log (reminder_id, user_id, run_time_utc, status,"
                " attempt_count, locked_at, lease_token) VALUES (:r, 'alice', :t, 'sending',"
                " 1, :locked, gen_random_uuid())"
            ),
            {"r": msg.body["reminder_id"], "t": NOW, "locked": NOW},
        )
    at = NOW + timedelta(seconds=10)
    assert make_sender(db, queue, settings, provider, Clock(at)).handle(msg, at) == Outcome.BUSY
    # Hidden for the 50 s left of the lease (+1): not back after the 30 s visibility timeout.
    assert (
        queue.receive(now=at + timedelta(seconds=45), max_messages=1, visibility_timeout_s=30) == []
    )
    assert (
        len(queue.receive(now=at + timedelta(seconds=51), max_messages=1, visibility_timeout_s=30))
        == 1
    )


def test_a_reminder_paused_while_claimed_and_resumed_is_sent(db, queue, settings, provider) -> None:
    # Break-it trial: the message of a claimed one-time reminder reached the sender while
    # the reminder was paused; a `cancelled` row was recorded for its occurrence, and after
    # resume the occurrence was a "duplicate" and the reminder failed without a send.
    insert_due_reminders(db, 1, next_run_utc=NOW)
    claim(db, queue)
    with db.begin() as conn:  # the user pauses it (the API's pause of a claimed reminder)
        conn.execute(
            text("UPDATE reminders SET status = 'paused', claimed_by = NULL, claimed_at = NULL")
        )
    sender = make_sender(db, queue, settings, provider)
    assert sender.run_once(NOW).counts == {"cancelled": 1}
    assert provider.calls == []
    with db.connect() as conn:
        assert conn.execute(text("SELECT count(*) FROM delivery_log")).scalar_one() == 0
    with db.begin() as conn:  # resumed: pending again at the same (past) time
        conn.execute(text("UPDATE reminders SET status = 'pending'"))
    claim(db, queue)
    assert sender.run_once(NOW).counts == {"sent": 1}
    row = one(
        db,
        "SELECT d.status, r.status AS r_status FROM delivery_log d"
        " JOIN reminders r ON r.id = d.reminder_id",
    )
    assert (row.status, row.r_status) == ("sent", "completed")


def test_a_replay_beside_a_plain_copy_in_one_batch_is_the_one_kept(
    db, queue, settings, provider
) -> None:
    # Break-it trial: a plain copy received first made the replay a "duplicate", then was
    # itself dropped as no longer due: the redriven occurrence was never sent.
    insert_due_reminders(db, 1, next_run_utc=NOW)
    claim(db, queue)
    payload = receive_one(queue).body
    with db.begin() as conn:  # as after a dead letter: the one-time reminder failed
        conn.execute(
            text("UPDATE reminders SET status = 'failed', claimed_by = NULL, claimed_at = NULL")
        )
        conn.execute(text("DELETE FROM queue_messages"))
    queue.send_batch([payload, {**payload, "replay": True}], now=NOW, delays_s=[0, 0])
    sender = make_sender(db, queue, settings, provider)
    assert sender.run_once(NOW).counts == {"duplicate": 1, "sent": 1}
    assert len(provider.calls) == 1
    assert one(db, "SELECT status FROM delivery_log").status == "sent"


class ChangingProvider(CountingProvider):
    """On its first call, runs `change` (SQL against the other reminders of the batch, as
    a user would through the API while the batch is being sent), then takes longer than
    the sender's recheck interval: the sends after it start on a stale read."""

    def __init__(self, directory: Path, db: Engine, change: str, slow_s: float) -> None:
        super().__init__(directory)
        self.db, self.change, self.slow_s = db, change, slow_s

    def send(self, email: OutgoingEmail, *, idempotency_key: str) -> SendReceipt:
        first = not self.calls
        receipt = super().send(email, idempotency_key=idempotency_key)
        if first:
            reminder_id = idempotency_key[:36]  # "<reminder_id>-<YYYYMMDDTHHMMSSZ>"
            with self.db.begin() as conn:
                conn.execute(text(self.change), {"sent": reminder_id})
            time.sleep(self.slow_s)
        return receipt


#: What the API's cancel and pause do to a claimed reminder, here to every reminder but
#: the one being sent (`:sent`).
CANCEL_THE_OTHERS = (
    "UPDATE reminders SET status = 'cancelled', next_run_utc = NULL, claimed_by = NULL,"
    " claimed_at = NULL, version = version + 1 WHERE id <> CAST(:sent AS uuid)"
)
PAUSE_THE_OTHERS = (
    "UPDATE reminders SET status = 'paused', claimed_by = NULL, claimed_at = NULL"
    " WHERE id <> CAST(:sent AS uuid)"
)


def changing_sender(
    db: Engine, queue: PostgresQueue, settings: Settings, change: str, *, leaseless: bool = True
) -> tuple[ChangingProvider, Sender]:
    """A sender (recheck interval 0.2 s) whose provider runs `change` on its first call
    and then takes 0.3 s (first sends without a lease unless `leaseless` is False)."""
    provider = ChangingProvider(settings.effective_mail_dir, db, change, slow_s=0.3)
    sender = make_sender(db, queue, settings, provider, leaseless_first_send=leaseless)
    sender.recheck_interval_s = 0.2
    return provider, sender


def statements_named(db: Engine, marker: str) -> list[str]:
    """A list that collects every statement run on `db` whose text contains `marker`."""
    seen: list[str] = []

    def record(*args: object) -> None:  # conn, cursor, statement, parameters, ...
        statement = str(args[2])
        if marker in statement:
            seen.append(statement)

    event.listen(db, "before_cursor_execute", record)
    return seen


def test_a_reminder_cancelled_during_its_batch_is_not_sent(db, queue, settings) -> None:
    # A slow provider and a batch: the begin transaction re-read the reminders, but a
    # cancel that commits while earlier messages of the batch are being sent must still
    # stop the later ones (issue 4, "Cancel race").
    insert_due_reminders(db, 3, next_run_utc=NOW)
    claim(db, queue)
    provider, sender = changing_sender(db, queue, settings, CANCEL_THE_OTHERS)
    rereads = statements_named(db, "What a sender re-reads")

    assert sender.run_once(NOW).counts == {"sent": 1, "released": 2}
    assert len(provider.calls) == 1
    assert len(rereads) == 1  # one read for the batch, not one per message
    with db.connect() as conn:  # the withdrawn occurrences' rows are gone, not left sending
        assert conn.execute(
            text("SELECT status, count(*) FROM delivery_log GROUP BY status")
        ).all() == [("sent", 1)]
    # Handed back at once; the next receive records them as a cancel after claim.
    assert sender.run_once(NOW).counts == {"cancelled": 2}
    assert len(provider.calls) == 1
    with db.connect() as conn:
        rows = conn.execute(
            text(
                "SELECT d.status, r.status AS r_status, count(*) FROM delivery_log d"
                " JOIN reminders r ON r.id = d.reminder_id GROUP BY 1, 2 ORDER BY 1"
            )
        ).all()
    assert rows == [("cancelled", "cancelled", 2), ("sent", "completed", 1)]


def test_a_reminder_paused_during_its_batch_is_sent_once_after_resume(db, queue, settings) -> None:
    insert_due_reminders(db, 2, next_run_utc=NOW)
    claim(db, queue)
    provider, sender = changing_sender(db, queue, settings, PAUSE_THE_OTHERS)

    assert sender.run_once(NOW).counts == {"sent": 1, "released": 1}
    assert sender.run_once(NOW).counts == {"cancelled": 1}  # paused: nothing recorded
    with db.connect() as conn:
        assert conn.execute(text("SELECT count(*) FROM delivery_log")).scalar_one() == 1
    with db.begin() as conn:  # resumed: pending again at the same (past) time
        conn.execute(text("UPDATE reminders SET status = 'pending' WHERE status = 'paused'"))
    claim(db, queue)
    assert sender.run_once(NOW).counts == {"sent": 1}
    assert len(provider.calls) == 2
    assert len(set(provider.calls)) == 2
    with db.connect() as conn:
        assert conn.execute(
            text("SELECT d.status, r.status, count(*) FROM delivery_log d JOIN reminders r"
                 " ON r.id = d.reminder_id GROUP BY 1, 2")
        ).all() == [("sent", "completed", 2)]  # fmt: skip


def test_a_batch_sent_within_the_recheck_interval_reads_its_reminders_once(
    db, queue, settings, provider
) -> None:
    insert_due_reminders(db, 5, next_run_utc=NOW)
    claim(db, queue)
    sender = make_sender(db, queue, settings, provider)
    sender.recheck_interval_s = 60
    rereads = statements_named(db, "What a sender re-reads")
    assert sender.run_once(NOW).counts == {"sent": 5}
    assert rereads == []  # the begin transaction's read was fresh enough


def test_a_withdrawn_occurrence_that_an_earlier_attempt_touched_keeps_its_row(
    db, queue, settings
) -> None:
    # A row with an earlier provider call (attempt_count > 0) may stand for a message the
    # provider has: it is released, not deleted.
    insert_due_reminders(db, 2, next_run_utc=NOW)
    claim(db, queue)
    # Leased: the earlier attempt's trace is on the `sending` row this batch takes.
    _, sender = changing_sender(db, queue, settings, CANCEL_THE_OTHERS, leaseless=False)
    original = sender.begin._take

    def take_with_an_earlier_attempt(batch) -> None:  # type: ignore[no-untyped-def]
        original(batch)
        batch.conn.execute(text("UPDATE delivery_log SET attempt_count = 1, provider = 'file'"))

    sender.begin._take = take_with_an_earlier_attempt  # type: ignore[method-assign]
    assert sender.run_once(NOW).counts == {"sent": 1, "released": 1}
    with db.connect() as conn:
        rows = conn.execute(
            text("SELECT status, lease_token IS NULL, error FROM delivery_log"
                 " WHERE status = 'sending'")
        ).all()  # fmt: skip
    assert rows == [("sending", True, "withdrawn: the reminder changed during its batch")]
