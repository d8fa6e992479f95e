"""Templates (issue 5): HTML and plain-text parts, HTML autoescaped, operator overrides,
and a missing template or variable is a permanent error (retrying cannot fix it)."""

from __future__ import annotations

from datetime import UTC, datetime
from pathlib import Path

import pytest

from reminder_core.errors import PermanentDeliveryError
from sender.render import Renderer

RUN = datetime(2026, 12, 1, 7, 30, tzinfo=UTC)


def render(renderer: Renderer, template: str = "reminder", title: str = "Stand-up") -> object:
    return renderer.render(
        template,
        reminder_id="r-1",
        title=title,
        body="Bring <notes> & coffee",
        run_time_utc=RUN,
        timezone="Europe/Paris",
    )


def test_both_parts_html_escaped_text_verbatim_local_time() -> None:
    email = Renderer().render(
        "reminder",
        reminder_id="r-1",
        title="<b>Stand-up</b>",
        body="Bring <notes> & coffee",
        run_time_utc=RUN,
        timezone="Europe/Paris",
    )
    assert email.subject == "Reminder: <b>Stand-up</b>"
    assert "<b>Stand-up</b>" in email.text
    assert "Bring <notes> & coffee" in email.text
    assert "&lt;b&gt;Stand-up&lt;/b&gt;" in email.html
    assert "Bring &lt;notes&gt; &amp; coffee" in email.html
    # 07:30 UTC on 1 December is 08:30 in Paris (CET, UTC+1).
    assert "2026-12-01 08:30 CET" in email.text
    assert "2026-12-01 08:30 CET" in email.html


def test_an_unknown_template_is_permanent() -> None:
    with pytest.raises(PermanentDeliveryError, match="nope"):
        render(Renderer(), template="nope")


def test_an_undefined_variable_in_an_override_is_permanent(tmp_path: Path) -> None:
    (tmp_path / "reminder.txt.j2").write_text("Hello {{ user_name }}\n")
    with pytest.raises(PermanentDeliveryError, match="user_name"):
        render(Renderer(tmp_path))


def test_an_override_wins_and_the_other_parts_stay_built_in(tmp_path: Path) -> None:
    (tmp_path / "reminder.subject.j2").write_text("Heads up: {{ title }}\n")
    email = render(Renderer(tmp_path))
    assert email.subject == "Heads up: Stand-up"  # type: ignore[attr-defined]
    assert "Scheduled for" in email.html  # type: ignore[attr-defined]


def test_the_profile_address_is_a_template_variable_escaped_in_html() -> None:
    email = Renderer().render(
        "reminder",
        reminder_id="r-1",
        title="Stand-up",
        body=None,
        run_time_utc=RUN,
        timezone="Europe/Paris",
        recipient="o'neil+<x>@example.com",
    )
    assert "Sent by Reminders to o'neil+<x>@example.com." in email.text
    assert "o&#39;neil+&lt;x&gt;@example.com" in email.html
