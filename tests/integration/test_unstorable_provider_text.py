"""Provider text PostgreSQL cannot store, and rows it refuses, never block a batch (issue
15's trial, F2): a NUL or a lone surrogate in a provider's message id or error text used
to fail the completer's flush on every retry, so the row stayed `sending`, each new
receive called the provider again, and none of the batch's messages was settled.

Expected values come from the rules, not from the code: PostgreSQL text cannot hold
U+0000 (PostgreSQL docs, "Character Types") nor, being UTF-8 (RFC 3629 §3), a lone
surrogate; such characters are stored as U+FFFD, one for one (reminder_core.text);
a message id is a key of a btree index whose entries are limited to about 2.7 kB, so an
id longer than MAX_MESSAGE_ID characters, or one holding such characters, is stored as a
prefix and the SHA-256 of the whole id, by the sender and the webhooks alike.
A row refused whatever its text leaves only itself unrecorded: the other outcomes of
its flush are recorded and the batch settles.
"""

from __future__ import annotations

import hashlib
import secrets
from collections.abc import Iterator

import pytest
from prometheus_client import REGISTRY
from sqlalchemy import Engine, create_engine, event, text

from reminder_core.db.migrate import upgrade
from reminder_core.db.session import make_engine
from reminder_core.errors import ConfigurationError
from reminder_core.queue import PostgresQueue
from reminder_core.settings import Settings
from reminder_core.text import MAX_MESSAGE_ID
from tests.integration.helpers import insert_due_reminders
from tests.integration.test_sender import claim, one
from tests.support.fake_provider import FakeProvider
from tests.support.providers import resend_provider
from tests.support.sending import NOW, CountingProvider, make_sender
from tests.support.workloads import database_url_named, drop_database

R = "\ufffd"  # U+FFFD REPLACEMENT CHARACTER
#: 8,000 random URL-safe bytes: ~10,700 characters that do not compress below the btree
#: entry limit (a repeated character would: PostgreSQL compresses index entries).
LONG_ID = secrets.token_urlsafe(8000)


@pytest.fixture
def fake() -> Iterator[FakeProvider]:
    server = FakeProvider().start()
    yield server
    server.stop()


def sha256(text: str) -> str:
    return hashlib.sha256(text.encode("utf-8", "surrogatepass")).hexdigest()


def rows(db: Engine) -> list[tuple[str, str | None, str | None]]:
    with db.connect() as conn:
        return [
            (r.status, r.provider_message_id, r.error)
            for r in conn.execute(
                text("SELECT status, provider_message_id, error FROM delivery_log")
            )
        ]


def live_messages(db: Engine) -> int:
    row = one(db, "SELECT count(*) AS n FROM queue_messages WHERE NOT dead_lettered")
    return int(row.n)  # type: ignore[attr-defined]


def unrecorded() -> float:
    return REGISTRY.get_sample_value("reminders_completer_unrecorded_total") or 0.0


@pytest.mark.parametrize("leaseless", [True, False], ids=["leaseless", "leased"])
def test_hostile_resend_answers_are_recorded_replaced_and_the_batch_settles(
    db: Engine, queue: PostgresQueue, settings: Settings, fake: FakeProvider, leaseless: bool
) -> None:
    insert_due_reminders(db, 12, next_run_utc=NOW)
    claim(db, queue)
    fake.inject(
        {"kind": "message_id", "id": "abc\x00def"},
        {"kind": "message_id", "id": "\ud800x"},
        {"kind": "message_id", "id": LONG_ID},
        # A 400 (permanent) and a 503 (transient) whose bodies hold NUL and invalid UTF-8.
        {"kind": "raw", "status": 400, "body_hex": b"bad\x00address\xff".hex()},
        {"kind": "raw", "status": 503, "body_hex": b"busy\x00\xfe".hex()},
    )
    provider = resend_provider(fake.url)
    sender = make_sender(db, queue, settings, provider, lease_s=5, leaseless_first_send=leaseless)
    sender.receiver.batch_size = 20  # the whole batch at once
    try:
        result = sender.run_once(NOW)
    finally:
        sender.close()

    assert result.counts == {"sent": 10, "failed": 1, "retry": 1}
    assert len(fake.state.requests) == 12  # one provider call each, none repeated
    stored = rows(db)
    ids = {pmid for status, pmid, _ in stored if status == "sent"}
    assert len(ids) == 10
    # Ids PostgreSQL cannot hold as they are: a prefix, then the whole id's SHA-256.
    assert {
        "abc" + R + "def" + "~sha256:" + sha256("abc\x00def"),
        R + "x" + "~sha256:" + sha256("\ud800x"),
        LONG_ID[:440] + "~sha256:" + sha256(LONG_ID),
    } <= ids
    assert all(len(i) <= MAX_MESSAGE_ID for i in ids)
    errors = {status: error for status, _, error in stored if status != "sent"}
    assert set(errors) == {"failed", "sending"}  # the 503's row is released, not ended
    assert "bad" + R + "address" + R in (errors["failed"] or "")
    assert "busy" + R + R in (errors["sending"] or "")
    # Settled: the sent and failed messages are gone; the retry waits for its backoff.
    assert live_messages(db) == 1


@pytest.fixture
def refusing_trigger(db: Engine) -> Iterator[None]:
    """A trigger that makes PostgreSQL refuse (SQLSTATE 23514, check_violation) every
    ended row of a reminder titled "Refused ...", and every provider message id that is
    not ASCII: a refusal that no text replacement avoids, and one that only the escaped
    last resort does."""
    with db.begin() as conn:
        conn.execute(
            text(
                """
                CREATE FUNCTION test_refuse_rows() RETURNS trigger LANGUAGE plpgsql AS $$
                BEGIN
                  IF NEW.status <> 'sending' AND EXISTS (
                      SELECT 1 FROM reminders WHERE id = NEW.reminder_id
                      AND title LIKE 'Refused %') THEN
                    RAISE EXCEPTION 'refused by the test' USING ERRCODE = 'check_violation';
                  END IF;
                  IF NEW.provider_message_id !~ '^[[:ascii:]]*$' THEN
                    RAISE EXCEPTION 'ASCII ids only' USING ERRCODE = 'check_violation';
                  END IF;
                  RETURN NEW;
                END $$;
                CREATE TRIGGER test_refuse_rows BEFORE INSERT OR UPDATE ON delivery_log
                  FOR EACH ROW EXECUTE FUNCTION test_refuse_rows();
                """
            )
        )
    try:
        yield
    finally:
        with db.begin() as conn:
            conn.execute(text("DROP TRIGGER IF EXISTS test_refuse_rows ON delivery_log"))
            conn.execute(text("DROP FUNCTION IF EXISTS test_refuse_rows()"))


class NonAsciiIdProvider(CountingProvider):
    """The counting file sink, answering one call (the reminder titled "Accented ...")
    with a message id that is not ASCII."""

    def send(self, email, *, idempotency_key):  # type: ignore[no-untyped-def]
        receipt = super().send(email, idempotency_key=idempotency_key)
        if "Accented" in email.subject:
            return type(receipt)(provider=receipt.provider, provider_message_id="idé-1")
        return receipt


@pytest.mark.usefixtures("refusing_trigger")
@pytest.mark.parametrize("leaseless", [True, False], ids=["leaseless", "leased"])
def test_a_row_the_database_refuses_leaves_only_itself_unrecorded(
    db: Engine,
    queue: PostgresQueue,
    settings: Settings,
    leaseless: bool,
) -> None:
    insert_due_reminders(db, 8, next_run_utc=NOW)
    insert_due_reminders(db, 1, next_run_utc=NOW, title="Refused")
    insert_due_reminders(db, 1, next_run_utc=NOW, title="Accented")
    claim(db, queue)
    provider = NonAsciiIdProvider(settings.effective_mail_dir)
    sender = make_sender(db, queue, settings, provider, leaseless_first_send=leaseless)
    sender.receiver.batch_size = 20  # the whole batch at once
    sender.completer.flush_max = 100  # all ten outcomes in one flush, so it is refused
    sender.completer.flush_interval_s = 60.0
    before = unrecorded()
    try:
        result = sender.run_once(NOW)
    finally:
        sender.close()

    # The refused row's message is handed back; the nine others are recorded.
    assert result.counts == {"sent": 9, "retry": 1}
    assert unrecorded() - before == 1
    with db.connect() as conn:
        by_title = {
            r.title: (r.status, r.provider_message_id)
            for r in conn.execute(
                text(
                    "SELECT r.title, d.status, d.provider_message_id FROM reminders r"
                    " LEFT JOIN delivery_log d ON d.reminder_id = r.id"
                )
            )
        }
    assert sum(1 for status, _ in by_title.values() if status == "sent") == 9
    # The last resort: the id refused as it is was recorded escaped (Python's ascii()).
    assert by_title["Accented 1"] == ("sent", "id\\xe9-1")
    # The refused one is as it was: no row for a first send without a lease, the
    # `sending` row under this sender's lease otherwise.
    assert by_title["Refused 1"] == ((None, None) if leaseless else ("sending", None))
    # Its message stays in the queue (back after its visibility timeout); the others
    # are settled.
    assert live_messages(db) == 1
    with db.connect() as conn:
        status = conn.execute(
            text("SELECT status FROM reminders WHERE title = 'Refused 1'")
        ).scalar_one()
    assert status == "claimed"  # not moved on: the occurrence is decided again


class EuroIdProvider(CountingProvider):
    """The counting file sink, answering the reminder titled "Euro ..." with the id
    "id-€-1" (U+20AC, which LATIN1 has no byte for)."""

    def send(self, email, *, idempotency_key):  # type: ignore[no-untyped-def]
        receipt = super().send(email, idempotency_key=idempotency_key)
        if "Euro" in email.subject:
            return type(receipt)(provider=receipt.provider, provider_message_id="id-\u20ac-1")
        return receipt


def test_text_the_connection_encoding_cannot_carry_is_recorded_escaped(
    db: Engine, queue: PostgresQueue, settings: Settings, database_url: str
) -> None:
    # make_engine pins the client encoding to UTF8 (a PGCLIENTENCODING of LATIN1 made
    # one emoji fail a batch), and migrate refuses a database not in UTF8; a connection
    # set to LATIN1 all the same cannot carry U+20AC: psycopg refuses it before sending
    # (UnicodeEncodeError, which SQLAlchemy raises as a StatementError, not a
    # DBAPIError). Such a flush is refused like one PostgreSQL refuses: the other
    # outcomes are recorded, that one escaped.
    insert_due_reminders(db, 5, next_run_utc=NOW)
    insert_due_reminders(db, 1, next_run_utc=NOW, title="Euro")
    claim(db, queue)
    latin1 = make_engine(database_url, pool_size=4)

    def set_latin1(dbapi_connection, _record) -> None:  # type: ignore[no-untyped-def]
        dbapi_connection.execute("SET client_encoding TO 'LATIN1'")
        dbapi_connection.commit()

    event.listen(latin1, "connect", set_latin1)
    try:
        with latin1.connect() as conn:
            assert conn.exec_driver_sql("SHOW client_encoding").scalar_one() == "LATIN1"
        provider = EuroIdProvider(settings.effective_mail_dir)
        sender = make_sender(
            latin1, PostgresQueue(latin1, name="reminders", max_receive_count=5), settings, provider
        )
        sender.completer.flush_max = 100
        sender.completer.flush_interval_s = 60.0
        try:
            assert sender.run_once(NOW).counts == {"sent": 6}
        finally:
            sender.close()
    finally:
        latin1.dispose()
    ids = {pmid for status, pmid, _ in rows(db) if status == "sent"}
    assert len(ids) == 6
    assert "id-\\u20ac-1" in ids  # Python's ascii() form of "id-€-1"
    assert live_messages(db) == 0


def test_connections_speak_utf8_whatever_pgclientencoding_says(
    database_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("PGCLIENTENCODING", "LATIN1")  # libpq's own variable (libpq docs)
    engine = make_engine(database_url, pool_size=1)
    try:
        with engine.connect() as conn:
            assert conn.exec_driver_sql("SHOW client_encoding").scalar_one() == "UTF8"
            title = conn.exec_driver_sql("SELECT %s::text", ("mixemoji \u2713 \U0001f600",))
            assert title.scalar_one() == "mixemoji \u2713 \U0001f600"
    finally:
        engine.dispose()


def test_migrate_refuses_a_database_not_in_utf8(admin_url: str) -> None:
    name = f"reminders_latin1_{secrets.token_hex(4)}"
    admin = create_engine(admin_url, isolation_level="AUTOCOMMIT")
    with admin.connect() as conn:
        conn.execute(
            text(
                f"CREATE DATABASE \"{name}\" ENCODING 'LATIN1' LC_COLLATE 'C' LC_CTYPE 'C'"
                " TEMPLATE template0"
            )
        )
    try:
        with pytest.raises(ConfigurationError, match="encoded LATIN1; reminders needs UTF8"):
            upgrade(database_url_named(admin_url, name))
        probe = create_engine(database_url_named(admin_url, name))
        with probe.connect() as db_conn:  # nothing was created
            tables = db_conn.execute(
                text("SELECT count(*) FROM pg_tables WHERE schemaname = 'public'")
            ).scalar_one()
        probe.dispose()
        assert tables == 0
    finally:
        drop_database(admin_url, name)
        admin.dispose()
