"""The queue message body of one due occurrence: the one codec every reader and writer uses.

The coordinator writes the body (the outbox payload, built by `reminder_claim_due` in
`store/sql/reminders.sql` in exactly the shape `encode` gives), the outbox publisher reads its
due time, the sender decodes it, the maintenance workload and `reminders dlq` decode dead
letters, and a redrive marks it as a replay (`as_replay`; the PostgreSQL queue does the same
in SQL, `queue_message_redrive` in `store/sql/queue_messages.sql`).

Body (a JSON object):

    {"reminder_id": "<uuid>", "run_time_utc": "<ISO 8601 with offset>",
     "user_id": "<text>", "version": <int>, "replay": true (only when redriven)}
"""

from __future__ import annotations

import uuid
from collections.abc import Mapping
from datetime import UTC, datetime
from typing import Any

from reminder_core.record import record


class MalformedMessage(ValueError):
    """A message body that is not an occurrence message (a poison message)."""


@record
class OccurrenceMessage:
    """Which occurrence of which reminder is due.

    Attributes:
        reminder_id: the reminder.
        run_time_utc: aware UTC; the occurrence the coordinator claimed.
        user_id: the reminder's owner (whose profile gives the address and zone).
        version: the reminder's version when it was claimed.
        replay: redriven from the dead-letter queue by `reminders dlq replay`: the sender
            sends exactly this occurrence unless its reminder was cancelled or paused.
    """

    reminder_id: uuid.UUID
    run_time_utc: datetime
    user_id: str
    version: int
    replay: bool = False

    @classmethod
    def decode(cls, body: Mapping[str, Any]) -> OccurrenceMessage:
        """Parse a message body.

        Raises:
            MalformedMessage: a field is missing or malformed (the message is poison:
                nothing could ever deliver it).
        """
        try:
            run_time = datetime.fromisoformat(str(body["run_time_utc"]))
            if run_time.tzinfo is None:
                raise MalformedMessage("run_time_utc has no UTC offset")
            version = body["version"]
            if isinstance(version, bool) or not isinstance(version, int | str):
                raise MalformedMessage(f"version is not an integer: {version!r}")
            return cls(
                reminder_id=uuid.UUID(str(body["reminder_id"])),
                run_time_utc=run_time.astimezone(UTC),
                user_id=str(body["user_id"]),
                version=int(version),
                replay=body.get("replay") is True,
            )
        except MalformedMessage:
            raise
        except (KeyError, TypeError, ValueError, AttributeError) as exc:
            raise MalformedMessage(f"malformed message body: {exc!r}") from exc

    def encode(self) -> dict[str, Any]:
        """The body as a JSON-ready dict (run_time_utc as ISO 8601 with `+00:00`, to the
        microsecond, as `reminder_claim_due` writes it); `replay` only when set."""
        body: dict[str, Any] = {
            "reminder_id": str(self.reminder_id),
            "run_time_utc": self.run_time_utc.astimezone(UTC).isoformat(timespec="microseconds"),
            "version": self.version,
            "user_id": self.user_id,
        }
        if self.replay:
            body["replay"] = True
        return body

    @property
    def key(self) -> tuple[uuid.UUID, datetime]:
        """(reminder_id, run_time_utc): the occurrence's unique key in `delivery_log`."""
        return (self.reminder_id, self.run_time_utc)


def run_time_of(body: Mapping[str, Any]) -> datetime:
    """The occurrence's due time (aware UTC) of a body, for delays and displays.

    Raises:
        MalformedMessage: the body has no valid run_time_utc.
    """
    try:
        run_time = datetime.fromisoformat(str(body["run_time_utc"]))
    except (KeyError, TypeError, ValueError) as exc:
        raise MalformedMessage(f"malformed run_time_utc: {exc!r}") from exc
    if run_time.tzinfo is None:
        raise MalformedMessage("run_time_utc has no UTC offset")
    return run_time.astimezone(UTC)


def as_replay(body: Mapping[str, Any]) -> dict[str, Any]:
    """A copy of `body` marked as a replay (what a redrive sends back to the queue); the
    other fields are kept as they are, even when malformed (the sender drops those)."""
    return {**body, "replay": True}
