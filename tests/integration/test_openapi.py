"""The OpenAPI document and the docs pages (issue 16, "API docs that work offline"),
against the app on the real database.

Sources of the expected values: the OpenAPI 3.1 specification (through
openapi-spec-validator), RFC 9457 (problem details: `application/problem+json`, members
type, title, status, detail, instance), RFC 6750 (bearer tokens), the HTML of the docs
pages (every script and stylesheet a path on this server: no CDN), and the document
itself: each limit it states (maxLength, minLength, maxItems, minimum, maximum) is taken
from it and sent to the API at the limit and one past it, so a document that drifts from
what the API enforces fails here.
"""

from __future__ import annotations

import base64
import re
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

import hypothesis
import pytest
import schemathesis
from fastapi.testclient import TestClient
from openapi_spec_validator import validate
from pydantic import SecretStr
from schemathesis.checks import not_a_server_error
from schemathesis.generation import GenerationMode
from schemathesis.specs.openapi.checks import (
    content_type_conformance,
    response_headers_conformance,
    response_schema_conformance,
    status_code_conformance,
)
from sqlalchemy import Engine

from reminder_core.settings import Settings
from tests.integration.api_support import PROBLEM_JSON, URL, Clock, TokenFor, bearer, build_app
from tests.integration.test_api import assert_problem

#: The operations of the reminders API (tags reminders and occurrences). The provider
#: webhooks authenticate with signatures and answer the providers; /v1/admin needs the
#: operator scope: neither is exercised here.
#: The calendar feed itself (`/v1/calendar-feed/{secret}.ics`) takes no bearer either: its
#: secret is the credential (tests/integration/test_calendar_feed.py exercises it).
IN_SCOPE = re.compile(r"^/v1/(?!webhooks/|admin/|calendar-feed/)")

START = "2030-07-01T09:00"  # after the test clock's NOW (2029-06-01), a Monday
DAILY = {"start_local": START, "timezone": "America/New_York", "rrule": "FREQ=DAILY"}


@pytest.fixture
def document(client: TestClient) -> dict[str, Any]:
    resp = client.get("/openapi.json")
    assert resp.status_code == 200
    return dict(resp.json())


# --------------------------------------------------------------------------------------
# (a) The document is a valid OpenAPI document, true about errors and auth
# --------------------------------------------------------------------------------------


def operations(doc: dict[str, Any]) -> Iterator[tuple[str, str, dict[str, Any]]]:
    """(method, path, operation) of every operation of the document."""
    for path, item in doc["paths"].items():
        for method, operation in item.items():
            yield method, path, operation


def test_document_is_valid_openapi(document: dict[str, Any]) -> None:
    validate(document)  # raises OpenAPIValidationError naming the offending member
    assert document["openapi"].startswith("3.1.")


def test_document_describes_the_api_of_today(document: dict[str, Any]) -> None:
    info = document["info"]
    assert "recurring" in info["description"].lower()
    text = str(document)
    # The issue: stale one-time-only wording, references to design sections.
    assert "Create one-time reminders" not in text
    assert "DESIGN" not in text
    assert "design.md" not in text
    for method, path, op in operations(document):
        assert op.get("summary"), (method, path)


def test_every_error_response_is_a_problem(document: dict[str, Any]) -> None:
    problem = document["components"]["schemas"]["Problem"]
    # RFC 9457 §3.1 members; `errors` is the extension member reminder_api.errors emits.
    assert set(problem["properties"]) == {
        "type", "title", "status", "detail", "instance", "errors"
    }  # fmt: skip
    assert set(problem["required"]) == {"type", "title", "status", "detail"}
    assert "HTTPValidationError" not in document["components"]["schemas"]
    for method, path, op in operations(document):
        for status, response in op["responses"].items():
            if int(status) < 400:
                continue
            content = response["content"]
            assert list(content) == [PROBLEM_JSON], (method, path, status)
            assert content[PROBLEM_JSON]["schema"] == {"$ref": "#/components/schemas/Problem"}


#: What each kind of operation can answer besides its success (reminder_api.errors,
#: reminder_api.app's BodyLimit, reminder_api.overload, reminder_api.ratelimit, the
#: routes' services).
EXPECTED_ERRORS: dict[tuple[str, str], set[int]] = {
    ("post", "/v1/reminders"): {400, 401, 409, 413, 415, 422, 429, 503},
    ("get", "/v1/reminders"): {401, 422, 429, 503},
    ("get", "/v1/reminders/{reminder_id}"): {401, 404, 422, 429, 503},
    ("delete", "/v1/reminders/{reminder_id}"): {401, 404, 409, 412, 422, 429, 503},
    ("patch", "/v1/reminders/{reminder_id}"): {400, 401, 404, 409, 412, 413, 415, 422, 429, 503},
    ("post", "/v1/reminders/{reminder_id}/pause"): {401, 404, 409, 412, 422, 429, 503},
    ("post", "/v1/reminders/{reminder_id}/resume"): {401, 404, 409, 412, 422, 429, 503},
    ("get", "/v1/reminders/{reminder_id}/occurrences"): {401, 404, 422, 429, 503},
    ("get", "/v1/reminders/{reminder_id}/deliveries"): {401, 404, 422, 429, 503},
    ("post", "/v1/occurrences:preview"): {400, 401, 413, 415, 422, 429, 503},
    ("post", "/v1/calendar-feed"): {401, 422, 429, 503},
    ("delete", "/v1/calendar-feed"): {401, 422, 429, 503},
    ("post", "/v1/reminders:import"): {400, 401, 413, 415, 422, 429, 503},
    # No bearer: the secret in the path is the credential; any other secret is 404.
    ("get", "/v1/calendar-feed/{secret}.ics"): {404, 503},
    ("get", "/readyz"): {503},
    # webhooks/router.py: signatures, not bearer tokens; the body read raw, so no 415/422.
    ("post", "/v1/webhooks/ses"): {400, 401, 403, 404, 413, 503},
    ("post", "/v1/webhooks/resend"): {400, 401, 404, 413, 503},
    ("post", "/v1/webhooks/postmark"): {400, 401, 404, 413, 503},
}


def test_routes_document_their_errors_and_the_bearer_scheme(document: dict[str, Any]) -> None:
    schemes = document["components"]["securitySchemes"]
    assert list(schemes.values()) == [
        {
            "type": "http",
            "scheme": "bearer",
            "bearerFormat": "JWT",
            "description": "JWT from `reminders token --user ID`",
        }
    ]
    (scheme_name,) = schemes
    documented = {
        (method, path): {int(s) for s in op["responses"] if int(s) >= 400}
        for method, path, op in operations(document)
    }
    for key, statuses in EXPECTED_ERRORS.items():
        assert documented[key] == statuses, key
    for method, path, op in operations(document):
        if IN_SCOPE.match(path) or path.startswith("/v1/admin/"):
            assert op["security"] == [{scheme_name: []}], (method, path)
        else:
            assert "security" not in op, (method, path)


def test_main_routes_have_examples(document: dict[str, Any]) -> None:
    paths = document["paths"]
    for method, path in (
        ("post", "/v1/reminders"),
        ("patch", "/v1/reminders/{reminder_id}"),
        ("post", "/v1/occurrences:preview"),
    ):
        assert paths[path][method]["requestBody"]["content"]["application/json"]["examples"]
    schemas = document["components"]["schemas"]
    assert schemas["ReminderOut"]["examples"]
    assert schemas["OccurrenceList"]["examples"]


def test_request_examples_are_accepted(
    client: TestClient, document: dict[str, Any], token_for: TokenFor
) -> None:
    # Each documented request example, sent as it is, is what the API accepts.
    headers = bearer(token_for("alice"))
    created = client.post(URL, json=DAILY | {"title": "Patched"}, headers=headers).json()
    targets = {
        ("post", "/v1/reminders"): (URL, {201}),
        ("patch", "/v1/reminders/{reminder_id}"): (f"{URL}/{created['id']}", {200}),
        ("post", "/v1/occurrences:preview"): ("/v1/occurrences:preview", {200}),
    }
    for (method, path), (url, statuses) in targets.items():
        content = document["paths"][path][method]["requestBody"]["content"]
        for name, example in content["application/json"]["examples"].items():
            resp = client.request(method, url, json=example["value"], headers=headers)
            assert resp.status_code in statuses, (path, name, resp.text)


# --------------------------------------------------------------------------------------
# (b) /docs and /redoc load only files this server serves
# --------------------------------------------------------------------------------------

ASSET_TYPES = {".js": "text/javascript", ".css": "text/css", ".png": "image/png"}


@pytest.mark.parametrize("page", ["/docs", "/redoc"])
def test_docs_pages_use_only_local_assets(client: TestClient, page: str) -> None:
    resp = client.get(page)
    assert resp.status_code == 200
    assert resp.headers["content-type"].startswith("text/html")
    html = resp.text
    urls = re.findall(r"""(?:src|href|spec-url)\s*=\s*["']([^"']+)["']""", html)
    urls += re.findall(r"""\burl:\s*'([^']+)'""", html)  # Swagger UI's document URL
    assert urls, html
    assert "/openapi.json" in urls
    for url in urls:
        # A path on this server: not absolute (http:, https:), not protocol-relative.
        assert url.startswith("/"), url
        assert not url.startswith("//"), url
    assert not re.search(r"https?://", html), "the page names another host"
    assets = [u for u in urls if u != "/openapi.json"]
    assert any(u.endswith(".js") for u in assets)
    for url in assets:
        asset = client.get(url)
        assert asset.status_code == 200, url
        expected = ASSET_TYPES[url[url.rfind(".") :]]
        assert asset.headers["content-type"].split(";")[0] == expected, url
        assert len(asset.content) > 0


def test_swagger_ui_has_no_online_validator(client: TestClient) -> None:
    # Swagger UI calls validator.swagger.io for its badge unless validatorUrl is null.
    assert '"validatorUrl": null' in client.get("/docs").text


# --------------------------------------------------------------------------------------
# (c) Every documented limit is the one the API enforces
# --------------------------------------------------------------------------------------

BOUND_KEYWORDS = ("minLength", "maxLength", "minItems", "maxItems", "minimum", "maximum")


@dataclass(frozen=True)
class Limit:
    """One documented bound: `keyword` of the field at `where` ("body", "query",
    "header") and `field` (dotted for nested body members)."""

    method: str
    path: str
    where: str
    field: str
    keyword: str
    bound: int

    @property
    def past(self) -> int:
        """The nearest value the bound refuses."""
        return self.bound + 1 if self.keyword.startswith("max") else self.bound - 1


def resolve(doc: dict[str, Any], schema: dict[str, Any]) -> dict[str, Any]:
    while "$ref" in schema:
        name = schema["$ref"].rsplit("/", 1)[1]
        schema = doc["components"]["schemas"][name]
    return schema


def bounds(
    doc: dict[str, Any], schema: dict[str, Any], field: str
) -> Iterator[tuple[str, str, int]]:
    """(field, keyword, bound) of `schema` and its members, nullable variants included."""
    schema = resolve(doc, schema)
    for variant in [schema, *schema.get("anyOf", ())]:
        variant = resolve(doc, variant)
        for keyword in BOUND_KEYWORDS:
            if keyword in variant:
                yield field, keyword, variant[keyword]
        for name, member in variant.get("properties", {}).items():
            yield from bounds(doc, member, f"{field}.{name}" if field else name)


def documented_limits(doc: dict[str, Any]) -> list[Limit]:
    limits = []
    for method, path, op in operations(doc):
        if not IN_SCOPE.match(path):
            continue
        for param in op.get("parameters", ()):
            for field, keyword, bound in bounds(doc, param["schema"], param["name"]):
                limits.append(Limit(method, path, param["in"], field, keyword, bound))
        body = op.get("requestBody", {}).get("content", {}).get("application/json")
        if body is not None:
            for field, keyword, bound in bounds(doc, body["schema"], ""):
                limits.append(Limit(method, path, "body", field, keyword, bound))
    return limits


def text_of(length: int) -> str:
    return "a" * length


def rrule_of(length: int) -> str:
    # A valid rule of any length from 19 on: repeated BYHOUR values (RFC 5545 §3.3.10:
    # byhrlist = hour *("," hour), hour = 1*2DIGIT) select the same hour once.
    head = "FREQ=DAILY;BYHOUR=9"
    rest = length - len(head)
    odd = ",09" if rest % 2 else ""
    return head + odd + ",9" * ((rest - len(odd)) // 2)


def instant_of(length: int) -> str:
    # ISO 8601 allows any number of decimal fraction digits (§4.2.2.4).
    head, tail = "2030-07-01T00:00:00.", "+00:00"
    return head + "0" * (length - len(head) - len(tail)) + tail


def if_match_of(length: int) -> str:
    # RFC 9110 §13.1.1: If-Match = "*" / #entity-tag; a list with spaces after its comma.
    return "*," + " " * (length - 3) + "*"


def exdates_of(count: int) -> list[str]:
    # Days after START at its time: occurrences of the daily rule (RFC 5545 §3.8.5.1).
    start = datetime.fromisoformat(START)
    return [(start + timedelta(days=i + 1)).isoformat(timespec="minutes") for i in range(count)]


#: How to build a valid value of a given size (length, item count, number) per field.
VALUE_OF: dict[str, Callable[[int], Any]] = {
    "title": text_of,
    "body": text_of,
    "client_request_id": text_of,
    "Idempotency-Key": text_of,
    "rrule": rrule_of,
    "from": instant_of,
    "If-Match": if_match_of,
    "exdates": exdates_of,
    "limit": int,
    "misfire.max_lateness_s": int,
}


def test_every_documented_limit_is_covered(document: dict[str, Any]) -> None:
    limits = documented_limits(document)
    assert {limit.field for limit in limits} <= set(VALUE_OF)
    # The bounds the issue was about, as the document states them today.
    # The bound the issue was about: MAX_EXDATES (100 by default), not the parse bound.
    exdates = {
        (lim.method, lim.path, lim.keyword, lim.bound) for lim in limits if lim.field == "exdates"
    }
    assert exdates == {
        ("post", "/v1/reminders", "maxItems", 100),
        ("patch", "/v1/reminders/{reminder_id}", "maxItems", 100),
        ("post", "/v1/occurrences:preview", "maxItems", 100),
    }


def prepare(client: TestClient, headers: dict[str, str], limit: Limit) -> str:
    """The URL to send `limit`'s request to; a reminder of its own where the path has
    one (recurring, paused for a resume)."""
    if "{reminder_id}" not in limit.path:
        return limit.path
    created = client.post(URL, json=DAILY | {"title": "Limits"}, headers=headers)
    assert created.status_code == 201, created.text
    rid = created.json()["id"]
    if limit.path.endswith("/resume"):
        assert client.post(f"{URL}/{rid}/pause", headers=headers).status_code == 200
    return limit.path.replace("{reminder_id}", rid)


#: A one-event calendar for the limits of `POST /v1/reminders:import` (its body is .ics).
ONE_EVENT = (
    b"BEGIN:VCALENDAR\r\nVERSION:2.0\r\nPRODID:-//tests//EN\r\nBEGIN:VEVENT\r\nUID:lim\r\n"
    b"DTSTART:20300105T090000Z\r\nSUMMARY:Limits\r\nEND:VEVENT\r\nEND:VCALENDAR\r\n"
)


def send(client: TestClient, headers: dict[str, str], limit: Limit, value: Any) -> Any:
    if limit.path == "/v1/reminders:import":
        assert limit.where == "header"
        calendar = {"Content-Type": "text/calendar", limit.field: value}
        return client.post(limit.path, content=ONE_EVENT, headers=headers | calendar)
    url = prepare(client, headers, limit)
    body: dict[str, Any] | None = None
    if limit.method in ("post", "patch") and "{reminder_id}" not in limit.path:
        body = dict(DAILY)
        if limit.path == URL:
            body["title"] = "Limits"
    elif limit.method == "patch":
        body = {}
    query: dict[str, Any] = {}
    extra: dict[str, str] = {}
    if limit.where == "body":
        assert body is not None
        *parents, name = limit.field.split(".")
        target = body
        for parent in parents:
            target = target.setdefault(parent, {})
        target[name] = value
        if limit.field == "exdates" and limit.method == "patch":
            body["rrule"] = "FREQ=DAILY"
    elif limit.where == "query":
        query[limit.field] = value
    else:
        extra[limit.field] = value
    return client.request(
        limit.method.upper(),
        url,
        params=query,
        json=body,
        headers=headers | extra,
    )


def test_documented_limits_are_enforced(
    client: TestClient, document: dict[str, Any], token_for: TokenFor
) -> None:
    headers = bearer(token_for("alice"))
    limits = documented_limits(document)
    assert len(limits) >= 20  # the document states them: this test is not vacuous
    for limit in limits:
        check_limit(client, headers, limit)


def check_limit(client: TestClient, headers: dict[str, str], limit: Limit) -> None:
    """A value at `limit` is accepted; the nearest one past it is a 422 naming the field."""
    make = VALUE_OF[limit.field]
    at = send(client, headers, limit, make(limit.bound))
    assert at.status_code in (200, 201), (limit, at.text)
    if limit.past < 0:
        return  # nothing below zero to build (a length or a count of 0 is the floor)
    past = send(client, headers, limit, make(limit.past))
    assert_problem(past, 422, limit.field)


def test_exdates_limit_follows_max_exdates(
    db: Engine, settings: Settings, clock: Clock, token_for: TokenFor
) -> None:
    # MAX_EXDATES is a setting (docs/configuration.md): the document states the one in force.
    custom = settings.model_copy(update={"max_exdates": 3})
    with TestClient(build_app(custom, db, clock)) as c:
        limits = [lim for lim in documented_limits(c.get("/openapi.json").json())
                  if lim.field == "exdates"]  # fmt: skip
        assert {lim.bound for lim in limits} == {3}
        for limit in limits:
            check_limit(c, bearer(token_for("alice")), limit)


# --------------------------------------------------------------------------------------
# (d) Schemathesis: generated requests, every answer as documented, no 5xx
# --------------------------------------------------------------------------------------

CHECKS = [
    not_a_server_error,
    status_code_conformance,
    content_type_conformance,
    response_headers_conformance,
    response_schema_conformance,
]
EXAMPLES_PER_OPERATION = 20


def for_each_case(strategy: Any, check: Callable[[Any], None]) -> None:
    """Run `check` on EXAMPLES_PER_OPERATION cases of a schemathesis strategy, the same
    cases on every run (derandomized, no example database)."""

    @hypothesis.given(case=strategy)
    @hypothesis.settings(
        max_examples=EXAMPLES_PER_OPERATION,
        deadline=None,
        database=None,
        derandomize=True,
        suppress_health_check=list(hypothesis.HealthCheck),
        phases=[hypothesis.Phase.generate],
    )
    def run(case: Any) -> None:
        check(case)

    run()


def test_schemathesis_finds_no_nonconformance(
    db: Engine, settings: Settings, clock: Clock, token_for: TokenFor
) -> None:
    # Every case within the user's budget (the clock stands still, so it never refills),
    # each answer with the RateLimit headers; a 429 is checked in test_api_limits.py.
    roomy = settings.model_copy(update={"rate_limit_burst": 1_000_000})
    with TestClient(build_app(roomy, db, clock)) as client:
        fuzz_reminders_api(client, token_for)


def fuzz_reminders_api(client: TestClient, token_for: TokenFor) -> None:
    schema = schemathesis.openapi.from_asgi("/openapi.json", client.app)
    headers = bearer(token_for("alice"))
    # A reminder of the user, so that generated ids can be found too (not only 404s).
    created = client.post(URL, json=DAILY | {"title": "Fuzzed"}, headers=headers)
    assert created.status_code == 201, created.text
    known_id = created.json()["id"]
    ran = 0
    for result in schema.get_all_operations():
        operation = result.ok()
        if not IN_SCOPE.match(operation.path):
            continue
        for mode in (GenerationMode.POSITIVE, GenerationMode.NEGATIVE):
            fixed = (
                {"reminder_id": known_id}
                if "{reminder_id}" in operation.path and mode is GenerationMode.POSITIVE
                else None
            )
            strategy = operation.as_strategy(generation_mode=mode, path_parameters=fixed)
            for_each_case(
                strategy, lambda case: case.call_and_validate(headers=headers, checks=CHECKS)
            )
            ran += 1
    # Ten operations of the reminders API, the import, the feed's POST and DELETE, and
    # the webhook channel's three (register, list, delete), both modes.
    assert ran == 2 * 16


WEBHOOKS = re.compile(r"^/v1/webhooks/")


@pytest.mark.parametrize("configured", [True, False], ids=["configured", "unconfigured"])
def test_schemathesis_webhooks_conform(
    db: Engine, settings: Settings, clock: Clock, configured: bool
) -> None:
    # Generated bodies and headers carry no valid signature: every answer is a documented
    # refusal (400/401/403, or 404 where the provider is not configured), as problem+json.
    if configured:
        settings = settings.model_copy(
            update={
                "webhook_sns_topic_arns": ("arn:aws:sns:us-east-1:123456789012:ses",),
                "webhook_resend_secret": SecretStr(
                    "whsec_" + base64.b64encode(b"0123456789abcdef01234567").decode()
                ),
                "webhook_postmark_user": SecretStr("postmark"),
                "webhook_postmark_password": SecretStr("s3cret"),
            }
        )
    refusals = (400, 401, 403) if configured else (404,)

    def check(case: Any) -> None:
        response = case.call_and_validate(checks=CHECKS)
        assert response.status_code in refusals, response.text

    with TestClient(build_app(settings, db, clock)) as client:
        schema = schemathesis.openapi.from_asgi("/openapi.json", client.app)
        ran = 0
        for result in schema.get_all_operations():
            operation = result.ok()
            if not WEBHOOKS.match(operation.path):
                continue
            for mode in (GenerationMode.POSITIVE, GenerationMode.NEGATIVE):
                for_each_case(operation.as_strategy(generation_mode=mode), check)
                ran += 1
        assert ran == 2 * 3  # three providers, both modes
        with db.connect() as conn:  # nothing generated was applied
            assert conn.exec_driver_sql("select count(*) from webhook_events").scalar() == 0


def test_unknown_reminder_id_is_404_problem(client: TestClient, token_for: TokenFor) -> None:
    resp = client.get(f"{URL}/{uuid.uuid4()}", headers=bearer(token_for("alice")))
    assert_problem(resp, 404)
