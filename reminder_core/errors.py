"""The exception tree of the reminder scheduler.

    ReminderError                      root: every error this product raises on purpose
    ├── DomainError                    the request or the data is wrong; the caller must change it
    │   ├── NotFound                   no such object for this user
    │   ├── Conflict                   the object's state forbids the change (idempotency clash)
    │   ├── PreconditionFailed         If-Match names a version that is no longer current
    │   ├── InvalidInput               a request field cannot be accepted (field + reason)
    │   │   └── InvalidSchedule        a schedule field (start_local, timezone, rrule, ...)
    │   ├── Unauthenticated            a signature or credentials did not verify (webhooks)
    │   ├── Forbidden                  authentic, but not from a source we accept (SNS topic)
    │   ├── MalformedBody              a request body that cannot be parsed (not JSON, bad shape)
    │   ├── PayloadTooLarge            a request body over its size limit
    │   └── QuotaExceeded              the change would take a user past a quota (live reminders)
    ├── DeliveryError                  sending one occurrence failed
    │   ├── TransientDeliveryError     retry later (timeouts, 429, 5xx); may carry retry_after_s
    │   └── PermanentDeliveryError     never retry (400/422, render error, bad address)
    ├── InfrastructureError            a dependency is unusable (database, queue, profile service)
    │   ├── ProfileDataError           a user's profile came back, but holds unusable data
    │   └── QueueNotFound              the queue QUEUE_URL names does not exist (at start: a
    │                                  ConfigurationError, see reminder_core.runtime)
    └── ConfigurationError             a setting is missing, malformed or inconsistent (also a
                                       ValueError): fix the environment and start again

HTTP status codes live only in `reminder_api/errors.py`.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager


class ReminderError(Exception):
    """Root of every exception the product raises on purpose."""


class DomainError(ReminderError):
    """The request or stored data is wrong; retrying the same call will not help."""


class NotFound(DomainError):
    """No object with that id exists for this user (another user's object is 'not found')."""


class Conflict(DomainError):
    """The object's current state forbids the requested change."""


class PreconditionFailed(DomainError):
    """An If-Match version is stale: re-read the object and try again."""


class InvalidInput(DomainError):
    """A request field cannot be accepted.

    Attributes:
        field: the request field at fault, e.g. "cursor" or "start_local".
        reason: a sentence a user can act on.
    """

    def __init__(self, field: str, reason: str) -> None:
        super().__init__(f"{field}: {reason}")
        self.field = field
        self.reason = reason


class InvalidSchedule(InvalidInput):
    """A schedule field (start_local, timezone, ...) cannot be accepted."""


class Unauthenticated(DomainError):
    """A webhook signature, or the credentials sent with it, did not verify.

    Nothing in the request may be trusted or applied (answered 401).

    Attributes:
        challenge: the WWW-Authenticate challenge to answer with (RFC 9110 §11.6.1), e.g.
            'Basic realm="webhooks"'; None where the scheme is a signature, not a header.
    """

    def __init__(self, message: str, *, challenge: str | None = None) -> None:
        super().__init__(message)
        self.challenge = challenge


class Forbidden(DomainError):
    """The request is authentic but comes from a source we do not accept, such as an SNS
    topic that is not configured (answered 403); nothing is applied."""


class MalformedBody(DomainError):
    """The request body cannot be parsed: not JSON, or not the documented shape (400)."""


class PayloadTooLarge(DomainError):
    """The request body is over its size limit (answered 413)."""


class QuotaExceeded(DomainError):
    """The change would take the user past one of their quotas (answered 429); nothing
    was stored. Retrying the same call fails until the user frees room (cancels
    reminders) or the operator raises the quota.

    Attributes:
        quota: the setting that sets the quota, e.g. "QUOTA_LIVE_REMINDERS".
        limit: its value.
    """

    def __init__(self, quota: str, limit: int, reason: str) -> None:
        super().__init__(f"{quota} ({limit}): {reason}")
        self.quota = quota
        self.limit = limit


class RateRefused(Exception):
    """The request is past its user's rate budget (RATE_LIMIT_PER_MINUTE; answered 429 by
    `reminder_api.ratelimit`, which has the take's outcome for the headers); nothing of
    the route was written. Not a ReminderError: the rate limit's middleware answers it,
    not the error handlers.

    Attributes:
        user_id: whose budget.
    """

    def __init__(self, user_id: str) -> None:
        super().__init__(user_id)
        self.user_id = user_id


class DeliveryError(ReminderError):
    """Sending one occurrence failed."""


class TransientDeliveryError(DeliveryError):
    """A failure that may pass: retry with backoff.

    Attributes:
        retry_after_s: seconds the provider asked us to wait (Retry-After), or None.
        ambiguous: the provider may have taken the message.
    """

    def __init__(
        self, message: str, retry_after_s: float | None = None, *, ambiguous: bool = False
    ) -> None:
        super().__init__(message)
        self.retry_after_s = retry_after_s
        #: True when the provider may have accepted the message (e.g. a read timeout after
        #: the request was sent): retry on the same provider with the same idempotency key,
        #: never fail over, since the backup cannot deduplicate against it
        #: (docs/design.md, "Provider failover").
        self.ambiguous = ambiguous


class PermanentDeliveryError(DeliveryError):
    """A failure that retrying cannot fix: record the occurrence as failed."""


class InfrastructureError(ReminderError):
    """A dependency (database, queue, profile service) is unusable right now.

    Attributes:
        dependency: which one, in words a caller may be shown (e.g. "the database", "SNS
            certificate host sns.us-east-1.amazonaws.com"); None when the raiser does not
            say (the API then names the usual ones).
    """

    def __init__(self, message: str, *, dependency: str | None = None) -> None:
        super().__init__(message)
        self.dependency = dependency


class UserMoving(InfrastructureError):
    """The user's rows are being moved to another cell (`reminders cells move`): their
    writes are refused for the few seconds the move takes (answered 503 with
    Retry-After; docs/design.md, "Moving a user between cells")."""

    def __init__(self, user_id: str, to_cell: str) -> None:
        super().__init__(
            f"this user's reminders are being moved to another cell ({to_cell}); retry"
            " in a few seconds",
            dependency="the user's cell",
        )
        self.user_id = user_id
        self.to_cell = to_cell


class ProfileDataError(InfrastructureError):
    """The profile source answered, but the user's profile cannot be used (an unknown
    timezone, no usable email): broken data, not an unknown user. Retried like any
    InfrastructureError (the API answers 503, the sender hands the message back), since
    the profile may be fixed.

    Attributes:
        detail: a sentence for the user the profile belongs to (the API's 503 detail).
    """

    def __init__(self, message: str, *, detail: str) -> None:
        super().__init__(message)
        self.detail = detail


class QueueNotFound(InfrastructureError):
    """The queue (or its dead-letter queue) does not exist where QUEUE_URL says: the queue
    server answered, and said so. Checked once at start, where it is a configuration
    error; raised later (the queue was deleted), it fails the tick like any
    InfrastructureError."""


class ConfigurationError(ReminderError, ValueError):
    """A setting is missing, malformed or inconsistent (e.g. EMAIL_PROVIDER=smtp without
    SMTP_HOST). Raised while a process builds its parts, before any work; the CLI prints
    it as one line and exits with status 2. Retrying without a change cannot help."""


@contextmanager
def configuration_errors() -> Iterator[None]:
    """Re-raise a ValueError from the block as ConfigurationError (same message).

    Wrap what builds a process's parts from its settings (`open_runtime`, a workload's
    `build`, `create_app`): there a ValueError means a bad setting, whereas a ValueError
    anywhere else is a bug and must keep its traceback.
    """
    try:
        yield
    except ConfigurationError:
        raise
    except ValueError as exc:
        raise ConfigurationError(str(exc)) from exc
