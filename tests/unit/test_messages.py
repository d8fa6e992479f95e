"""The occurrence message codec (reminder_core/messages.py): what a poison message is.

The body's fields are those the module docstring documents (and `reminder_claim_due` writes):
reminder_id (a UUID), run_time_utc (ISO 8601 with an offset), user_id, version (an
integer), replay (true only when redriven)."""

from __future__ import annotations

import uuid
from datetime import UTC, datetime, timedelta, timezone

import pytest

from reminder_core.messages import MalformedMessage, OccurrenceMessage, as_replay, run_time_of

RID = "01a22fc3-4417-79de-9e59-646fbef08514"
BODY = {"reminder_id": RID, "run_time_utc": "2030-01-01T12:00:00.000000+00:00",
        "version": 3, "user_id": "alice"}  # fmt: skip


def test_a_replay_is_decoded_and_encoded_with_its_flag() -> None:
    occurrence = OccurrenceMessage.decode(as_replay(BODY))
    assert occurrence.replay is True
    assert occurrence.encode() == {**BODY, "replay": True}
    assert occurrence.key == (uuid.UUID(RID), datetime(2030, 1, 1, 12, tzinfo=UTC))


def test_an_offset_other_than_utc_is_the_same_instant() -> None:
    body = {**BODY, "run_time_utc": "2030-01-01T13:00:00+01:00"}
    assert OccurrenceMessage.decode(body).run_time_utc == datetime(2030, 1, 1, 12, tzinfo=UTC)
    assert run_time_of(body) == datetime(2030, 1, 1, 12, tzinfo=timezone(timedelta(0)))


@pytest.mark.parametrize(
    "change",
    [
        {"reminder_id": "not-a-uuid"},
        {"run_time_utc": "2030-01-01T12:00:00"},  # no offset: which instant?
        {"run_time_utc": "tomorrow"},
        {"version": "three"},
        {"version": True},  # a JSON boolean is not a version
        {"version": None},
    ],
)
def test_a_malformed_field_is_a_poison_message(change: dict[str, object]) -> None:
    with pytest.raises(MalformedMessage):
        OccurrenceMessage.decode({**BODY, **change})


@pytest.mark.parametrize("missing", ["reminder_id", "run_time_utc", "user_id", "version"])
def test_a_missing_field_is_a_poison_message(missing: str) -> None:
    with pytest.raises(MalformedMessage):
        OccurrenceMessage.decode({k: v for k, v in BODY.items() if k != missing})


def test_only_a_true_replay_flag_counts() -> None:
    assert OccurrenceMessage.decode({**BODY, "replay": "yes"}).replay is False
