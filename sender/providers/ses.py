"""Amazon SES provider: boto3 `sesv2` SendEmail with Simple content (subject, text, HTML).

Protocol (AWS SES API v2 reference, SendEmail: `POST /v2/email/outbound-emails`): the
request carries FromEmailAddress, Destination.ToAddresses, Content.Simple (Subject, Body.Text,
Body.Html, each {Data, Charset}; Headers: at most 15 {Name, Value}), EmailTags ({Name,
Value}, letters, digits, `_` and `-` only, ≤ 256 characters) and an optional
ConfigurationSetName; the answer is {"MessageId": "..."}. Errors SendEmail documents:
TooManyRequestsException (429), LimitExceededException, AccountSuspendedException,
SendingPausedException, MessageRejected, MailFromDomainNotVerifiedException,
BadRequestException (400) and NotFoundException (404).

SES has **no idempotency key**: a retry after an ambiguous failure (a read timeout after the
request was sent) may deliver a second copy. The key therefore travels with the message so
duplicates can be traced: as the `X-Entity-Ref-ID` header (Content.Simple.Headers) and as the
`idempotency_key` message tag (EmailTags, which SES publishes with every sending event).
SES assigns its own Message-ID, so unlike SMTP the Message-ID cannot carry the key.

The client must be built with botocore's own retries off (`total_max_attempts=1`): the
sender retries with backoff inside its delivery budget, and botocore retrying a read
timeout would resend behind the caller's back.
"""

from __future__ import annotations

import re
from typing import TYPE_CHECKING

import boto3
from botocore.config import Config
from botocore.exceptions import (
    BotoCoreError,
    ClientError,
    ConnectionError,
    ConnectTimeoutError,
    CredentialRetrievalError,
    EndpointConnectionError,
    NoCredentialsError,
    NoRegionError,
    ParamValidationError,
    PartialCredentialsError,
)

from reminder_core.domain.localtime import CELL_TAG, KEY_HEADER, KEY_TAG
from reminder_core.errors import (
    DeliveryError,
    PermanentDeliveryError,
    TransientDeliveryError,
)
from reminder_core.settings import Settings
from sender.providers.base import OutgoingEmail, SendReceipt
from sender.providers.resend import parse_retry_after

if TYPE_CHECKING:
    from mypy_boto3_sesv2.client import SESV2Client
    from mypy_boto3_sesv2.type_defs import (
        MessageHeaderTypeDef,
        MessageTagTypeDef,
        SendEmailRequestTypeDef,
    )


#: Rate limits: the message was not taken; a later call may succeed.
THROTTLING = frozenset(
    {"TooManyRequestsException", "Throttling", "ThrottlingException", "LimitExceededException"}
)
#: The message was refused for what it is; resending it cannot succeed.
MESSAGE_ERRORS = frozenset({"MessageRejected", "BadRequestException"})
#: Operator problems: the account or its configuration, not this message. Transient, so the
#: occurrence is retried, then dead-lettered (replayable once fixed) instead of recorded
#: `failed`, and the failures open the breaker so a backup provider takes over.
OPERATOR_ERRORS = frozenset(
    {
        "AccountSuspendedException",  # sending permanently restricted: move to the backup
        "SendingPausedException",  # sending paused (by AWS or the operator)
        "MailFromDomainNotVerifiedException",  # sending domain not verified
        "NotFoundException",  # e.g. CONFIGURATION_SET names nothing
        "AccessDeniedException",
        "UnrecognizedClientException",
        "InvalidClientTokenId",
        "InvalidSignatureException",
        "SignatureDoesNotMatch",
        "ExpiredTokenException",
        "MissingAuthenticationTokenException",
    }
)

_TAG_UNSAFE = re.compile(r"[^A-Za-z0-9_-]")


def tag_value(value: str) -> str:
    """`value` made a valid SES message tag value: characters outside `[A-Za-z0-9_-]`
    become `_`, at most 256 characters (SES API v2 MessageTag)."""
    return _TAG_UNSAFE.sub("_", value)[:256]


def build_send_email_request(
    email: OutgoingEmail,
    *,
    idempotency_key: str,
    configuration_set: str | None = None,
    cell: str | None = None,
) -> SendEmailRequestTypeDef:
    """The keyword arguments of `sesv2.send_email` for one email (pure).

    Subject and both parts are sent as UTF-8 (Charset), so non-ASCII text needs no
    RFC 2047 encoding by the caller; the key goes in `X-Entity-Ref-ID` and the
    `idempotency_key` tag (see the module docstring), the sender's cell (with CELLS) in
    the `cell` tag, which SES publishes with the email's events (webhooks.cells).
    """
    headers: list[MessageHeaderTypeDef] = [{"Name": KEY_HEADER, "Value": idempotency_key}]
    tags: list[MessageTagTypeDef] = [{"Name": KEY_TAG, "Value": tag_value(idempotency_key)}]
    if cell is not None:  # a cell name (CELL_NAME) is a valid tag value as it is
        tags.append({"Name": CELL_TAG, "Value": cell})
    headers += [{"Name": name, "Value": value} for name, value in email.headers]
    request: SendEmailRequestTypeDef = {
        "FromEmailAddress": email.sender,
        "Destination": {"ToAddresses": [email.to]},
        "Content": {
            "Simple": {
                "Subject": {"Data": email.subject, "Charset": "UTF-8"},
                "Body": {
                    "Text": {"Data": email.text, "Charset": "UTF-8"},
                    "Html": {"Data": email.html, "Charset": "UTF-8"},
                },
                "Headers": headers,
            }
        },
        "EmailTags": tags,
    }
    if configuration_set:
        request["ConfigurationSetName"] = configuration_set
    return request


def classify_ses_error(
    code: str, http_status: int, message: str, *, retry_after: str | None = None
) -> DeliveryError:
    """The delivery error for an SES error answer (pure; the caller raises it).

    Args:
        code: the AWS error code ("TooManyRequestsException", "MessageRejected", ...).
        http_status: the HTTP status of the answer (0 when unknown).
        message: the error message, kept in the exception text.
        retry_after: the Retry-After header if the answer had one (SES normally does not).

    Returns:
        TransientDeliveryError (never ambiguous: SES answered, so it decided) for throttling,
        operator problems, 401/403, 408 and 5xx; PermanentDeliveryError for MessageRejected,
        BadRequestException and any other 4xx.
    """
    detail = f"ses: {code or 'error'} (HTTP {http_status}): {message}"
    if code in THROTTLING or http_status == 429:
        return TransientDeliveryError(detail, retry_after_s=parse_retry_after(retry_after))
    if code in MESSAGE_ERRORS:
        return PermanentDeliveryError(detail)
    if code in OPERATOR_ERRORS or http_status in (401, 403, 408) or http_status >= 500:
        return TransientDeliveryError(detail, retry_after_s=parse_retry_after(retry_after))
    if 400 <= http_status < 500:
        return PermanentDeliveryError(detail)
    return TransientDeliveryError(detail)


class SesProvider:
    """Sends through Amazon SES API v2 (or anything speaking it, such as moto).

    Args:
        client: a boto3 `sesv2` client with connect/read timeouts set and botocore retries
            off (built by `build_single_provider`); thread-safe, shared by all sends.
        configuration_set: SES configuration set for event publishing, or None.
        name: provider name recorded on delivery rows.
    """

    def __init__(
        self,
        client: SESV2Client,
        *,
        configuration_set: str | None = None,
        name: str = "ses",
        cell: str | None = None,
    ) -> None:
        self._client = client
        self._configuration_set = configuration_set
        self.name = name
        self._cell = cell

    @classmethod
    def from_settings(cls, settings: Settings) -> SesProvider:
        """An SES provider with its own boto3 client (not shared with other workloads).

        Region from SES_REGION, else AWS_REGION (our setting, shared with SQS), else the AWS
        chain (AWS_DEFAULT_REGION, profile),
        endpoint from SES_ENDPOINT_URL (else AWS's), credentials from the standard AWS chain
        (environment, web identity / IRSA, instance profile); timeouts
        PROVIDER_CONNECT_TIMEOUT_S / PROVIDER_READ_TIMEOUT_S; botocore retries off.

        Raises:
            ValueError: no region is configured anywhere.
        """
        config = Config(
            connect_timeout=settings.provider_connect_timeout_s,
            read_timeout=settings.provider_read_timeout_s,
            retries={"total_max_attempts": 1, "mode": "standard"},
            max_pool_connections=20,
        )
        try:
            client = boto3.session.Session().client(
                "sesv2",
                region_name=settings.ses_region or settings.aws_region,
                endpoint_url=settings.ses_endpoint_url,
                config=config,
            )
        except NoRegionError as exc:
            raise ValueError("EMAIL_PROVIDER=ses needs SES_REGION (or AWS_REGION)") from exc
        cell = settings.cell if settings.cells else None  # a cell's sender tags its cell
        return cls(client, configuration_set=settings.ses_configuration_set, cell=cell)

    def send(self, email: OutgoingEmail, *, idempotency_key: str) -> SendReceipt:
        """Call SendEmail once; the receipt carries SES's MessageId.

        Not idempotent at SES (see the module docstring): call it again only after an
        error.

        Raises:
            TransientDeliveryError: throttling, 5xx, operator problems (see
                `classify_ses_error`), a connection that could not be made (not taken),
                missing credentials; `ambiguous` when the request may have reached SES (a
                read timeout or a connection closed before the answer).
            PermanentDeliveryError: MessageRejected, BadRequestException, any other 4xx,
                or a request botocore refuses to send (invalid parameters).
        """
        request = build_send_email_request(
            email,
            idempotency_key=idempotency_key,
            configuration_set=self._configuration_set,
            cell=self._cell,
        )
        try:
            response = self._client.send_email(**request)
        except ClientError as exc:
            error = exc.response.get("Error", {})
            meta = exc.response.get("ResponseMetadata", {})
            raise classify_ses_error(
                str(error.get("Code", "")),
                int(meta.get("HTTPStatusCode", 0)),
                str(error.get("Message", "")),
                retry_after=meta.get("HTTPHeaders", {}).get("retry-after"),
            ) from exc
        except ParamValidationError as exc:
            raise PermanentDeliveryError(f"{self.name}: invalid request: {exc}") from exc
        except (EndpointConnectionError, ConnectTimeoutError, ConnectionError) as exc:
            # ConnectionError covers the proxy and TLS handshake failures: nothing was sent.
            raise TransientDeliveryError(f"{self.name}: cannot connect: {exc}") from exc
        except (NoCredentialsError, PartialCredentialsError, CredentialRetrievalError) as exc:
            raise TransientDeliveryError(f"{self.name}: no usable credentials: {exc}") from exc
        except BotoCoreError as exc:
            # ReadTimeoutError, ConnectionClosedError and the rest: the request went out and
            # no answer came back, so SES may have taken it.
            raise TransientDeliveryError(
                f"{self.name}: no answer after sending: {exc}", ambiguous=True
            ) from exc
        return SendReceipt(provider=self.name, provider_message_id=response["MessageId"])


__all__ = ["SesProvider", "build_send_email_request", "classify_ses_error", "tag_value"]
