"""Render an email from Jinja2 templates at send time (so edits to title/body show)."""

from __future__ import annotations

import functools
import time
from collections.abc import Mapping
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any
from zoneinfo import ZoneInfo

import jinja2

from reminder_core.errors import PermanentDeliveryError
from reminder_core.record import record

MAX_SUBJECT = 250
#: Rendered time strings kept per (instant, zone) by a Renderer (`Renderer._times`).
TIMES_KEPT = 4096


@record
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
    operator's edit shows within that interval, without a restart. What every render of
    a template shares is computed once: its globals per compilation (`_Part`), its
    autoescape choice per template name, the time strings per occurrence instant and zone
    (`_times`).
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
        self._compiled: dict[str, tuple[float, tuple[_Part, _Part, _Part]]] = {}
        # (instant, its UTC offset, zone) -> the two time strings (see `_times`)
        self._time_strings: dict[tuple[datetime, timedelta | None, str], tuple[str, str]] = {}
        loaders: list[jinja2.BaseLoader] = []
        if override_dir is not None:
            loaders.append(jinja2.FileSystemLoader(str(override_dir)))
        loaders.append(jinja2.PackageLoader("sender", "templates"))
        self._env = jinja2.Environment(
            loader=jinja2.ChoiceLoader(loaders),
            # Asked on every render (EvalContext): the answer per template name is kept.
            autoescape=functools.lru_cache(maxsize=256)(
                jinja2.select_autoescape(enabled_extensions=("html.j2",))
            ),
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
        run_time_iso, run_time_local = self._times(run_time_utc, timezone)
        context = {
            "reminder_id": reminder_id,
            "title": title,
            "body": body or "",
            "run_time_utc": run_time_iso,
            "run_time_local": run_time_local,
            "timezone": timezone,
            "recipient": recipient,
            "snooze_url": (links or {}).get("snooze", ""),
            "tomorrow_url": (links or {}).get("tomorrow", ""),
            "stop_url": (links or {}).get("stop", ""),
            "snooze_label": self.snooze_label,
        }
        try:
            subject, text, html = (part.render(context) for part in self._templates(template))
        except jinja2.TemplateError as exc:
            raise PermanentDeliveryError(f"template {template!r}: {exc}") from exc
        # One line: each run of whitespace (str.isspace, as the regular expression \s+)
        # becomes one space, none at the ends; split and join cost a third of re.sub.
        subject = " ".join(subject.split())[:MAX_SUBJECT]
        return RenderedEmail(subject=subject, text=text, html=html)

    def _times(self, run_time_utc: datetime, timezone: str) -> tuple[str, str]:
        """(ISO 8601 of `run_time_utc`, "YYYY-MM-DD HH:MM TZ" in `timezone`), kept per
        instant and zone (occurrences cluster on the same minutes: strftime and the zone
        conversion cost as much as a template). At most TIMES_KEPT are kept; the cache is
        emptied when full.

        Raises:
            zoneinfo.ZoneInfoNotFoundError: `timezone` is no IANA zone (nothing kept).
        """
        key = (run_time_utc, run_time_utc.utcoffset(), timezone)
        found = self._time_strings.get(key)
        if found is None:
            local = run_time_utc.astimezone(ZoneInfo(timezone))
            found = (run_time_utc.isoformat(), local.strftime("%Y-%m-%d %H:%M %Z"))
            if len(self._time_strings) >= TIMES_KEPT:
                self._time_strings.clear()
            self._time_strings[key] = found
        return found

    def _templates(self, template: str) -> tuple[_Part, _Part, _Part]:
        """The subject, text and HTML parts of `template`, compiled (cached; files
        re-checked at most every `reload_interval_s`)."""
        now = time.monotonic()
        cached = self._compiled.get(template)
        if cached is not None and now - cached[0] < self.reload_interval_s:
            return cached[1]
        subject, text, html = (
            _Part(self._env.get_template(f"{template}.{part}.j2"))
            for part in ("subject", "txt", "html")
        )
        self._compiled[template] = (now, (subject, text, html))
        return subject, text, html


class _Part:
    """One compiled template and what each of its renders shares: its globals flattened
    into a dict (Jinja2 chains them afresh on every `render`, and lists a chain's keys
    again for every context: ~1 us of each render's ~6)."""

    __slots__ = ("globals", "template")

    def __init__(self, template: jinja2.Template) -> None:
        self.template = template
        self.globals: dict[str, Any] = dict(template.globals)

    def render(self, context: dict[str, str]) -> str:
        """`template.render(context)`: the same output, a third of the per-call setup.
        The context is made as `Template.new_context(vars, shared=True)` makes it
        (`environment.context_class(environment, vars, name, blocks, globals=...)`),
        given the flattened globals, whose keys are the same.

        Raises:
            jinja2.TemplateError: the template failed (e.g. an undefined variable).
        """
        template = self.template
        environment = template.environment
        ctx = environment.context_class(
            environment, {**self.globals, **context}, template.name, template.blocks,
            globals=self.globals,
        )  # fmt: skip
        return environment.concat(template.root_render_func(ctx))
