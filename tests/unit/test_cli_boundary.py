"""What the CLI treats as an expected failure at start (one `error:` line, status 2 or 3)
and what stays a bug with its traceback (reminder_core/boundary.py); empty variables mean
unset (docs/configuration.md)."""

from __future__ import annotations

import pytest
from pydantic import ValidationError
from sqlalchemy.exc import OperationalError

from reminder_core.boundary import (
    EXIT_CONFIGURATION,
    EXIT_UNAVAILABLE,
    expected_failure,
    run_guarded,
)
from reminder_core.errors import ConfigurationError, InfrastructureError, configuration_errors
from reminder_core.settings import Settings


class DriverError(Exception):
    def __init__(self, message: str, sqlstate: str | None) -> None:
        super().__init__(message)
        self.sqlstate = sqlstate


def operational(sqlstate: str | None) -> OperationalError:
    return OperationalError("SELECT 1", {}, DriverError("server said no", sqlstate))


def test_settings_errors_name_each_variable(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("EMAIL_PROVIDER", "sendgrid")
    monkeypatch.setenv("WEBHOOK_SNS_TOPIC_ARNS", "not-an-arn")
    with pytest.raises(ValidationError) as caught:
        Settings()

    assert expected_failure(caught.value) == (
        EXIT_CONFIGURATION,
        [
            "error: EMAIL_PROVIDER: must be one of file|resend|ses|smtp",
            "error: WEBHOOK_SNS_TOPIC_ARNS: not an SNS topic ARN: 'not-an-arn'",
        ],
    )


@pytest.mark.parametrize("value", ["nan", "NaN", "inf", "-inf", "1e400"])
@pytest.mark.parametrize("name", ["SENDER_BATCH_TARGET_S", "VISIBILITY_TIMEOUT_S"])
def test_a_number_of_seconds_that_is_not_finite_is_refused_as_such(
    monkeypatch: pytest.MonkeyPatch, name: str, value: str
) -> None:
    """Trial helper-59: `nan` was refused as "less than or equal to 60", which it is
    not about; every float setting refuses a non-finite value as one."""
    monkeypatch.setenv(name, value)
    with pytest.raises(ValidationError) as caught:
        Settings()
    assert expected_failure(caught.value) == (
        EXIT_CONFIGURATION,
        [f"error: {name}: Input should be a finite number"],
    )


def test_a_secret_is_never_echoed(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("SMTP_PORT", "hunter2-secret")
    with pytest.raises(ValidationError) as caught:
        Settings()

    failure = expected_failure(caught.value)

    assert failure is not None
    assert "hunter2" not in " ".join(failure[1])


@pytest.mark.parametrize(
    ("name", "field"),
    [
        ("BREAKER_REDIS_URL", "breaker_redis_url"),
        ("EMAIL_PROVIDER_BACKUP", "email_provider_backup"),
        ("SMTP_HOST", "smtp_host"),
        ("DATABASE_URL", "database_url"),
    ],
)
def test_an_empty_variable_means_unset(
    monkeypatch: pytest.MonkeyPatch, name: str, field: str
) -> None:
    monkeypatch.setenv(name, "")

    assert getattr(Settings(), field) is None


def test_a_value_error_while_building_is_a_configuration_error() -> None:
    with pytest.raises(ConfigurationError) as caught, configuration_errors():
        raise ValueError("QUEUE_URL 'garbage' names no supported queue backend")

    assert expected_failure(caught.value) == (
        EXIT_CONFIGURATION,
        ["error: QUEUE_URL 'garbage' names no supported queue backend"],
    )


@pytest.mark.parametrize("sqlstate", [None, "08006", "28P01", "3D000", "53300", "57P03"])
def test_a_database_that_cannot_be_used_is_status_3(sqlstate: str | None) -> None:
    failure = expected_failure(operational(sqlstate))

    assert failure == (
        EXIT_UNAVAILABLE,
        ["error: cannot use the database (DATABASE_URL): server said no"],
    )


def test_an_unavailable_dependency_is_status_3() -> None:
    assert expected_failure(InfrastructureError("SQS: GetQueueUrl failed\n  hint")) == (
        EXIT_UNAVAILABLE,
        ["error: SQS: GetQueueUrl failed hint"],
    )


@pytest.mark.parametrize(
    "bug",
    [
        ValueError("a plain ValueError outside the build: a bug"),
        KeyError("reminder_id"),
        operational("42P01"),  # undefined table: the statement, not the server
        operational("55P03"),  # lock not available
    ],
)
def test_a_bug_keeps_its_traceback(bug: Exception) -> None:
    assert expected_failure(bug) is None

    def command() -> None:
        raise bug

    with pytest.raises(type(bug)):
        run_guarded(command)


def test_run_guarded_prints_one_line_and_exits(capsys: pytest.CaptureFixture[str]) -> None:
    def command() -> None:
        raise ConfigurationError("EMAIL_PROVIDER=smtp needs SMTP_HOST")

    with pytest.raises(SystemExit) as exited:
        run_guarded(command)

    assert exited.value.code == EXIT_CONFIGURATION
    assert capsys.readouterr().err == "error: EMAIL_PROVIDER=smtp needs SMTP_HOST\n"
