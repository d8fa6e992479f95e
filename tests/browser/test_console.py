"""The web console (issue 16) in a real Chromium against a real `reminders dev`: sign in
with a token, a recurring reminder across New York's spring-forward with its preview, pause,
a reminder due in seconds and its delivery history, problem+json errors next to fields;
and as an SRE (a `reminders token --admin` token) the Operations page: live workers, the
delivery-lag chart, a dead letter replayed and then delivered once.

Expected values come from the zone's real DST dates and docs/api.md, not from the code:
in 2027 New York springs forward on Sunday March 14 at 02:00 EST -> 03:00 EDT (the second
Sunday of March, US Energy Policy Act of 2005), so 02:30 does not exist that day. The
default `shift` reads it with the offset before the gap (RFC 5545 §3.3.5; docs/api.md:
"02:30 on the night New York springs forward fires at 03:30 EDT"), i.e. 07:30 UTC;
`skip` drops it and does not count it toward COUNT (RFC 5545 §3.3.10). EST is UTC-5 and
EDT UTC-4. The dev email provider is `file` (docs/configuration.md, "Email providers").
"""

from __future__ import annotations

import math
import re
import time
from datetime import UTC, datetime, timedelta

import httpx
import pytest
from playwright.sync_api import Browser, Page, expect
from sqlalchemy import create_engine, text

from tests.browser.conftest import NARROW, Console, console_tab, mint, screenshot

pytestmark = [pytest.mark.e2e, pytest.mark.browser, pytest.mark.timeout(240)]

DELIVERY_TIMEOUT_MS = 30_000


def fill_schedule(page: Page, start_local: str, timezone: str, rrule: str = "") -> None:
    page.get_by_label("Start, local time").fill(start_local)
    page.get_by_label("Timezone").fill(timezone)
    page.get_by_label("Repeat rule").fill(rrule)


def test_console(browser: Browser, console: Console) -> None:
    """One `reminders dev` and one Chromium for every scenario (under pytest-xdist, tests
    of their own would each start both); each scenario in a fresh browser context."""
    refused_token(browser, console)
    with console_tab(browser, console) as page:
        recurring_across_spring_forward_and_pause(page)
    with console_tab(browser, console) as page:
        problems_next_to_fields(page)
    with console_tab(browser, console) as page:
        delivery_in_history(page)
    operations_as_sre(browser, console)
    with console_tab(browser, console, NARROW) as phone:
        expect(phone.locator("#reminders tbody tr").first).to_be_visible()
        screenshot(phone, "list-narrow")
        phone.get_by_role("link", name="New reminder").click()
        fill_schedule(phone, "2027-03-13T02:30", "America/New_York", "FREQ=DAILY;COUNT=3")
        expect(phone.locator("#preview tbody tr.dst-shifted")).to_have_count(1)
        screenshot(phone, "edit-narrow")


def recurring_across_spring_forward_and_pause(page: Page) -> None:
    page.get_by_role("link", name="New reminder").click()
    expect(page.get_by_role("heading", name="New reminder")).to_be_visible()
    page.get_by_label("Title").fill("Water the garden (New York)")
    fill_schedule(page, "2027-03-13T02:30", "America/New_York", "FREQ=DAILY;COUNT=3")

    rows = page.locator("#preview tbody tr")
    expect(rows).to_have_count(3)
    expect(rows.nth(0)).to_contain_text("2027-03-13 02:30:00 EST")
    expect(rows.nth(0).locator("td").first).to_contain_text("UTC-05:00")
    expect(rows.nth(0)).to_contain_text("2027-03-13 07:30:00 UTC")
    expect(rows.nth(1)).to_have_class(re.compile(r"\bdst-shifted\b"))
    expect(rows.nth(1)).to_contain_text("Shifted")
    expect(rows.nth(1)).to_contain_text("2027-03-14 03:30:00 EDT")
    expect(rows.nth(1).locator("td").first).to_contain_text("UTC-04:00")
    expect(rows.nth(1)).to_contain_text("2027-03-14 07:30:00 UTC")
    expect(rows.nth(1)).to_contain_text(
        "02:30 does not exist on 2027-03-14 (daylight saving time starts): fires at 03:30 EDT"
    )
    expect(rows.nth(2)).to_contain_text("2027-03-15 02:30:00 EDT")
    expect(rows.nth(2).locator("td").first).to_contain_text("UTC-04:00")
    expect(rows.nth(2)).to_contain_text("2027-03-15 06:30:00 UTC")
    expect(page.locator("tr.dst-shifted")).to_have_count(1)

    # skip: the 14th is shown dropped, and COUNT=3 reaches the 16th instead.
    page.get_by_label("A time that does not exist").select_option("skip")
    expect(rows).to_have_count(4)
    expect(rows.nth(1)).to_have_class(re.compile(r"\bdst-skipped\b"))
    expect(rows.nth(1)).to_contain_text("Skipped")
    expect(rows.nth(1)).to_contain_text("2027-03-14 02:30:00")
    expect(rows.nth(1)).to_contain_text("not sent")
    expect(rows.nth(3)).to_contain_text("2027-03-16 02:30:00 EDT")
    expect(rows.nth(3).locator("td").first).to_contain_text("UTC-04:00")
    expect(rows.nth(3)).to_contain_text("2027-03-16 06:30:00 UTC")

    page.get_by_label("A time that does not exist").select_option("shift")
    expect(rows).to_have_count(3)
    expect(page.locator("tr.dst-shifted")).to_have_count(1)
    screenshot(page, "edit-preview")

    page.get_by_role("button", name="Create").click()
    expect(page.get_by_role("heading", name="Water the garden (New York)")).to_be_visible()
    expect(page.locator("#notice")).to_contain_text("Created")
    expect(page.locator("#d-status")).to_have_text("pending")
    expect(page.locator("#d-next")).to_contain_text("2027-03-13 02:30:00 EST")
    expect(page.locator("#d-next")).to_contain_text("2027-03-13 07:30:00 UTC")
    expect(page.locator("#history-status")).to_have_text("Nothing delivered yet.")

    page.get_by_role("button", name="Pause").click()
    expect(page.locator("#d-status")).to_have_text("paused")
    expect(page.get_by_role("button", name="Pause")).to_be_disabled()
    expect(page.get_by_role("button", name="Resume")).to_be_enabled()

    # The list, filtered on the server by status and searched by title in the page.
    page.get_by_role("link", name="Reminders", exact=True).click()
    row = page.locator("#reminders tbody tr", has_text="Water the garden (New York)")
    expect(row).to_contain_text("paused")
    page.get_by_label("Status").select_option("pending")
    expect(row).to_have_count(0)
    page.get_by_label("Status").select_option("paused")
    expect(row).to_have_count(1)
    page.get_by_label("Search titles").fill("no such title")
    expect(row).to_be_hidden()
    expect(page.get_by_text("No reminders match.")).to_be_visible()
    page.get_by_label("Search titles").fill("garden")
    expect(row).to_be_visible()

    # Resume, then edit (PATCH with If-Match): an exclusion of the 15th. RFC 5545
    # §3.8.5.1: the EXDATE is removed from the COUNT=3 set, which keeps the 13th and 14th.
    row.get_by_role("link", name="History of Water the garden (New York)").click()
    page.get_by_role("button", name="Resume").click()
    expect(page.locator("#d-status")).to_have_text("pending")
    page.get_by_role("link", name="Edit", exact=True).click()
    expect(page.get_by_role("heading", name="Edit reminder")).to_be_visible()
    expect(page.get_by_label("Timezone")).to_have_value("America/New_York")
    page.get_by_label("Title").fill("Water the roses (New York)")
    page.get_by_label("Excluded dates").fill("2027-03-15T02:30")
    rows = page.locator("#preview tbody tr")
    expect(rows).to_have_count(2)
    expect(rows.nth(1)).to_have_class(re.compile(r"\bdst-shifted\b"))
    with page.expect_request(lambda request: request.method == "PATCH") as patch:
        page.get_by_role("button", name="Save changes").click()
    # Only what changed: an unchanged schedule sent again would count as a schedule change.
    assert set(patch.value.post_data_json) == {"title", "exdates"}
    assert patch.value.headers["if-match"] == '"3"'  # created 1, paused 2, resumed 3
    expect(page.get_by_role("heading", name="Water the roses (New York)")).to_be_visible()
    expect(page.locator("#d-status")).to_have_text("pending")

    page.once("dialog", lambda dialog: dialog.accept())
    page.get_by_role("button", name="Cancel reminder").click()
    expect(page.locator("#d-status")).to_have_text("cancelled")
    expect(page.get_by_role("button", name="Resume")).to_be_disabled()


def delivery_in_history(page: Page) -> None:
    due = datetime.fromtimestamp(math.ceil(time.time() + 8), tz=UTC)
    page.get_by_role("link", name="New reminder").click()
    page.get_by_label("Title").fill("Stretch your legs")
    page.get_by_label("Body").fill("And drink some water.")
    fill_schedule(page, due.strftime("%Y-%m-%dT%H:%M:%S"), "UTC")
    expect(page.locator("#preview tbody tr")).to_have_count(1)
    page.get_by_role("button", name="Create").click()
    expect(page.get_by_role("heading", name="Stretch your legs")).to_be_visible()

    # The page refreshes the history by itself; the occurrence is the due instant.
    sent = page.locator("#history tbody tr.delivery-sent")
    expect(sent).to_have_count(1, timeout=DELIVERY_TIMEOUT_MS)
    expect(sent).to_contain_text(f"{due:%Y-%m-%d %H:%M:%S} UTC")
    expect(sent.locator("td[data-label=Provider]")).to_have_text("file")
    expect(sent.locator("td[data-label=Attempts]")).to_have_text("1")
    expect(page.locator("#d-status")).to_have_text("completed")
    expect(page.get_by_role("button", name="Cancel reminder")).to_be_disabled()
    screenshot(page, "history")

    page.get_by_role("link", name="Reminders", exact=True).click()
    expect(page.locator("#reminders tbody tr").first).to_be_visible()
    screenshot(page, "list")


def problems_next_to_fields(page: Page) -> None:
    page.get_by_role("link", name="New reminder").click()
    # RFC 5545 §3.3.10: BYWEEKNO "MUST NOT be used when the FREQ rule part is set to
    # anything other than YEARLY" (docs/api.md, "Refusals"): the preview names `rrule`.
    fill_schedule(page, "2027-01-04T09:00", "Europe/Paris", "FREQ=WEEKLY;BYWEEKNO=1")
    rrule = page.get_by_label("Repeat rule")
    expect(rrule).to_have_attribute("aria-invalid", "true")
    expect(page.locator(".field[data-field=rrule] .error")).to_contain_text("BYWEEKNO")
    expect(page.locator("#preview-problem")).to_contain_text("Invalid")

    # A blank title refused by Create, an unknown zone by the preview: each under its field.
    rrule.fill("")
    page.get_by_label("Timezone").fill("Mars/Olympus_Mons")
    expect(page.get_by_label("Timezone")).to_have_attribute("aria-invalid", "true")
    expect(rrule).not_to_have_attribute("aria-invalid", "true")
    page.get_by_role("button", name="Create").click()
    expect(page.get_by_label("Title")).to_have_attribute("aria-invalid", "true")
    expect(page.locator("#form-problem")).to_contain_text("title")
    expect(page.get_by_label("Timezone")).to_have_attribute("aria-invalid", "true")
    expect(page.locator(".field[data-field=timezone] .error")).not_to_be_empty()
    expect(page.get_by_role("heading", name="New reminder")).to_be_visible()  # nothing saved

    # An excluded date that is no date: the schedule's check names it "exdates[0]"
    # (docs/api.md: an item as "exdates.0" or "exdates[0]"); trial helper-53 saw it only
    # in the box above the form, twice, and the field not marked.
    page.get_by_label("Timezone").fill("Europe/Paris")
    page.get_by_label("Excluded dates").fill("garbage")
    excluded = page.get_by_label("Excluded dates")
    expect(excluded).to_have_attribute("aria-invalid", "true")
    expect(page.locator(".field[data-field=exdates] .error")).to_contain_text("exdates.0")


def refused_token(browser: Browser, console: Console) -> None:
    with console_tab(browser, console, signed_in=False) as tab:
        tab.get_by_label("Token").fill("not.a.token")
        tab.get_by_role("button", name="Sign in").click()
        token = tab.get_by_label("Token")
        expect(token).to_have_attribute("aria-invalid", "true")
        expect(tab.locator(".field[data-field=token] .error")).not_to_be_empty()
        expect(tab.get_by_role("heading", name="Sign in")).to_be_visible()
        screenshot(tab, "sign-in-refused")


def dead_letter_of_a_new_reminder(console: Console) -> str:
    """A one-time reminder due in an hour whose occurrence is in the dead-letter queue, as
    after MAX_RECEIVE_COUNT failed receives (claimed; the message body in the claim's own
    shape, reminder_claim_due_to_queue). Returns the reminder id."""
    due = (datetime.now(UTC) + timedelta(hours=1)).replace(microsecond=0)
    created = httpx.post(
        f"{console.dev.base_url}/v1/reminders",
        headers={"Authorization": f"Bearer {console.token}"},
        json={"title": "Replayed by the SRE", "start_local": due.strftime("%Y-%m-%dT%H:%M:%S"),
              "timezone": "UTC"},
        timeout=10,
        trust_env=False,
    )  # fmt: skip
    assert created.status_code == 201, created.text
    rid = created.json()["id"]
    engine = create_engine(console.dev.db_url())
    try:
        with engine.begin() as conn:
            conn.execute(
                text(
                    "UPDATE reminders SET status = 'claimed', claimed_by = 'test@gone:1',"
                    " claimed_at = now() WHERE id = :id"
                ),
                {"id": rid},
            )
            conn.execute(
                text(
                    "INSERT INTO queue_messages (queue_name, body, visible_at, receive_count,"
                    " dead_lettered, dead_lettered_at)"
                    " SELECT 'reminders', jsonb_build_object('reminder_id', id, 'run_time_utc',"
                    " to_char(next_run_utc AT TIME ZONE 'UTC',"
                    " 'YYYY-MM-DD\"T\"HH24:MI:SS.US\"+00:00\"'), 'version', version, 'user_id',"
                    " user_id), now(), 5, true, now() FROM reminders WHERE id = :id"
                ),
                {"id": rid},
            )
    finally:
        engine.dispose()
    return rid


def operations_as_sre(browser: Browser, console: Console) -> None:
    # A user's token: no Operations link, and the page itself says what it needs (403).
    with console_tab(browser, console) as page:
        expect(page.locator("#ops-link")).to_be_hidden()
        page.goto(f"{console.url}#/ops")
        expect(page.locator("#ops-problem")).to_contain_text("reminders:admin")
    rid = dead_letter_of_a_new_reminder(console)
    with console_tab(browser, console, token=mint(console.dev, "--user", "ops", "--admin")) as page:
        page.get_by_role("link", name="Operations").click()
        expect(page.get_by_role("heading", name="Operations")).to_be_visible()
        # `reminders dev` runs every workload in one process: one live worker per role.
        for role in ("coordinator", "outbox_sweeper", "sender", "maintenance"):
            check = page.locator(f"#ops-checks tr[data-check=workers_{role}]")
            expect(check).to_contain_text("OK")
            expect(page.locator(f"#ops-workers tr[data-role={role}]")).to_contain_text("OK")
        # The reminder delivered earlier in this test is a point of each percentile.
        expect(page.locator("#lag-chart circle.point-p99").first).to_be_attached()
        letter = page.locator("#ops-letters tbody tr")
        expect(letter).to_have_count(1)
        expect(letter).to_contain_text(rid)
        screenshot(page, "operations")
        page.get_by_role("button", name="Replay all").click()
        expect(page.locator("#replay-result")).to_contain_text("Redriven 1")
        expect(page.locator("#ops-dlq")).to_contain_text("The dead-letter queue is empty.")
    # The safe replay sends the occurrence it names, once.
    deadline = time.monotonic() + DELIVERY_TIMEOUT_MS / 1000
    while True:
        deliveries = httpx.get(
            f"{console.dev.base_url}/v1/reminders/{rid}/deliveries",
            headers={"Authorization": f"Bearer {console.token}"},
            timeout=10,
            trust_env=False,
        ).json()["items"]
        if [d["status"] for d in deliveries] == ["sent"] or time.monotonic() > deadline:
            break
        time.sleep(0.5)
    assert [d["status"] for d in deliveries] == ["sent"], deliveries
