"""The links in emails (issue 17, "One-click snooze from the email"): sent by the real
sender into the file sink, read back from the .eml, used through the API; rows counted
before and after every refusal.

Times: the email is sent at SENT (a Tuesday, UTC); "later" is SNOOZE_DELAY_S (3600 s)
after the click, "tomorrow" SNOOZE_TOMORROW_AT (09:00) the next local day, per the
settings' documentation (docs/configuration.md).
"""

from __future__ import annotations

import email
import email.policy
import re
import time
import uuid
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import jwt
import pytest
from fastapi.testclient import TestClient
from sqlalchemy import Engine, text

from coordinator.service import Coordinator
from reminder_core.domain.retry import RetryPolicy
from reminder_core.links import LinkAction, LinkSigner, issued_at, link_key, sign_link
from reminder_core.queue import PostgresQueue
from reminder_core.settings import Settings
from tests.integration.api_support import URL, Clock, TokenFor, bearer, build_app
from tests.integration.helpers import insert_due_reminders
from tests.support.fake_provider import FakeProvider
from tests.support.providers import resend_provider
from tests.support.sending import CountingProvider, make_sender

BASE = "http://testserver"
SENT = datetime(2026, 1, 13, 8, 0, tzinfo=UTC)  # a Tuesday
LINK = re.compile(r"http://testserver/v1/links/[A-Za-z0-9_.-]+")


@pytest.fixture
def linked(settings: Settings) -> Settings:
    return settings.model_copy(update={"public_base_url": BASE})


@pytest.fixture
def app_clock() -> Clock:
    return Clock(SENT + timedelta(minutes=5))


@pytest.fixture
def site(db: Engine, linked: Settings, app_clock: Clock) -> Iterator[TestClient]:
    with TestClient(build_app(linked, db, app_clock)) as c:
        yield c


def send_due(db: Engine, queue: PostgresQueue, settings: Settings, at: datetime) -> Path | None:
    """Claim and send what is due at `at`; the .eml written, if any."""
    Coordinator(db, queue, lookahead_s=0, batch_size=100, worker_id="c").run_once(at)
    provider = CountingProvider(settings.effective_mail_dir)
    sender = make_sender(
        db, queue, settings, provider, Clock(at), links=LinkSigner.from_settings(settings)
    )
    try:
        sender.run_once(at)
    finally:
        sender.close()
    sent = sorted(settings.effective_mail_dir.glob("*.eml"), key=lambda p: p.stat().st_mtime_ns)
    return sent[-1] if sent else None


def read(path: Path) -> tuple[Any, dict[str, str]]:
    with path.open("rb") as fh:
        msg = email.message_from_binary_file(fh, policy=email.policy.default)
    text_part = msg.get_body(preferencelist=("plain",))
    assert text_part is not None
    body = text_part.get_content()
    links = dict(
        zip(("snooze", "tomorrow", "stop"), LINK.findall(body), strict=True)
    )  # the text part lists them in this order
    return msg, links


def count(db: Engine, sql: str = "SELECT count(*) FROM reminders") -> int:
    with db.connect() as conn:
        return int(conn.execute(text(sql)).scalar_one())


def path_of(url: str) -> str:
    return url.removeprefix(BASE)


@pytest.fixture
def emailed(db: Engine, queue: PostgresQueue, linked: Settings) -> tuple[str, dict[str, str], Any]:
    insert_due_reminders(db, 1, next_run_utc=SENT, timezone="UTC", title="Call mum")
    eml = send_due(db, queue, linked, SENT)
    assert eml is not None
    msg, links = read(eml)
    with db.connect() as conn:
        rid = str(conn.execute(text("SELECT id FROM reminders")).scalar_one())
    return rid, links, msg


def test_the_email_carries_signed_links_and_rfc8058_headers(
    emailed: tuple[str, dict[str, str], Any], linked: Settings
) -> None:
    rid, links, msg = emailed
    # RFC 8058 §3.1: one URI in List-Unsubscribe, and the one-click POST key-value pair.
    assert msg["List-Unsubscribe"] == f"<{links['stop']}>"
    assert msg["List-Unsubscribe-Post"] == "List-Unsubscribe=One-Click"
    html_part = msg.get_body(preferencelist=("html",)).get_content()
    for url in links.values():
        assert f'href="{url}"' in html_part
    # Each is bound to this occurrence and user, and expires LINK_TTL_S after the send.
    for action, url in links.items():
        claims = jwt.decode(
            url.rsplit("/", 1)[1], link_key(linked), algorithms=["HS256"],
            audience="reminders:email-link", options={"verify_exp": False},
        )  # fmt: skip
        assert claims["act"] == action
        assert (claims["rid"], claims["occ"], claims["sub"]) == (
            rid,
            "2026-01-13T08:00:00Z",
            "alice",
        )
        assert claims["exp"] - int(SENT.timestamp()) == 30 * 86400


def test_get_shows_what_a_link_does_and_changes_nothing(
    emailed: tuple[str, dict[str, str], Any], site: TestClient, db: Engine
) -> None:
    _, links, _ = emailed
    before = count(db)
    for url in links.values():
        page = site.get(path_of(url))
        assert page.status_code == 200
        assert page.headers["content-type"].startswith("text/html")
        assert page.headers["referrer-policy"] == "no-referrer"
        assert page.headers["cache-control"] == "no-store"
        assert '<form method="post">' in page.text
        assert "Call mum" in page.text
    assert count(db) == before


def test_snooze_makes_exactly_one_more_occurrence_delivered_once(
    emailed: tuple[str, dict[str, str], Any],
    site: TestClient,
    db: Engine,
    queue: PostgresQueue,
    linked: Settings,
    app_clock: Clock,
    token_for: TokenFor,
) -> None:
    rid, links, _ = emailed
    clicked = app_clock.now  # 08:05Z; one hour later: 09:05Z
    used = site.post(path_of(links["snooze"]))
    assert used.status_code == 200, used.text
    assert "Snoozed" in used.text
    with db.connect() as conn:
        snoozes = conn.execute(
            text("SELECT id, next_run_utc, status FROM reminders WHERE snoozed_from = :r"),
            {"r": rid},
        ).all()
    assert [(s.next_run_utc, s.status) for s in snoozes] == [
        (clicked + timedelta(hours=1), "pending")
    ]

    # Used twice, or its sibling "tomorrow" link of the same occurrence: nothing more.
    before = count(db)
    for url in (links["snooze"], links["tomorrow"]):
        again = site.post(path_of(url))
        assert again.status_code == 200
        assert "Already snoozed" in again.text
    assert count(db) == before

    # Not sent early; sent once when due; in the first reminder's history.
    assert send_due(db, queue, linked, clicked + timedelta(minutes=30)).name.startswith(rid)
    eml = send_due(db, queue, linked, clicked + timedelta(hours=1, seconds=1))
    assert eml is not None
    assert eml.name.startswith(str(snoozes[0].id))
    assert send_due(db, queue, linked, clicked + timedelta(hours=3)) == eml  # no third one
    assert count(db, "SELECT count(*) FROM delivery_log WHERE status = 'sent'") == 2
    history = site.get(f"{URL}/{rid}/deliveries", headers=bearer(token_for("alice")))
    assert history.status_code == 200, history.text
    assert [(i["reminder_id"], i["run_time_utc"]) for i in history.json()["items"]] == [
        (str(snoozes[0].id), "2026-01-13T09:05:00Z"),
        (rid, "2026-01-13T08:00:00Z"),
    ]


def test_tomorrow_is_the_next_local_day_at_nine(
    emailed: tuple[str, dict[str, str], Any], site: TestClient, db: Engine
) -> None:
    rid, links, _ = emailed
    assert site.post(path_of(links["tomorrow"])).status_code == 200
    with db.connect() as conn:
        due = conn.execute(
            text("SELECT next_run_utc FROM reminders WHERE snoozed_from = :r"), {"r": rid}
        ).scalar_one()
    assert due == datetime(2026, 1, 14, 9, 0, tzinfo=UTC)  # the reminder's zone is UTC


def emailed_daily(db: Engine, queue: PostgresQueue, linked: Settings) -> tuple[str, dict[str, str]]:
    """A daily reminder of alice's, sent at SENT: its id and the links of its email."""
    with db.begin() as conn:
        rid = conn.execute(
            text(
                "INSERT INTO reminders (user_id, title, start_local, timezone, rrule,"
                " next_run_utc) VALUES ('alice', 'Standup', '2026-01-13T08:00', 'UTC',"
                " 'FREQ=DAILY', :due) RETURNING id"
            ),
            {"due": SENT},
        ).scalar_one()
    eml = send_due(db, queue, linked, SENT)
    assert eml is not None
    _, links = read(eml)
    return str(rid), links


def test_stop_is_rfc8058_one_click_and_idempotent(
    db: Engine, queue: PostgresQueue, linked: Settings, site: TestClient
) -> None:
    rid, links = emailed_daily(db, queue, linked)
    # What a mail client posts (RFC 8058 §3.2).
    one_click = site.post(
        path_of(links["stop"]),
        content="List-Unsubscribe=One-Click",
        headers={"Content-Type": "application/x-www-form-urlencoded"},
    )
    assert one_click.status_code == 200, one_click.text
    assert "Reminder stopped" in one_click.text
    with db.connect() as conn:
        status, version = conn.execute(
            text("SELECT status, version FROM reminders WHERE id = :r"), {"r": rid}
        ).one()
    assert status == "cancelled"
    again = site.post(path_of(links["stop"]))
    assert again.status_code == 200
    assert "Nothing to stop" in again.text
    with db.connect() as conn:
        assert conn.execute(
            text("SELECT status, version FROM reminders WHERE id = :r"), {"r": rid}
        ).one() == (status, version)


def test_stop_after_a_snooze_of_the_last_occurrence_cancels_the_snooze(
    emailed: tuple[str, dict[str, str], Any],
    site: TestClient,
    db: Engine,
    queue: PostgresQueue,
    linked: Settings,
    app_clock: Clock,
) -> None:
    # The one-time reminder is completed once sent; its snooze is what would come next.
    # "Stop this reminder" must stop that too (found by a trial of the product).
    rid, links, _ = emailed
    assert site.post(path_of(links["snooze"])).status_code == 200
    stopped = site.post(path_of(links["stop"]))
    assert stopped.status_code == 200, stopped.text
    assert "Snooze stopped" in stopped.text
    with db.connect() as conn:
        rows = conn.execute(
            text("SELECT id = :r AS original, status FROM reminders ORDER BY original"),
            {"r": rid},
        ).all()
    assert [(r.original, r.status) for r in rows] == [(False, "cancelled"), (True, "completed")]
    eml = send_due(db, queue, linked, app_clock.now + timedelta(hours=2))
    assert eml is not None
    assert eml.name.startswith(rid)  # the first email is still the last one
    assert count(db, "SELECT count(*) FROM delivery_log WHERE status = 'sent'") == 1
    again = site.post(path_of(links["stop"]))
    assert "Nothing to stop" in again.text


def test_head_answers_like_get_without_a_body(
    emailed: tuple[str, dict[str, str], Any], site: TestClient, db: Engine
) -> None:
    _, links, _ = emailed
    before = count(db)
    head = site.head(path_of(links["stop"]))
    assert head.status_code == 200
    assert head.headers["cache-control"] == "no-store"
    assert head.content == b""
    assert site.head(path_of(_tampered(links["stop"]))).status_code == 400
    assert count(db) == before


def test_a_snooze_to_an_odd_second_shows_the_seconds(
    emailed: tuple[str, dict[str, str], Any], db: Engine, linked: Settings, app_clock: Clock
) -> None:
    # SNOOZE_DELAY_S = 90 from 08:05:00Z lands on 08:06:30Z; "08:06" would be 30 s off.
    _, links, _ = emailed
    ninety = linked.model_copy(update={"snooze_delay_s": 90})
    with TestClient(build_app(ninety, db, app_clock)) as c:
        used = c.post(path_of(links["snooze"]))
    assert used.status_code == 200, used.text
    assert "2026-01-13 08:06:30 (UTC)" in used.text


def _tampered(token: str) -> str:
    head, body, sig = token.split(".")
    flipped = sig[:-2] + ("A" if sig[-2] != "A" else "B") + sig[-1]
    return ".".join((head, body, flipped))


def test_forged_altered_expired_and_foreign_tokens_change_nothing(
    emailed: tuple[str, dict[str, str], Any],
    site: TestClient,
    db: Engine,
    app_clock: Clock,
    token_for: TokenFor,
) -> None:
    rid, links, _ = emailed
    token = links["snooze"].rsplit("/", 1)[1]
    forged = sign_link(
        b"k" * 32, LinkAction.STOP, reminder_id=uuid.UUID(rid),
        occurrence=SENT, user_id="alice", now=SENT, ttl_s=3600,
    )  # fmt: skip
    head, _, sig = token.split(".")
    other_body = jwt.utils.base64url_encode(b'{"act":"stop"}').decode()
    refused = {
        "altered signature": _tampered(token),
        "altered claims": ".".join((head, other_body, sig)),
        "signed with another key": forged,
        "a bearer token": token_for("alice"),
        "cut short": token[: len(token) // 2],
        "not a token": "hello",
    }
    tables = ("SELECT count(*) FROM reminders", "SELECT sum(version) FROM reminders")
    before = [count(db, t) for t in tables]
    for what, bad in refused.items():
        for method in (site.get, site.post):
            page = method(f"/v1/links/{bad}")
            assert page.status_code == 400, (what, page.status_code)
            assert "not valid" in page.text
            assert "Nothing was changed" in page.text
    # Past LINK_TTL_S (30 days after the send): 410, and says so.
    app_clock.now = SENT + timedelta(days=30, seconds=1)
    for method in (site.get, site.post):
        page = method(path_of(links["stop"]))
        assert page.status_code == 410
        assert "expired" in page.text
    assert [count(db, t) for t in tables] == before


def test_no_public_base_url_no_links(db: Engine, queue: PostgresQueue, settings: Settings) -> None:
    insert_due_reminders(db, 1, next_run_utc=SENT, timezone="UTC")
    eml = send_due(db, queue, settings, SENT)
    assert eml is not None
    with eml.open("rb") as fh:
        msg = email.message_from_binary_file(fh, policy=email.policy.default)
    assert msg["List-Unsubscribe"] is None
    assert "/v1/links/" not in msg.as_string()


def test_a_stopped_reminder_is_not_snoozed_back_to_life(
    db: Engine, queue: PostgresQueue, linked: Settings, site: TestClient
) -> None:
    # Found by a trial: stop, then snooze, made a new pending reminder of a stopped one.
    rid, links = emailed_daily(db, queue, linked)
    assert "Reminder stopped" in site.post(path_of(links["stop"])).text
    before = count(db)
    for url in (links["snooze"], links["tomorrow"]):
        page = site.get(path_of(url))
        assert "was stopped" in page.text
        assert "<form" not in page.text
        used = site.post(path_of(url))
        assert used.status_code == 200
        assert "This reminder was stopped" in used.text
    assert count(db) == before
    assert count(db, f"SELECT count(*) FROM reminders WHERE snoozed_from = '{rid}'") == 0


def test_snooze_then_stop_then_snooze_says_it_was_stopped(
    emailed: tuple[str, dict[str, str], Any], site: TestClient, db: Engine
) -> None:
    _, links, _ = emailed
    assert "Snoozed" in site.post(path_of(links["snooze"])).text
    assert "Snooze stopped" in site.post(path_of(links["stop"])).text
    before = count(db)
    again = site.post(path_of(links["snooze"]))
    assert "This reminder was stopped" in again.text  # not "Already snoozed, to ..."
    assert count(db) == before


def test_a_retry_after_an_ambiguous_timeout_sends_the_same_payload_and_is_recorded_sent(
    db: Engine, linked: Settings
) -> None:
    """Resend compares a repeat's payload with the first request of its Idempotency-Key
    and answers 409 `invalid_idempotent_request` when they differ (resend.com/docs/
    dashboard/emails/idempotency-keys; the fake does the same). Sender A's call times out
    after the provider took it; sender B retries 7 s later on its own clock: its email,
    links included, is byte for byte A's, so the provider answers with the first message
    id and the delivery is recorded `sent` (links signed at each attempt's clock made it
    a 409, retried until the delivery budget ran out)."""
    fake = FakeProvider().start()
    try:
        now = datetime.now(UTC).replace(microsecond=0)
        queue = PostgresQueue(db, name="reminders", max_receive_count=5)
        insert_due_reminders(db, 1, next_run_utc=now, timezone="UTC", title="Call mum")
        Coordinator(db, queue, lookahead_s=0, batch_size=10, worker_id="c").run_once(now)
        signer = LinkSigner.from_settings(linked)
        fake.inject({"kind": "timeout", "seconds": 0.6})  # taken 0.6 s later, after A gave up
        a = make_sender(db, queue, linked, resend_provider(fake.url, read_timeout_s=0.3),
                        Clock(now + timedelta(seconds=1)), links=signer,
                        retry=RetryPolicy(attempts=1, base_s=0.02))  # fmt: skip
        try:
            assert a.run_once(now).counts == {"retry": 1}
        finally:
            a.close()
        deadline = time.monotonic() + 3
        while not fake.state.accepted and time.monotonic() < deadline:
            time.sleep(0.02)
        ((key, first),) = fake.state.accepted.items()

        b = make_sender(db, queue, linked, resend_provider(fake.url),
                        Clock(now + timedelta(seconds=8)), links=signer,
                        retry=RetryPolicy(attempts=1, base_s=0.02))  # fmt: skip
        try:
            # A's backoff has passed (it hid the message from when it gave it back)
            result = b.run_once(datetime.now(UTC) + timedelta(seconds=1))
        finally:
            b.close()
        assert result.counts == {"sent": 1}
        assert [r["status"] for r in fake.state.requests] == [200, "duplicate"]
        assert fake.state.duplicates == 1
        assert list(fake.state.accepted) == [key]
        with db.connect() as conn:
            row = conn.execute(text("SELECT status, provider_message_id FROM delivery_log")).one()
        assert tuple(row) == ("sent", first["id"])
        assert LINK.findall(first["text"])  # the email did carry links
    finally:
        fake.stop()


def test_links_are_issued_at_the_occurrence_until_it_is_a_day_old() -> None:
    """The rule of reminder_core.links.issued_at: the occurrence (every attempt within
    Resend's 24 hours of the key signs the same links), else the attempt's clock."""
    at = SENT
    assert issued_at(at, at + timedelta(seconds=7)) == at
    assert issued_at(at, at - timedelta(seconds=2)) == at  # claimed ahead
    assert issued_at(at, at + timedelta(hours=24)) == at
    later = at + timedelta(hours=24, seconds=1)
    assert issued_at(at, later) == later  # a replay the next day: fresh links
