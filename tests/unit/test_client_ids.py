"""The Python client puts a reminder's id into the request's path: anything but a UUID
is refused before any request (trial helper-57: `reminders cancel ../calendar-feed`
sent DELETE /v1/calendar-feed and revoked the feed)."""

from __future__ import annotations

import socket
import uuid

import pytest

from reminders.client import ApiUnreachable, ReminderClient


@pytest.fixture
def client() -> ReminderClient:
    with socket.socket() as s:  # a port where nothing listens: a request is ApiUnreachable
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    return ReminderClient(f"http://127.0.0.1:{port}", "a.b.c")


@pytest.mark.parametrize("action", ["get", "pause", "resume", "cancel", "occurrences"])
@pytest.mark.parametrize("reminder_id", ["../calendar-feed", "..", "", "x/../../v1/me", "%2e%2e"])
def test_an_id_that_is_not_a_uuid_raises_before_any_request(
    client: ReminderClient, action: str, reminder_id: str
) -> None:
    with pytest.raises(ValueError, match="is not a reminder id"):
        getattr(client, action)(reminder_id)


def test_a_uuid_in_any_spelling_is_sent(client: ReminderClient) -> None:
    # Upper case, braces, a UUID object: the request is made (and finds nothing there).
    for reminder_id in ("0B6F3A52-4C1E-4E8A-9A57-2F4AD1D2C8E1",
                        "{0b6f3a52-4c1e-4e8a-9a57-2f4ad1d2c8e1}", uuid.uuid4()):  # fmt: skip
        with pytest.raises(ApiUnreachable):
            client.get(reminder_id)
