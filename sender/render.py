"""Render an email from Jinja2 templates at send time (so edits to title/body show)."""

from __future__ import annotations

import re
import time
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import Any
from zoneinfo import ZoneInfo

import jinja2

from reminder_core.errors import PermanentDeliveryError

_WS = re.compile(r"\s+")
MAX_SUBJECT = 250


@dataclass(frozen=True, slots=True)
class RenderedEmail:
    """Subject (one line), plain-text part and HTML part."""

    subject: str
    text: str
    html: str


class Renderer:
    """Renders `<template>.subject.j2`, `<template>.txt.j2` and `<template>.html.j2`.

    Templates in `override_dir` (if given) win over the built-in ones in
    `sender/templates/`. HTML is autoescaped; a missing template or an undefined variable
    is an error (StrictUndefined), never a silently empty email.

    Compiled templates are kept per name and their files re-checked at most every
    `reload_interval_s` seconds (Jinja2 would stat every file on every render): an
    operator's edit shows within that interval, without a restart.
    """

    def __init__(
        self,
        override_dir: Path | None = None,
        *,
        reload_interval_s: float = 5.0,
        snooze_label: str = "1 hour",
    ) -> None:
        self.reload_interval_s = reload_interval_s
        self.snooze_label = snooze_label
        self._compiled: dict[
            str, tuple[float, tuple[tuple[jinja2.Template, dict[str, Any]], ...]]
        ] = {}
        loaders: list[jinja2.BaseLoader] = []
        if override_dir is not None:
            loaders.append(jinja2.FileSystemLoader(str(override_dir)))
        loaders.append(jinja2.PackageLoader("sender", "templates"))
        self._env = jinja2.Environment(
            loader=jinja2.ChoiceLoader(loaders),
            autoescape=jinja2.select_autoescape(enabled_extensions=("html.j2",)),
            undefined=jinja2.StrictUndefined,
            keep_trailing_newline=True,
        )

    def render(
        self,
        template: str,
        *,
        reminder_id: str,
        title: str,
        body: str | None,
        run_time_utc: datetime,
        timezone: str,
        recipient: str = "",
        links: Mapping[str, str] | None = None,
    ) -> RenderedEmail:
        """Render one occurrence.

        Args:
            template: template name, e.g. "reminder".
            run_time_utc: aware UTC instant of the occurrence; shown in `timezone`.
            timezone: IANA zone name the recipient reads times in (the reminder's, else
                the user's profile's).
            recipient: the address from the user's profile, read at send time.
            links: the email's signed links by action ("snooze", "tomorrow", "stop";
                reminder_core.links), None or empty when PUBLIC_BASE_URL is unset.

        Template variables: reminder_id, title, body ("" when none), run_time_utc (ISO
        8601), run_time_local ("YYYY-MM-DD HH:MM TZ"), timezone, recipient, snooze_url,
        tomorrow_url, stop_url ("" without links), snooze_label ("1 hour").

        Raises:
            PermanentDeliveryError: unknown template, undefined variable or a template
                error (retrying cannot fix it).
        """
        local = run_time_utc.astimezone(ZoneInfo(timezone))
        context = {
            "reminder_id": reminder_id,
            "title": title,
            "body": body or "",
            "run_time_utc": run_time_utc.isoformat(),
            "run_time_local": local.strftime("%Y-%m-%d %H:%M %Z"),
            "timezone": timezone,
            "recipient": recipient,
            "snooze_url": (links or {}).get("snooze", ""),
            "tomorrow_url": (links or {}).get("tomorrow", ""),
            "stop_url": (links or {}).get("stop", ""),
            "snooze_label": self.snooze_label,
        }
        try:
            subject, text, html = (_render(t, g, context) for t, g in self._templates(template))
        except jinja2.TemplateError as exc:
            raise PermanentDeliveryError(f"template {template!r}: {exc}") from exc
        subject = _WS.sub(" ", subject).strip()[:MAX_SUBJECT]
        return RenderedEmail(subject=subject, text=text, html=html)

    def _templates(self, template: str) -> tuple[tuple[jinja2.Template, dict[str, Any]], ...]:
        """The subject, text and HTML templates of `template`, compiled (cached), each with
        its globals."""
        now = time.monotonic()
        cached = self._compiled.get(template)
        if cached is not None and now - cached[0] < self.reload_interval_s:
            return cached[1]
        compiled = tuple(
            (t, dict(t.globals))
            for t in (
                self._env.get_template(f"{template}.{part}.j2")
                for part in ("subject", "txt", "html")
            )
        )
        self._compiled[template] = (now, compiled)
        return compiled


def _render(template: jinja2.Template, globals_: dict[str, Any], context: dict[str, str]) -> str:
    """`template.render(context)` without building a fresh chained context per call
    (half the cost of a render); `globals_` is `dict(template.globals)`, flattened once."""
    ctx = template.new_context({**globals_, **context}, shared=True)
    return template.environment.concat(template.root_render_func(ctx))
