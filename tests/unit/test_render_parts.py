"""The renderer's cached parts (issue 15: less per-call setup than `Template.render`)
give what Jinja2's `Template.render` gives, the reference here, for the shipped
templates and for overrides that use inheritance, imports, macros, globals and an
autoescape block; and its time strings are kept per instant, offset and zone."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta, timezone
from pathlib import Path

import jinja2
import pytest

from sender.render import Renderer

RUN = datetime(2026, 12, 1, 7, 30, tzinfo=UTC)

CONTEXT = {
    "reminder_id": "r-1",
    "title": "<b>Stand-up</b> & co",
    "body": "Bring <notes>",
    "run_time_utc": RUN.isoformat(),
    "run_time_local": "2026-12-01 08:30 CET",
    "timezone": "Europe/Paris",
    "recipient": "a@example.com",
    "snooze_url": "https://r.example/s?t=1&u=2",
    "tomorrow_url": "https://r.example/t",
    "stop_url": "https://r.example/x",
    "snooze_label": "1 hour",
}

OVERRIDES = {
    "base.html.j2": "<h1>{% block head %}{{ title }}{% endblock %}</h1>"
    "{% block rest %}{% endblock %}",
    "fancy.subject.j2": "{% set n = namespace(x=0) %}{% for _ in range(3) %}{% set n.x = n.x + 1 %}"
    "{% endfor %}{{ title | upper }} x{{ n.x }}",
    "macros.j2": '{% macro link(u, t) %}<a href="{{ u }}">{{ t }}</a>{% endmacro %}',
    "fancy.txt.j2": "{{ title }}\n{% if body %}{{ body }}{% endif %}\n"
    "{{ cycler('a', 'b').next() }}",
    "fancy.html.j2": "{% extends 'base.html.j2' %}{% import 'macros.j2' as m %}"
    "{% block head %}{{ super() }}!{% endblock %}"
    "{% block rest %}{{ m.link(stop_url, title) }}"
    "{% autoescape false %}{{ body }}{% endautoescape %}{{ body }}{% endblock %}",
}


def reference(renderer: Renderer, name: str) -> str:
    """What Jinja2 itself renders for `name` with CONTEXT."""
    return renderer._env.get_template(name).render(CONTEXT)


@pytest.mark.parametrize("template", ["reminder", "fancy"])
def test_each_part_renders_as_jinja2_renders_it(tmp_path: Path, template: str) -> None:
    for name, source in OVERRIDES.items():
        (tmp_path / name).write_text(source)
    renderer = Renderer(tmp_path)
    for part, name in zip(renderer._templates(template), ("subject", "txt", "html"), strict=True):
        assert part.render(dict(CONTEXT)) == reference(renderer, f"{template}.{name}.j2")


def test_the_html_part_escapes_and_the_text_part_does_not() -> None:
    renderer = Renderer()
    _, text, html = renderer._templates("reminder")
    assert "&lt;b&gt;Stand-up&lt;/b&gt; &amp; co" in html.render(dict(CONTEXT))
    assert "<b>Stand-up</b> & co" in text.render(dict(CONTEXT))


def test_an_undefined_variable_still_fails() -> None:
    renderer = Renderer()
    subject, _, _ = renderer._templates("reminder")
    with pytest.raises(jinja2.UndefinedError):
        subject.render({})


def test_time_strings_follow_the_instant_its_offset_and_the_zone() -> None:
    renderer = Renderer()
    # One instant written with two offsets: equal datetimes, different ISO 8601 texts.
    paris = timezone(timedelta(hours=1))
    same_instant = RUN.astimezone(paris)
    assert same_instant == RUN
    assert renderer._times(RUN, "Europe/Paris") == ("2026-12-01T07:30:00+00:00",
                                                    "2026-12-01 08:30 CET")  # fmt: skip
    assert renderer._times(same_instant, "Europe/Paris")[0] == "2026-12-01T08:30:00+01:00"
    # 07:30 UTC is 02:30 EST in New York (UTC-5 in December).
    assert renderer._times(RUN, "America/New_York")[1] == "2026-12-01 02:30 EST"
    assert renderer._times(RUN, "Europe/Paris")[1] == "2026-12-01 08:30 CET"
