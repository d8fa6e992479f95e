"""File sink provider for development: one RFC 5322 `.eml` file per email."""

from __future__ import annotations

import os
import tempfile
from datetime import UTC, datetime
from pathlib import Path

from reminder_core.errors import TransientDeliveryError
from sender.providers.base import OutgoingEmail, SendReceipt
from sender.providers.mime import MIME_POLICY, build_mime, message_id


class FileSinkProvider:
    """Writes `<directory>/<idempotency_key>.eml`; accepts each key once, like a real
    provider honouring an idempotency key (a repeat returns the first receipt).

    The message is `build_mime`'s: Message-ID "<idempotency_key@reminders>" and
    `X-Entity-Ref-ID` carrying the key, so a resend is recognisably the same message.

    The file appears atomically (written aside, then hard-linked into place), so a reader
    never sees half an email and two concurrent sends of one key produce one file.
    """

    name = "file"
    #: A repeat of a key writes nothing new (providers.base.deduplicates_keys).
    deduplicates_keys = True

    def __init__(self, directory: Path) -> None:
        self.directory = directory

    def send(self, email: OutgoingEmail, *, idempotency_key: str) -> SendReceipt:
        if "/" in idempotency_key or idempotency_key.startswith("."):
            raise ValueError(f"unsafe idempotency key {idempotency_key!r}")
        msg_id = message_id(idempotency_key)
        target = self.directory / f"{idempotency_key}.eml"
        if target.exists():
            return SendReceipt(provider=self.name, provider_message_id=msg_id)
        mime = build_mime(email, idempotency_key=idempotency_key, now=datetime.now(UTC))
        try:
            try:
                fd, tmp = tempfile.mkstemp(dir=self.directory, prefix=".tmp-", suffix=".eml")
            except FileNotFoundError:  # the first email, or the directory was removed
                self.directory.mkdir(parents=True, exist_ok=True)
                fd, tmp = tempfile.mkstemp(dir=self.directory, prefix=".tmp-", suffix=".eml")
            try:
                with os.fdopen(fd, "wb") as fh:
                    fh.write(mime.as_bytes(policy=MIME_POLICY))
                    fh.flush()
                    os.fsync(fh.fileno())
                try:
                    os.link(tmp, target)
                except FileExistsError:
                    pass  # a concurrent send of the same key won; same receipt
            finally:
                os.unlink(tmp)
        except OSError as exc:
            raise TransientDeliveryError(f"file sink cannot write {target}: {exc}") from exc
        return SendReceipt(provider=self.name, provider_message_id=msg_id)


__all__ = ["FileSinkProvider", "build_mime"]
