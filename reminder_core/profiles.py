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

from reminder_core.errors import InfrastructureError


@dataclass(frozen=True, slots=True)
class Profile:
    """What the sender and the API need to know about a user.

    Attributes:
        user_id: the JWT `sub`.
        email: the recipient address.
        timezone: IANA zone name that reminders without their own zone follow.
    """

    user_id: str
    email: str
    timezone: str


class ProfileSource(Protocol):
    """Where profiles come from."""

    def get(self, user_id: str) -> Profile | None:
        """Return the user's profile read afresh (or from a short cache), None if unknown.

        Raises:
            InfrastructureError: the source cannot be read right now (retry later).
        """
        ...


class LocalProfileSource:
    """Profiles from a JSON file: `{"<user_id>": {"email": "...", "timezone": "..."}}`.

    The file is re-read when its modification time changes, so editing it takes effect
    on the next lookup without a restart.
    """

    def __init__(self, path: Path) -> None:
        self.path = path
        self._lock = threading.Lock()
        self._mtime_ns: int | None = None
        self._profiles: dict[str, Profile] = {}

    def get(self, user_id: str) -> Profile | None:
        with self._lock:
            self._refresh()
            return self._profiles.get(user_id)

    def _refresh(self) -> None:
        try:
            mtime_ns = self.path.stat().st_mtime_ns
        except FileNotFoundError:
            self._profiles, self._mtime_ns = {}, None
            return
        if mtime_ns == self._mtime_ns:
            return
        try:
            raw = json.loads(self.path.read_text(encoding="utf-8"))
        except (OSError, ValueError) as exc:
            raise InfrastructureError(f"cannot read profiles file {self.path}: {exc}") from exc
        if not isinstance(raw, dict):
            raise InfrastructureError(f"profiles file {self.path} must hold a JSON object")
        profiles: dict[str, Profile] = {}
        for user_id, entry in raw.items():
            if isinstance(entry, dict) and isinstance(entry.get("email"), str):
                profiles[user_id] = Profile(
                    user_id=user_id,
                    email=entry["email"],
                    timezone=str(entry.get("timezone") or "UTC"),
                )
        self._profiles, self._mtime_ns = profiles, mtime_ns


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
