"""Amazon SNS messages: signature verification (SignatureVersion 1 and 2) with
`cryptography`, subscription confirmation, and the SES bounce/complaint notifications they
carry, parsed into `WebhookEvent`s.

Sources:
- AWS, Amazon SNS Developer Guide, "Verifying the signatures of Amazon SNS messages" and
  "Verifying the signature of an Amazon SNS message when using HTTP query-based requests":
  the fields signed for each message type, in a fixed order, each as "Name\\nValue\\n";
  SignatureVersion 1 is SHA1withRSA, 2 is SHA256withRSA; the certificate comes from
  `SigningCertURL`, which must be HTTPS on an SNS host; reject unexpected topics.
- AWS, Amazon SNS Developer Guide, "Parsing message formats" (HTTP/HTTPS notification,
  SubscriptionConfirmation and UnsubscribeConfirmation JSON).
- AWS, Amazon SES Developer Guide, "Amazon SNS notification contents for Amazon SES" and
  "Contents of event data that Amazon SES publishes to Amazon SNS" (bounce and complaint
  objects, `mail.messageId`).

No maintained PyPI package verifies both signature versions, hence this module.
"""

from __future__ import annotations

import base64
import binascii
import json
import logging
import re
import socket
import threading
import time
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Literal
from urllib.parse import parse_qs, urlsplit, urlunsplit

import httpx
from cachetools import TTLCache
from cryptography import x509
from cryptography.exceptions import InvalidSignature, UnsupportedAlgorithm
from cryptography.hazmat.primitives import hashes
from cryptography.hazmat.primitives.asymmetric import padding, rsa

from reminder_core.domain.localtime import CELL_TAG, KEY_HEADER, KEY_TAG
from reminder_core.errors import (
    Forbidden,
    InfrastructureError,
    MalformedBody,
    Unauthenticated,
)
from webhooks.events import EventKind, WebhookEvent, accepted_events, with_cell
from webhooks.parsing import address, instant, parse_json_object, reason

log = logging.getLogger(__name__)

PROVIDER = "ses"

#: The only hosts a signing certificate or a SubscribeURL may come from:
#: sns.<region>.amazonaws.com, the region spelt as AWS spells its regions (AWS General
#: Reference, "AWS service endpoints"): a two-letter area, "-gov" for GovCloud, a
#: direction, a number: us-east-1, ap-southeast-2, us-gov-west-1, il-central-1, ...
#: Matched against the whole authority, so userinfo ("a@b"), ports, look-alike suffixes
#: ("...amazonaws.com.evil.com") and other hosts never match; the host of an
#: unauthenticated request is not ours to invent ("sns.<anything>.amazonaws.com" is not
#: accepted), so there are only a few thousand names it can make us look up.
SNS_HOST = re.compile(
    r"sns\.[a-z]{2}(?:-gov)?-(?:(?:north|south)?(?:east|west)|north|south|central)"
    r"-\d{1,2}\.amazonaws\.com"
)
#: Path of a signing certificate, e.g. /SimpleNotificationService-<hash>.pem (no "..").
_CERT_PATH = re.compile(r"(?:/[A-Za-z0-9_-][A-Za-z0-9._-]*)+\.pem")
#: Characters RFC 3986 allows in a URI; anything else (spaces, backslashes, non-ASCII,
#: control characters) is refused before any parsing, so no two parsers can disagree.
_URI_CHARS = re.compile(r"[A-Za-z0-9._~:/?#\[\]@!$&'()*+,;=%-]+")
_MAX_URL = 2048

#: Signed fields per message type, in the order AWS signs them.
NOTIFICATION_FIELDS = ("Message", "MessageId", "Subject", "Timestamp", "TopicArn", "Type")
CONFIRMATION_FIELDS = (
    "Message",
    "MessageId",
    "SubscribeURL",
    "Timestamp",
    "Token",
    "TopicArn",
    "Type",
)
_FIELDS = {
    "Notification": NOTIFICATION_FIELDS,
    "SubscriptionConfirmation": CONFIRMATION_FIELDS,
    "UnsubscribeConfirmation": CONFIRMATION_FIELDS,
}
_HASHES: dict[str, Callable[[], hashes.HashAlgorithm]] = {"1": hashes.SHA1, "2": hashes.SHA256}

FETCH_TIMEOUT_S = 5.0
MAX_CERT_BYTES = 64 * 1024
CERT_CACHE_SIZE = 32
CERT_CACHE_TTL_S = 24 * 3600.0
#: Failed certificate fetches are remembered, so that a request repeating a bad URL costs
#: no fetch (an unauthenticated caller chooses the URL): this many URLs, and hosts...
FAILURE_CACHE_SIZE = 256
#: ...a URL refused by its host (3xx, 4xx, not an RSA PEM) or on a host that does not
#: exist, for this long: such a URL never starts to work for a real SNS message...
REFUSED_TTL_S = 300.0
#: ...and a host that could not be reached (network, DNS server, timeout, 5xx) for
#: this long: short, since SNS retries an HTTPS delivery 20 s later by default (AWS SNS
#: Developer Guide, "Amazon SNS message delivery retries": 3 retries, 20 s apart).
UNREACHABLE_TTL_S = 10.0
#: getaddrinfo's answers that the name does not exist (NXDOMAIN, or no address): the
#: sender's doing, unlike EAI_AGAIN (the DNS server did not answer: ours).
_NO_SUCH_HOST = frozenset(
    code for code in (socket.EAI_NONAME, getattr(socket, "EAI_NODATA", None)) if code is not None
)


@dataclass(frozen=True, slots=True)
class SnsMessage:
    """One SNS message whose signature verified.

    Attributes:
        type: "Notification", "SubscriptionConfirmation" or "UnsubscribeConfirmation".
        message_id: SNS MessageId (a UUID string), the same on every redelivery.
        topic_arn: the topic that sent it.
        message: the payload (for SES feedback: the SES notification JSON, as text).
        timestamp: SNS Timestamp, ISO 8601 text as sent.
        subject: Subject of a notification, if any.
        subscribe_url: the confirmation URL of a (Un)SubscriptionConfirmation.
    """

    type: str
    message_id: str
    topic_arn: str
    message: str
    timestamp: str
    subject: str | None = None
    subscribe_url: str | None = None


@dataclass(frozen=True, slots=True)
class SnsReceipt:
    """What `SnsVerifier.receive` made of a request.

    Attributes:
        action: "notification" (verified, from a configured topic: parse `message`),
            "confirmed" (a subscription to a configured topic was confirmed) or
            "ignored" (verified, but nothing to do: another topic's confirmation, an
            UnsubscribeConfirmation).
        message: the verified message.
    """

    action: Literal["notification", "confirmed", "ignored"]
    message: SnsMessage


def string_to_sign(fields: Mapping[str, object]) -> bytes:
    """The bytes SNS signed for a message: "Name\\nValue\\n" for each signed field, in AWS's
    fixed order, UTF-8 (AWS SNS Developer Guide, "Verifying the signature of an Amazon SNS
    message").

    Notification: Message, MessageId, Subject (only if present), Timestamp, TopicArn, Type.
    SubscriptionConfirmation / UnsubscribeConfirmation: Message, MessageId, SubscribeURL,
    Timestamp, Token, TopicArn, Type.

    Raises:
        Unauthenticated: unknown Type, or a signed field missing or not a string (such a
            message cannot be verified).
    """
    kind = fields.get("Type")
    names = _FIELDS.get(kind) if isinstance(kind, str) else None
    if names is None:
        raise Unauthenticated(f"unknown SNS message Type {kind!r}: cannot verify")
    lines: list[str] = []
    for name in names:
        value = fields.get(name)
        if value is None and name == "Subject":
            continue
        if not isinstance(value, str):
            raise Unauthenticated(f"SNS field {name} missing or not a string: cannot verify")
        lines.append(f"{name}\n{value}\n")
    try:
        return "".join(lines).encode("utf-8")
    except UnicodeEncodeError as exc:  # a lone surrogate such as "\ud800"
        raise Unauthenticated("SNS message is not valid Unicode: cannot verify") from exc


def checked_sns_url(url: object, *, purpose: Literal["certificate", "subscribe"]) -> str:
    """Check a SigningCertURL or SubscribeURL and return the URL to request, rebuilt from
    its checked parts.

    Accepted: `https://` + a host matching `SNS_HOST` exactly (no userinfo, no port) +
    a `.pem` path without query (certificate), or path "/" with
    `Action=ConfirmSubscription` in the query (subscribe); ASCII URI characters only, no
    fragment, at most 2048 characters.

    Raises:
        Unauthenticated: anything else (nothing is fetched from such a URL).
    """
    if not isinstance(url, str) or len(url) > _MAX_URL or not _URI_CHARS.fullmatch(url):
        raise Unauthenticated(f"{purpose} URL refused: not a plain https URL")
    parts = urlsplit(url)
    if parts.scheme != "https" or parts.fragment or not SNS_HOST.fullmatch(parts.netloc):
        raise Unauthenticated(f"{purpose} URL refused: not https://sns.<region>.amazonaws.com")
    if purpose == "certificate":
        if parts.query or not _CERT_PATH.fullmatch(parts.path):
            raise Unauthenticated("certificate URL refused: not a .pem path")
    elif parts.path != "/" or parse_qs(parts.query).get("Action") != ["ConfirmSubscription"]:
        raise Unauthenticated("SubscribeURL refused: not an SNS ConfirmSubscription URL")
    rebuilt = urlunsplit(("https", parts.netloc, parts.path, parts.query, ""))
    if httpx.URL(rebuilt).host != parts.netloc:  # belt and braces: httpx reads the same host
        raise Unauthenticated(f"{purpose} URL refused: ambiguous host")
    return rebuilt


@dataclass(frozen=True, slots=True)
class SignedParts:
    """What a signature check needs: the signed bytes, the signature, the hash."""

    data: bytes
    signature: bytes
    algorithm: hashes.HashAlgorithm


def signed_parts(fields: Mapping[str, object]) -> SignedParts:
    """The string to sign, the decoded `Signature` (base64) and the hash of
    `SignatureVersion`: "1" is SHA1withRSA, "2" SHA256withRSA (PKCS#1 v1.5).

    Raises:
        Unauthenticated: unknown version, signature missing or not base64, or a signed
            field missing (see `string_to_sign`).
    """
    version = fields.get("SignatureVersion")
    algorithm = _HASHES.get(version) if isinstance(version, str) else None
    if algorithm is None:
        raise Unauthenticated(f"unsupported SNS SignatureVersion {version!r}")
    signature = fields.get("Signature")
    if not isinstance(signature, str) or not signature:
        raise Unauthenticated("SNS Signature missing")
    try:
        raw = base64.b64decode(signature, validate=True)
    except (binascii.Error, ValueError) as exc:
        raise Unauthenticated("SNS Signature is not base64") from exc
    return SignedParts(string_to_sign(fields), raw, algorithm())


def verify_signature(parts: SignedParts, public_key: rsa.RSAPublicKey) -> None:
    """Check the signature with the certificate's RSA key (PKCS#1 v1.5).

    Raises:
        Unauthenticated: the signature does not verify.
    """
    try:
        public_key.verify(parts.signature, parts.data, padding.PKCS1v15(), parts.algorithm)
    except InvalidSignature as exc:
        raise Unauthenticated("SNS signature does not verify") from exc


class SnsVerifier:
    """Verifies SNS messages POSTed to us and confirms subscriptions to configured topics.

    Certificates are fetched with `http` (only from URLs `checked_sns_url` accepts,
    redirects not followed) and kept in a bounded cache (`cache_size` entries, each for
    `cache_ttl_s` seconds), so a burst of notifications costs one fetch. Failures are
    cached too (FAILURE_CACHE_SIZE entries each): a URL its host refused, or on a host
    that does not exist, answers 401 again for REFUSED_TTL_S without a fetch; a host that
    could not be reached answers 503 again for UNREACHABLE_TTL_S. Thread-safe.

    Whose fault a failed fetch is decides the answer: the caller chose the URL, so a host
    that does not exist (NXDOMAIN), a 3xx or 4xx, or a body that is not an RSA
    certificate is the sender's (Unauthenticated, 401: SNS does not retry it); a network
    or DNS server that does not answer, a timeout or a 5xx is ours or AWS's
    (InfrastructureError naming the host, 503: SNS retries).

    Args:
        topic_arns: the topics whose notifications are accepted and whose subscriptions
            are confirmed (setting WEBHOOK_SNS_TOPIC_ARNS).
        http: client for certificate and SubscribeURL requests (tests map the SNS host to
            a local server through its transport).
        timeout_s: per request, seconds.
    """

    def __init__(
        self,
        *,
        topic_arns: Iterable[str],
        http: httpx.Client,
        timeout_s: float = FETCH_TIMEOUT_S,
        cache_size: int = CERT_CACHE_SIZE,
        cache_ttl_s: float = CERT_CACHE_TTL_S,
        refused_ttl_s: float = REFUSED_TTL_S,
        unreachable_ttl_s: float = UNREACHABLE_TTL_S,
        timer: Callable[[], float] = time.monotonic,
    ) -> None:
        self.topic_arns = frozenset(topic_arns)
        self._http = http
        self._timeout_s = timeout_s
        self._keys: TTLCache[str, rsa.RSAPublicKey] = TTLCache(
            maxsize=cache_size, ttl=cache_ttl_s, timer=timer
        )
        # URL -> why it was refused; host -> why it could not be reached.
        self._refused: TTLCache[str, str] = TTLCache(
            maxsize=FAILURE_CACHE_SIZE, ttl=refused_ttl_s, timer=timer
        )
        self._unreachable: TTLCache[str, str] = TTLCache(
            maxsize=FAILURE_CACHE_SIZE, ttl=unreachable_ttl_s, timer=timer
        )
        self._lock = threading.Lock()

    def receive(self, body: bytes) -> SnsReceipt:
        """Verify one POSTed SNS message and act on confirmations.

        Order: parse, check the signed fields and the certificate URL, fetch the
        certificate (cached) and verify the signature, then the topic. A
        SubscriptionConfirmation from a configured topic is confirmed by a GET of its
        SubscribeURL (same host rules); one from another topic is ignored.

        Returns:
            The receipt; for "notification" the caller parses and applies `message`.

        Raises:
            MalformedBody: not a JSON object.
            Unauthenticated: unsigned, badly signed, certificate URL or SubscribeURL off
                the SNS hosts, certificate unusable (see `public_key`).
            Forbidden: a verified Notification from a topic that is not configured.
            InfrastructureError: the certificate or SubscribeURL host could not be
                reached, or answered a 5xx (retry later; SNS redelivers); its
                `dependency` names the host.
        """
        fields = parse_json_object(body)
        parts = signed_parts(fields)  # before any fetch: an unsigned message costs nothing
        verify_signature(parts, self.public_key(fields.get("SigningCertURL")))
        message = _message(fields)
        allowed = message.topic_arn in self.topic_arns
        if message.type == "Notification":
            if not allowed:
                raise Forbidden(f"SNS topic {message.topic_arn} is not configured")
            return SnsReceipt("notification", message)
        if message.type == "SubscriptionConfirmation" and allowed:
            self._get(checked_sns_url(message.subscribe_url, purpose="subscribe"))
            log.info("confirmed the SNS subscription to %s", message.topic_arn)
            return SnsReceipt("confirmed", message)
        log.warning("ignored SNS %s for topic %s", message.type, message.topic_arn)
        return SnsReceipt("ignored", message)

    def public_key(self, cert_url: object) -> rsa.RSAPublicKey:
        """The RSA public key of the certificate at `cert_url` (cached, and so are the
        failures: see the class docstring).

        Raises:
            Unauthenticated: URL refused (nothing fetched), its host does not exist or
                answered a 3xx/4xx, or it is not a PEM X.509 certificate with an RSA key.
            InfrastructureError: the host could not be reached (network, DNS server,
                timeout) or answered a 5xx; `dependency` names the host.
        """
        url = checked_sns_url(cert_url, purpose="certificate")
        host = httpx.URL(url).host
        with self._lock:
            cached = self._keys.get(url)
            refused = self._refused.get(url)
            unreachable = self._unreachable.get(host)
        if cached is not None:
            return cached
        if refused is not None:
            raise Unauthenticated(f"{refused} (remembered; not fetched again)")
        if unreachable is not None:
            raise InfrastructureError(
                f"{unreachable} (remembered; not asked again yet)",
                dependency=_certificate_host(host),
            )
        try:
            key = _rsa_key(self._get(url, dependency=_certificate_host(host)))
        except Unauthenticated as exc:
            with self._lock:
                self._refused[url] = str(exc)
            raise
        except InfrastructureError as exc:
            with self._lock:
                self._unreachable[host] = str(exc)
            raise
        with self._lock:
            self._keys[url] = key
        return key

    def _get(self, url: str, *, dependency: str | None = None) -> bytes:
        """The body of a GET of `url` (redirects not followed), at most MAX_CERT_BYTES.

        Raises:
            Unauthenticated: the host does not exist, answered other than 200 below 500,
                or sent too much.
            InfrastructureError: the host could not be reached, or answered a 5xx
                (`dependency`: the name given, else "SNS host <host>").
        """
        host = httpx.URL(url).host
        dependency = dependency or f"SNS host {host}"
        try:
            with self._http.stream(
                "GET", url, timeout=self._timeout_s, follow_redirects=False
            ) as response:
                if response.status_code >= 500:
                    raise InfrastructureError(
                        f"{url} answered {response.status_code}", dependency=dependency
                    )
                if response.status_code != 200:
                    raise Unauthenticated(f"{url} answered {response.status_code}")
                chunks: list[bytes] = []
                size = 0
                for chunk in response.iter_bytes():
                    size += len(chunk)
                    if size > MAX_CERT_BYTES:
                        raise Unauthenticated(f"{url} answered more than {MAX_CERT_BYTES} bytes")
                    chunks.append(chunk)
                return b"".join(chunks)
        except httpx.HTTPError as exc:
            if no_such_host(exc):
                raise Unauthenticated(f"{host} does not exist (DNS)") from exc
            raise InfrastructureError(
                f"GET {url} failed: {type(exc).__name__}: {exc}", dependency=dependency
            ) from exc


def no_such_host(exc: BaseException) -> bool:
    """Whether `exc` (an httpx error) was caused by a DNS answer that the name does not
    exist (`socket.gaierror` EAI_NONAME / EAI_NODATA, found along `__cause__` /
    `__context__`), rather than a resolver that did not answer (EAI_AGAIN) or any other
    transport failure."""
    seen: set[int] = set()
    cause: BaseException | None = exc
    while cause is not None and id(cause) not in seen:
        if isinstance(cause, socket.gaierror):
            return cause.errno in _NO_SUCH_HOST
        seen.add(id(cause))
        cause = cause.__cause__ or cause.__context__
    return False


def _certificate_host(host: str) -> str:
    return f"SNS certificate host {host}"


def _rsa_key(pem: bytes) -> rsa.RSAPublicKey:
    try:
        key = x509.load_pem_x509_certificate(pem).public_key()
    except (ValueError, UnsupportedAlgorithm) as exc:
        raise Unauthenticated("SNS signing certificate is not a usable X.509 PEM") from exc
    if not isinstance(key, rsa.RSAPublicKey):
        raise Unauthenticated("SNS signing certificate does not hold an RSA key")
    return key


def _message(fields: Mapping[str, object]) -> SnsMessage:
    # Only called once the signature verified, so every signed field is a string.
    def text(name: str) -> str | None:
        value = fields.get(name)
        return value if isinstance(value, str) else None

    return SnsMessage(
        type=str(fields["Type"]),
        message_id=str(fields["MessageId"]),
        topic_arn=str(fields["TopicArn"]),
        message=str(fields["Message"]),
        timestamp=str(fields["Timestamp"]),
        subject=text("Subject"),
        subscribe_url=text("SubscribeURL"),
    )


def parse_ses_events(message: SnsMessage) -> list[WebhookEvent]:
    """The SES bounce and complaint events in a verified SNS notification.

    `message.message` is the SES JSON: either an SES notification (`notificationType`) or
    an SES event-publishing record (`eventType`), both with `mail.messageId` (the id SES
    returned when the email was sent) and a `bounce` or `complaint` object (AWS SES
    Developer Guide, "Amazon SNS notification contents for Amazon SES").

    One event per recipient, in the order SES lists them:
    - Bounce: `bounce.bouncedRecipients[i].emailAddress`; bounceType "Permanent" is a
      HARD_BOUNCE, "Transient", "Undetermined" (or an undocumented type) a SOFT_BOUNCE;
      reason
      "<bounceType>/<bounceSubType>[: <diagnosticCode>]".
    - Complaint: `complaint.complainedRecipients[i].emailAddress`, a COMPLAINT; reason
      "complaint/<complaintFeedbackType or 'unspecified'>". A feedback type "not-spam"
      (the reporter says it is not spam) gives no event.
    - event_id: "<SNS MessageId>#<i>" (i = the recipient's index from 0), stable across
      SNS redeliveries of the same message.
    - occurred_at: `bounce.timestamp` / `complaint.timestamp` (aware UTC), else None.

    - Send (event publishing) and Delivery (either kind): one ACCEPTED event, found by
      our idempotency key (`_accepted`), occurred_at `mail.timestamp` (when SES accepted
      the email); none when the record carries no key of ours.

    Anything else (Open, Click, Reject..., or a Message that is not SES JSON, such as the
    setup notification SES sends when a topic is attached) gives no event.

    Raises:
        MalformedBody: a Bounce or Complaint without its recipients, addresses or
            `mail.messageId`.
    """
    try:
        document = json.loads(message.message)
    except (ValueError, RecursionError):
        log.info("SNS notification %s is not SES JSON; ignored", message.message_id)
        return []
    if not isinstance(document, dict):
        return []
    kind = document.get("notificationType", document.get("eventType"))
    if kind not in ("Bounce", "Complaint", "Send", "Delivery"):
        return []
    mail = document.get("mail")
    message_id = mail.get("messageId") if isinstance(mail, dict) else None
    if not isinstance(message_id, str) or not message_id:
        raise MalformedBody(f"SES {kind} without mail.messageId")
    assert isinstance(mail, dict)
    cell = _tag(mail.get("tags"), CELL_TAG)  # event publishing records carry the tags
    if kind in ("Send", "Delivery"):
        return with_cell(_accepted(message.message_id, message_id, mail), cell)
    if kind == "Bounce":
        return with_cell(_bounces(message.message_id, message_id, document.get("bounce")), cell)
    return with_cell(_complaints(message.message_id, message_id, document.get("complaint")), cell)


def _accepted(sns_id: str, message_id: str, mail: Mapping[str, object]) -> list[WebhookEvent]:
    """The ACCEPTED event of a Send or Delivery record: the key from the
    `idempotency_key` message tag (`mail.tags`, name -> list of values, in event
    publishing records) or else the `X-Entity-Ref-ID` header (`mail.headers`, in records
    whose configuration includes the original headers); the recipient is the first of
    `mail.destination` (ours are single-recipient emails). No event without a key."""
    key = _tag(mail.get("tags"), KEY_TAG) or _header(mail.get("headers"), KEY_HEADER)
    if key is None:
        return []
    return accepted_events(
        PROVIDER,
        f"{sns_id}#accepted",
        provider_message_id=message_id,
        to=mail.get("destination"),
        occurred_at=instant(mail.get("timestamp")),
        idempotency_key=key,
    )


def _tag(tags: object, name: str) -> str | None:
    values = tags.get(name) if isinstance(tags, dict) else None
    value = values[0] if isinstance(values, list) and values else values
    return value if isinstance(value, str) and value else None


def _header(headers: object, name: str) -> str | None:
    if not isinstance(headers, list):
        return None
    for header in headers:
        if isinstance(header, dict) and str(header.get("name", "")).lower() == name.lower():
            value = header.get("value")
            return value if isinstance(value, str) and value else None
    return None


def _bounces(sns_id: str, message_id: str, bounce: object) -> list[WebhookEvent]:
    if not isinstance(bounce, dict):
        raise MalformedBody("SES Bounce without a bounce object")
    bounce_type = bounce.get("bounceType")
    # Only a documented permanent bounce suppresses; anything else is recorded only.
    kind = EventKind.HARD_BOUNCE if bounce_type == "Permanent" else EventKind.SOFT_BOUNCE
    sub_type = bounce.get("bounceSubType")
    head = f"{bounce_type}/{sub_type if isinstance(sub_type, str) else 'unspecified'}"
    occurred_at = instant(bounce.get("timestamp"))
    events: list[WebhookEvent] = []
    for index, recipient in enumerate(_recipients(bounce, "bouncedRecipients")):
        diagnostic = recipient.get("diagnosticCode")
        text = f"{head}: {diagnostic}" if isinstance(diagnostic, str) and diagnostic else head
        events.append(
            WebhookEvent(
                provider=PROVIDER,
                event_id=f"{sns_id}#{index}",
                kind=kind,
                provider_message_id=message_id,
                recipient=_address(recipient),
                reason=reason(text),
                occurred_at=occurred_at,
            )
        )
    return events


def _complaints(sns_id: str, message_id: str, complaint: object) -> list[WebhookEvent]:
    if not isinstance(complaint, dict):
        raise MalformedBody("SES Complaint without a complaint object")
    feedback = complaint.get("complaintFeedbackType")
    recipients = _recipients(complaint, "complainedRecipients")
    if feedback == "not-spam":
        return []
    text = f"complaint/{feedback if isinstance(feedback, str) else 'unspecified'}"
    occurred_at = instant(complaint.get("timestamp"))
    return [
        WebhookEvent(
            provider=PROVIDER,
            event_id=f"{sns_id}#{index}",
            kind=EventKind.COMPLAINT,
            provider_message_id=message_id,
            recipient=_address(recipient),
            reason=reason(text),
            occurred_at=occurred_at,
        )
        for index, recipient in enumerate(recipients)
    ]


def _recipients(container: Mapping[str, object], name: str) -> list[dict[str, object]]:
    recipients = container.get(name)
    if (
        not isinstance(recipients, list)
        or not recipients
        or not all(isinstance(r, dict) for r in recipients)
    ):
        raise MalformedBody(f"SES {name} missing or not a list of objects")
    return recipients


def _address(recipient: Mapping[str, object]) -> str:
    return address(recipient.get("emailAddress"), "SES recipient emailAddress")
