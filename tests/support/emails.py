"""One rendered email and idempotency key shared by the provider adapter tests."""

from __future__ import annotations

from sender.providers.base import OutgoingEmail

#: `<reminder_id>-<YYYYMMDDTHHMMSSZ>`, as reminder_core.domain.localtime.idempotency_key.
KEY = "0b5c9f2e-7d1a-4c59-9a43-2f0d8f6f1c11-20261201T073000Z"

EMAIL = OutgoingEmail(
    to="Alice <alice@example.org>",
    sender="Reminders <reminders@example.com>",
    subject="Reminder: Stand-up — café",  # non-ASCII: RFC 2047 words in SMTP, UTF-8 in APIs
    # A line starting with "." must survive SMTP dot-stuffing (RFC 5321 §4.5.2).
    text="Stand-up\n.hidden line\nScheduled for 2026-12-01 08:30 CET.\n",
    html="<h1>Stand-up</h1><p>Scheduled for 2026-12-01 08:30 CET.</p>\n",
)
