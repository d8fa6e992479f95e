"""User profiles (email address, timezone): the `ProfileSource` interface and the local
file source used when no profile service URL is configured. The HTTP client of the profile
service is `reminder_core.profile_service.HttpProfileSource`.
"""

from __future__ import annotations

import json
import os
import threading
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol

from reminder_core.domain.localtime import load_zone
from reminder_core.domain.quiet_hours import QuietWindow, parse_windows
from reminder_core.errors import InfrastructureError, InvalidSchedule, ProfileDataError


@dataclass(frozen=True, slots=True)
class Profile:
    """What the sender and the API need to know about a user.

    Attributes:
        user_id: the JWT `sub`.
        email: the recipient address.
        timezone: IANA zone name that reminders without their own zone follow, and the
            zone the quiet hours are read in.
        quiet_hours: windows in which the user gets no email (reminder_core.domain.
            quiet_hours); empty: none.
    """

    user_id: str
    email: str
    timezone: str
    quiet_hours: tuple[QuietWindow, ...] = ()


class ProfileSource(Protocol):
    """Where profiles come from."""

    def get(self, user_id: str) -> Profile | None:
        """Return the user's profile read afresh (or from a short cache), None if unknown.

        Raises:
            InfrastructureError: the source cannot be read right now (retry later).
        """
        ...


class LocalProfileSource:
    """Profiles from a JSON file: `{"<user_id>": {"email": "...", "timezone": "...",
    "quiet_hours": [{"start": "22:00", "end": "07:30", "days": ["mon", ...]}]}}`
    (`timezone` and `quiet_hours` optional).

    The file is re-read when its modification time changes, so editing it takes effect
    on the next lookup without a restart.
    """

    def __init__(self, path: Path) -> None:
        self.path = path
        self._lock = threading.Lock()
        self._mtime_ns: int | None = None
        # user id -> (email, timezone, quiet_hours), as read
        self._entries: dict[str, tuple[str, object, object]] = {}

    def get(self, user_id: str) -> Profile | None:
        """Raises:
        InfrastructureError: the file cannot be read or is not a JSON object.
        ProfileDataError: the user's `email` is not usable (`usable_email`), their
            `timezone` is not a known IANA zone name, or their `quiet_hours` are not of
            the documented shape.
        """
        with self._lock:
            self._refresh()
            entry = self._entries.get(user_id)
        if entry is None:
            return None
        email, zone, quiet = entry
        email = email.strip()  # a hand-edited file: surrounding spaces are not the address
        if not usable_email(email):
            raise ProfileDataError(
                f"profile of {user_id!r}: unusable email",
                detail="the user's profile has no usable email address: the profile must be fixed",
            )
        return Profile(
            user_id=user_id,
            email=email,
            timezone=profile_zone(user_id, zone),
            quiet_hours=profile_quiet_hours(user_id, quiet),
        )

    def _refresh(self) -> None:
        try:
            mtime_ns = self.path.stat().st_mtime_ns
        except FileNotFoundError:
            self._entries, self._mtime_ns = {}, None
            return
        if mtime_ns == self._mtime_ns:
            return
        try:
            raw = json.loads(self.path.read_text(encoding="utf-8"))
        except (OSError, ValueError) as exc:
            raise InfrastructureError(f"cannot read profiles file {self.path}: {exc}") from exc
        if not isinstance(raw, dict):
            raise InfrastructureError(f"profiles file {self.path} must hold a JSON object")
        entries: dict[str, tuple[str, object, object]] = {}
        for user_id, entry in raw.items():
            if isinstance(entry, dict) and isinstance(entry.get("email"), str):
                entries[user_id] = (
                    entry["email"],
                    entry.get("timezone") or None,
                    entry.get("quiet_hours"),
                )
        self._entries, self._mtime_ns = entries, mtime_ns


def usable_email(email: object) -> bool:
    """True for an address a provider can be given: a string with an "@", no spaces and
    no control characters (no CR/LF to inject header fields); the rest of RFC 5321 is
    the provider's to check. The same rule for every profile source."""
    return (
        isinstance(email, str)
        and "@" in email
        and email == email.strip()
        and " " not in email
        and not any(ord(c) < 0x20 or ord(c) == 0x7F for c in email)
    )


def profile_zone(user_id: str, zone: object) -> str:
    """The timezone of `user_id`'s profile: an IANA zone name; missing (None) means UTC.

    Raises:
        ProfileDataError: `zone` is not a string naming a known IANA zone: broken profile
            data, the same for every profile source (the API answers 503, the sender
            retries later), never read as an error of the request.
    """
    if zone is None:
        return "UTC"
    try:
        if not isinstance(zone, str):
            raise InvalidSchedule("timezone", "not a string")
        load_zone(zone)
    except InvalidSchedule as exc:
        raise ProfileDataError(
            f"profile of {user_id!r}: timezone {exc.reason}",
            detail=f"the user's profile has an invalid timezone ({exc.reason}): the profile"
            " must be fixed",
        ) from exc
    return zone


def profile_quiet_hours(user_id: str, raw: object) -> tuple[QuietWindow, ...]:
    """The quiet hours of `user_id`'s profile (`quiet_hours` member; None: none).

    Raises:
        ProfileDataError: not of the shape `reminder_core.domain.quiet_hours.parse_windows`
            documents (broken profile data, as for `profile_zone`).
    """
    try:
        return parse_windows(raw)
    except ValueError as exc:
        raise ProfileDataError(
            f"profile of {user_id!r}: {exc}",
            detail=f"the user's profile has invalid quiet hours ({exc}): the profile must be fixed",
        ) from exc


def ensure_profile(path: Path, user_id: str, *, email: str, timezone: str) -> None:
    """Add `user_id` to the profiles file unless it is already there.

    Side effects: creates or atomically rewrites `path` (write to a temp file, rename).
    """
    path.parent.mkdir(parents=True, exist_ok=True)
    data: dict[str, object] = {}
    if path.exists():
        loaded = json.loads(path.read_text(encoding="utf-8") or "{}")
        if isinstance(loaded, dict):
            data = loaded
    if user_id in data:
        return
    data[user_id] = {"email": email, "timezone": timezone}
    tmp = path.with_suffix(f".{os.getpid()}.tmp")
    tmp.write_text(json.dumps(data, indent=2) + "\n", encoding="utf-8")
    tmp.replace(path)
