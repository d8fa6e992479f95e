"""The SNS signature verifier and the SES feedback parser (webhooks.sns), without a database.

Expected values come from the AWS documentation:
- SNS Developer Guide, "Verifying the signature of an Amazon SNS message when using HTTP
  query-based requests": the signed fields per Type, in a fixed order, each written as
  name, newline, value, newline; Subject only when present; SignatureVersion 1 = SHA1,
  2 = SHA256 (RSA); SigningCertURL from an SNS host over HTTPS.
- SNS Developer Guide, "Parsing message formats": the example Notification
  (MessageId 22b80b92-..., Subject "My First Message", Message "Hello world!") and
  SubscriptionConfirmation, and its certificate URL
  https://sns.us-west-2.amazonaws.com/SimpleNotificationService-f3ecfb7224c7233fe7bb5f59f96de52f.pem.
- SES Developer Guide, "Amazon SNS notification examples for Amazon SES": the bounce
  (jane@example.com, Permanent/General, 2016-01-27T14:59:38.237Z) and complaint
  (richard@example.com, abuse) examples.

Signatures are made with a throwaway key (tests.support.sns), certificates served by
httpx.MockTransport, which records every request.
"""

from __future__ import annotations

import base64
import json
import socket
from collections.abc import Callable
from datetime import UTC, datetime
from typing import Any

import httpcore
import httpx
import pytest
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec

from reminder_core.errors import Forbidden, InfrastructureError, MalformedBody, Unauthenticated
from tests.support.sns import (
    CERT_PATH,
    CERT_URL,
    SNS_HOST,
    TOPIC_ARN,
    SnsSigner,
    notification,
    subscription_confirmation,
)
from tests.support.webhook_payloads import (
    SES_BOUNCE,
    SES_COMPLAINT,
    SES_DELIVERY_NOTIFICATION,
    SES_SEND,
)
from webhooks.events import EventKind, WebhookEvent
from webhooks.sns import (
    SnsMessage,
    SnsVerifier,
    checked_sns_url,
    no_such_host,
    parse_ses_events,
    string_to_sign,
)

AWS_CERT_URL = (
    "https://sns.us-west-2.amazonaws.com/"
    "SimpleNotificationService-f3ecfb7224c7233fe7bb5f59f96de52f.pem"
)


# -- the string to sign ---------------------------------------------------------------


def test_string_to_sign_of_the_aws_example_notification() -> None:
    message = {
        "Type": "Notification",
        "MessageId": "22b80b92-fdea-4c2c-8f9d-bdfb0c7bf324",
        "TopicArn": "arn:aws:sns:us-west-2:123456789012:MyTopic",
        "Subject": "My First Message",
        "Message": "Hello world!",
        "Timestamp": "2012-05-02T00:54:06.655Z",
        "SignatureVersion": "1",
        "SigningCertURL": AWS_CERT_URL,
        "UnsubscribeURL": "https://sns.us-west-2.amazonaws.com/?Action=Unsubscribe&x=y",
    }
    assert string_to_sign(message) == (
        b"Message\nHello world!\n"
        b"MessageId\n22b80b92-fdea-4c2c-8f9d-bdfb0c7bf324\n"
        b"Subject\nMy First Message\n"
        b"Timestamp\n2012-05-02T00:54:06.655Z\n"
        b"TopicArn\narn:aws:sns:us-west-2:123456789012:MyTopic\n"
        b"Type\nNotification\n"
    )


def test_a_notification_without_subject_leaves_it_out() -> None:
    message = {
        "Type": "Notification",
        "MessageId": "m",
        "TopicArn": "t",
        "Message": "x",
        "Timestamp": "2012-05-02T00:54:06.655Z",
    }
    assert string_to_sign(message) == (
        b"Message\nx\nMessageId\nm\nTimestamp\n2012-05-02T00:54:06.655Z\nTopicArn\nt\n"
        b"Type\nNotification\n"
    )


def test_string_to_sign_of_the_aws_example_subscription_confirmation() -> None:
    token = (
        "2336412f37fb687f5d51e6e241d09c805a5a57b30d712f794cc5f6a988666d92768dd60a747ba6f3beb"
        "71854e285d6ad02428b09ceece29417f1f02d609c582afbacc99c583a916b9981dd2728f4ae6fdb82ef"
        "d087cc3b7849e05798d2d2785c03b0879594eeac82c01f235d0e717736"
    )
    topic = "arn:aws:sns:us-west-2:123456789012:MyTopic"
    subscribe_url = (
        "https://sns.us-west-2.amazonaws.com/?Action=ConfirmSubscription"
        f"&TopicArn={topic}&Token={token}"
    )
    text = (
        f"You have chosen to subscribe to the topic {topic}.\n"
        "To confirm the subscription, visit the SubscribeURL included in this message."
    )
    message = {
        "Type": "SubscriptionConfirmation",
        "MessageId": "165545c9-2a5c-472c-8df2-7ff2be2b3b1b",
        "Token": token,
        "TopicArn": topic,
        "Message": text,
        "SubscribeURL": subscribe_url,
        "Timestamp": "2012-04-26T20:45:04.751Z",
        "SignatureVersion": "1",
        "SigningCertURL": AWS_CERT_URL,
    }
    # The newline inside Message is signed as the character itself.
    expected = (
        f"Message\n{text}\n"
        "MessageId\n165545c9-2a5c-472c-8df2-7ff2be2b3b1b\n"
        f"SubscribeURL\n{subscribe_url}\n"
        "Timestamp\n2012-04-26T20:45:04.751Z\n"
        f"Token\n{token}\n"
        f"TopicArn\n{topic}\n"
        "Type\nSubscriptionConfirmation\n"
    )
    assert string_to_sign(message) == expected.encode()
    unsubscribe = {**message, "Type": "UnsubscribeConfirmation"}
    assert (
        string_to_sign(unsubscribe)
        == expected.replace("SubscriptionConfirmation", "UnsubscribeConfirmation").encode()
    )


@pytest.mark.parametrize(
    "message",
    [
        {"Type": "Notice", "Message": "x"},
        {"Type": "Notification", "MessageId": "m", "TopicArn": "t", "Timestamp": "s"},
        {**subscription_confirmation(), "Token": None},
        {**subscription_confirmation(), "Token": 7},
        {
            "Type": "Notification",
            "MessageId": "m",
            "TopicArn": "t",
            "Message": "\ud800",
            "Timestamp": "s",
        },
    ],
    ids=["unknown-type", "no-message", "no-token", "token-not-text", "lone-surrogate"],
)
def test_a_message_that_cannot_be_canonicalised_is_unauthenticated(
    message: dict[str, Any],
) -> None:
    with pytest.raises(Unauthenticated):
        string_to_sign(message)


# -- certificate and subscribe URLs ---------------------------------------------------


@pytest.mark.parametrize(
    "url",
    [
        AWS_CERT_URL,
        "https://sns.us-east-1.amazonaws.com/SimpleNotificationService-abc.pem",
        "https://sns.us-gov-west-1.amazonaws.com/SimpleNotificationService-abc.pem",
        "https://sns.ap-southeast-2.amazonaws.com/SimpleNotificationService-abc.pem",
        # More of AWS's regions (AWS General Reference, "AWS service endpoints").
        "https://sns.il-central-1.amazonaws.com/SimpleNotificationService-abc.pem",
        "https://sns.ap-northeast-3.amazonaws.com/SimpleNotificationService-abc.pem",
        "https://sns.eu-north-1.amazonaws.com/SimpleNotificationService-abc.pem",
        "https://sns.af-south-1.amazonaws.com/SimpleNotificationService-abc.pem",
        "https://sns.us-gov-east-1.amazonaws.com/SimpleNotificationService-abc.pem",
    ],
)
def test_sns_certificate_urls_are_accepted(url: str) -> None:
    assert checked_sns_url(url, purpose="certificate") == url


@pytest.mark.parametrize(
    "url",
    [
        "http://sns.us-east-1.amazonaws.com/cert.pem",  # not HTTPS
        "https://sns.us-east-1.amazonaws.com.evil.com/cert.pem",  # look-alike suffix
        "https://evil.com/sns.us-east-1.amazonaws.com/cert.pem",  # host in the path
        "https://evil.com/?sns.us-east-1.amazonaws.com/cert.pem",
        "https://sns.us-east-1.amazonaws.com@evil.com/cert.pem",  # userinfo trick
        "https://evil.com@sns.us-east-1.amazonaws.com/cert.pem",  # userinfo at all
        "https://sns.us-east-1.amazonaws.com:evil@evil.com/cert.pem",
        "https://sns.us-east-1.amazonaws.com\\@evil.com/cert.pem",  # backslash
        "https://sns.us-east-1.amazonaws.com:8443/cert.pem",  # a port
        "https://sns.us-east-1.amazonaws.com./cert.pem",  # trailing dot
        "https://SNS.US-EAST-1.AMAZONAWS.COM/cert.pem",
        "https://sns.us-east-1.amazonaws\u3002com/cert.pem",  # ideographic full stop
        "https://sns.evil.com/cert.pem",
        "https://evilsns.us-east-1.amazonaws.com/cert.pem",
        "https://sqs.us-east-1.amazonaws.com/cert.pem",  # another AWS service
        "https://sns.us-east-1.amazonaws.com/cert.txt",  # not a .pem path
        "https://sns.us-east-1.amazonaws.com/../cert.pem",
        "https://sns.us-east-1.amazonaws.com/cert.pem?x=1",
        "https://sns.us-east-1.amazonaws.com/cert.pem#x",
        "https://sns.us-east-1.amazonaws.com/ cert.pem",
        "//sns.us-east-1.amazonaws.com/cert.pem",
        # The trial: any string between "sns." and ".amazonaws.com" was a host to fetch
        # from; the region must read as AWS spells its regions.
        "https://sns.ab-any-string-at-all-1.amazonaws.com/x.pem",
        "https://sns.xx-yyyyyyyyyyyyyyyyyyyy-1.amazonaws.com/x.pem",
        "https://sns.us-east-east-1.amazonaws.com/x.pem",
        "https://sns.us-gov-gov-west-1.amazonaws.com/x.pem",
        "https://sns.usa-east-1.amazonaws.com/x.pem",
        "https://sns.us-east.amazonaws.com/x.pem",
        "https://sns.us-east-123.amazonaws.com/x.pem",
        "",
        None,
        42,
    ],
)
def test_other_certificate_urls_are_refused(url: object) -> None:
    with pytest.raises(Unauthenticated):
        checked_sns_url(url, purpose="certificate")


def test_a_subscribe_url_must_be_an_sns_confirm_subscription() -> None:
    url = subscription_confirmation()["SubscribeURL"]
    assert checked_sns_url(url, purpose="subscribe") == url
    for bad in (
        url.replace("ConfirmSubscription", "Unsubscribe"),
        url.replace(SNS_HOST, "sns.us-east-1.amazonaws.com.evil.com"),
        url.replace("https://", "http://"),
        url.replace("/?", "/x?"),
    ):
        with pytest.raises(Unauthenticated):
            checked_sns_url(bad, purpose="subscribe")


# -- the verifier ---------------------------------------------------------------------


class FakeAws:
    """httpx.MockTransport standing in for the SNS host; records every URL asked."""

    def __init__(self, cert_pem: bytes, *, status: int = 200) -> None:
        self.cert_pem = cert_pem
        self.status = status
        self.urls: list[str] = []

    def __call__(self, request: httpx.Request) -> httpx.Response:
        self.urls.append(str(request.url))
        if self.status != 200:
            return httpx.Response(self.status, headers={"Location": "https://evil.com/c.pem"})
        if request.url.path == CERT_PATH:
            return httpx.Response(200, content=self.cert_pem)
        if request.url.params.get("Action") == "ConfirmSubscription":
            return httpx.Response(200, content=b"<ConfirmSubscriptionResponse/>")
        return httpx.Response(404)


@pytest.fixture(scope="module")
def signer() -> SnsSigner:
    return SnsSigner()


def verifier_for(aws: FakeAws) -> SnsVerifier:
    return SnsVerifier(
        topic_arns=[TOPIC_ARN], http=httpx.Client(transport=httpx.MockTransport(aws))
    )


def body(message: dict[str, Any]) -> bytes:
    return json.dumps(message).encode()


@pytest.mark.parametrize("version", ["1", "2"])
def test_a_signed_notification_verifies(signer: SnsSigner, version: str) -> None:
    aws = FakeAws(signer.cert_pem)
    signed = signer.sign(notification("Hello world!", message_id="m-1"), version=version)
    receipt = verifier_for(aws).receive(body(signed))
    assert receipt.action == "notification"
    assert receipt.message.message == "Hello world!"
    assert receipt.message.message_id == "m-1"
    assert aws.urls == [CERT_URL]


def test_the_certificate_is_fetched_once(signer: SnsSigner) -> None:
    aws = FakeAws(signer.cert_pem)
    verifier = verifier_for(aws)
    for i in range(3):
        verifier.receive(body(signer.sign(notification("x", message_id=f"m-{i}"))))
    assert aws.urls == [CERT_URL]


def tamper(signed: dict[str, Any]) -> dict[str, Any]:
    """The same message with one character of Message changed."""
    text = signed["Message"]
    return {**signed, "Message": text[:-1] + chr(ord(text[-1]) ^ 1)}


@pytest.mark.parametrize("version", ["1", "2"])
def test_a_tampered_message_is_refused(signer: SnsSigner, version: str) -> None:
    signed = signer.sign(notification("Hello world!", message_id="m"), version=version)
    with pytest.raises(Unauthenticated):
        verifier_for(FakeAws(signer.cert_pem)).receive(body(tamper(signed)))


def test_a_signature_from_another_key_is_refused(signer: SnsSigner) -> None:
    other = SnsSigner()
    signed = other.sign(notification("x", message_id="m"))
    with pytest.raises(Unauthenticated):
        verifier_for(FakeAws(signer.cert_pem)).receive(body(signed))


def test_a_version_1_signature_presented_as_version_2_is_refused(signer: SnsSigner) -> None:
    signed = signer.sign(notification("x", message_id="m"), version="1")
    with pytest.raises(Unauthenticated):
        verifier_for(FakeAws(signer.cert_pem)).receive(body({**signed, "SignatureVersion": "2"}))


@pytest.mark.parametrize(
    "change",
    [
        {"SignatureVersion": "3"},
        {"SignatureVersion": 2},
        {"SignatureVersion": None},
        {"Signature": None},
        {"Signature": ""},
        {"Signature": "not base64!"},
        {"Signature": 12},
        {"Type": "Notice"},
        {"MessageId": None},
    ],
)
def test_unsigned_or_malformed_signature_fields_are_refused_before_any_fetch(
    signer: SnsSigner, change: dict[str, Any]
) -> None:
    aws = FakeAws(signer.cert_pem)
    signed = signer.sign(notification("x", message_id="m"))
    with pytest.raises(Unauthenticated):
        verifier_for(aws).receive(body({**signed, **change}))
    assert aws.urls == []


@pytest.mark.parametrize(
    "cert_url",
    [
        "https://sns.us-east-1.amazonaws.com.evil.com" + CERT_PATH,
        "https://evil.com/sns.us-east-1.amazonaws.com" + CERT_PATH,
        "http://" + SNS_HOST + CERT_PATH,
        "https://" + SNS_HOST + "@evil.com" + CERT_PATH,
    ],
)
def test_a_forged_certificate_host_is_refused_before_any_fetch(
    signer: SnsSigner, cert_url: str
) -> None:
    aws = FakeAws(signer.cert_pem)
    signed = signer.sign(notification("x", message_id="m"), cert_url=cert_url)
    with pytest.raises(Unauthenticated):
        verifier_for(aws).receive(body(signed))
    assert aws.urls == []


@pytest.mark.parametrize("status", [301, 302, 403, 404])
def test_a_certificate_host_answering_other_than_200_is_unauthenticated(
    signer: SnsSigner, status: int
) -> None:
    aws = FakeAws(signer.cert_pem, status=status)
    with pytest.raises(Unauthenticated):
        verifier_for(aws).receive(body(signer.sign(notification("x", message_id="m"))))
    assert aws.urls == [CERT_URL]  # the redirect is not followed


def test_a_certificate_host_failing_is_infrastructure(signer: SnsSigner) -> None:
    with pytest.raises(InfrastructureError):
        verifier_for(FakeAws(signer.cert_pem, status=503)).receive(
            body(signer.sign(notification("x", message_id="m")))
        )

    def refuse(request: httpx.Request) -> httpx.Response:
        raise httpx.ConnectError("connection refused", request=request)

    down = SnsVerifier(
        topic_arns=[TOPIC_ARN], http=httpx.Client(transport=httpx.MockTransport(refuse))
    )
    with pytest.raises(InfrastructureError):
        down.receive(body(signer.sign(notification("x", message_id="m"))))


class Timer:
    """A monotonic clock the test moves by hand (for the caches' TTLs)."""

    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def other_cert_url(path: str) -> str:
    return f"https://{SNS_HOST}/{path}.pem"


@pytest.mark.parametrize("status", [403, 404])
def test_a_refused_certificate_url_is_remembered_for_a_while(
    signer: SnsSigner, status: int
) -> None:
    # An unauthenticated caller chooses the URL: repeating it must not cost a fetch.
    aws, timer = FakeAws(signer.cert_pem, status=status), Timer()
    verifier = SnsVerifier(
        topic_arns=[TOPIC_ARN],
        http=httpx.Client(transport=httpx.MockTransport(aws)),
        refused_ttl_s=300,
        timer=timer,
    )
    forged = body(signer.sign(notification("x", message_id="m"), cert_url=other_cert_url("x")))
    for _ in range(3):
        with pytest.raises(Unauthenticated):
            verifier.receive(forged)
    assert aws.urls == [other_cert_url("x")]
    timer.now += 301
    with pytest.raises(Unauthenticated):
        verifier.receive(forged)
    assert len(aws.urls) == 2


def test_an_unreachable_certificate_host_is_remembered_briefly(signer: SnsSigner) -> None:
    asked: list[str] = []

    def refuse(request: httpx.Request) -> httpx.Response:
        asked.append(str(request.url))
        raise httpx.ConnectError("connection refused", request=request)

    timer = Timer()
    verifier = SnsVerifier(
        topic_arns=[TOPIC_ARN],
        http=httpx.Client(transport=httpx.MockTransport(refuse)),
        unreachable_ttl_s=10,
        timer=timer,
    )
    for path in ("a", "b", "c"):  # any path on that host: the host is down
        signed = signer.sign(notification("x", message_id="m"), cert_url=other_cert_url(path))
        with pytest.raises(InfrastructureError) as raised:
            verifier.receive(body(signed))
        assert raised.value.dependency == f"SNS certificate host {SNS_HOST}"
    assert asked == [other_cert_url("a")]
    timer.now += 11  # SNS's next retry, 20 s later, finds the host asked again
    with pytest.raises(InfrastructureError):
        verifier.receive(body(signer.sign(notification("x", message_id="m"))))
    assert asked == [other_cert_url("a"), CERT_URL]


def test_a_certificate_host_answering_5xx_names_the_host(signer: SnsSigner) -> None:
    with pytest.raises(InfrastructureError) as raised:
        verifier_for(FakeAws(signer.cert_pem, status=502)).receive(
            body(signer.sign(notification("x", message_id="m")))
        )
    assert raised.value.dependency == f"SNS certificate host {SNS_HOST}"


def gai_error(code: int) -> httpx.ConnectError:
    """An httpx.ConnectError chained as httpx chains a failed name lookup: httpx ->
    httpcore -> socket.gaierror (as a real lookup of "nxdomain.invalid" gives)."""
    lookup = socket.gaierror(code, "lookup failed")
    inner = httpcore.ConnectError(str(lookup))
    inner.__cause__ = lookup
    outer = httpx.ConnectError(str(inner))
    outer.__cause__ = inner
    return outer


def test_a_host_that_does_not_exist_is_the_senders_fault(signer: SnsSigner) -> None:
    # NXDOMAIN (EAI_NONAME): the name the caller chose does not exist, 401 (SNS does not
    # retry a 4xx). EAI_AGAIN (no answer from the DNS server) is ours: 503.
    def lookup(code: int) -> Callable[[httpx.Request], httpx.Response]:
        def fail(_: httpx.Request) -> httpx.Response:
            raise gai_error(code)

        return fail

    signed = body(signer.sign(notification("x", message_id="m")))
    nxdomain = SnsVerifier(
        topic_arns=[TOPIC_ARN],
        http=httpx.Client(transport=httpx.MockTransport(lookup(socket.EAI_NONAME))),
    )
    with pytest.raises(Unauthenticated, match="does not exist"):
        nxdomain.receive(signed)
    no_answer = SnsVerifier(
        topic_arns=[TOPIC_ARN],
        http=httpx.Client(transport=httpx.MockTransport(lookup(socket.EAI_AGAIN))),
    )
    with pytest.raises(InfrastructureError):
        no_answer.receive(signed)


def test_no_such_host_reads_the_cause_chain() -> None:
    assert no_such_host(gai_error(socket.EAI_NONAME))
    assert not no_such_host(gai_error(socket.EAI_AGAIN))
    assert not no_such_host(httpx.ConnectError("connection refused"))
    assert not no_such_host(httpx.ReadTimeout("timed out"))


@pytest.mark.parametrize("served", ["garbage", "ec-key"])
def test_a_certificate_that_is_not_an_rsa_pem_is_unauthenticated(
    signer: SnsSigner, served: str
) -> None:
    if served == "garbage":
        pem = b"-----BEGIN CERTIFICATE-----\nnot a certificate\n-----END CERTIFICATE-----\n"
    else:
        from cryptography import x509
        from cryptography.x509.oid import NameOID

        key = ec.generate_private_key(ec.SECP256R1())
        name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "ec")])
        now = datetime.now(UTC)
        pem = (
            x509.CertificateBuilder()
            .subject_name(name)
            .issuer_name(name)
            .public_key(key.public_key())
            .serial_number(1)
            .not_valid_before(now)
            .not_valid_after(now.replace(year=now.year + 1))
            .sign(key, hashes.SHA256())
            .public_bytes(serialization.Encoding.PEM)
        )
    with pytest.raises(Unauthenticated):
        verifier_for(FakeAws(pem)).receive(body(signer.sign(notification("x", message_id="m"))))


@pytest.mark.parametrize("raw", [b"{", b"[]", b'"text"', b"\xff\xfe\x00", b"[" * 100_000])
def test_a_body_that_is_not_a_json_object_is_malformed(signer: SnsSigner, raw: bytes) -> None:
    with pytest.raises(MalformedBody):
        verifier_for(FakeAws(signer.cert_pem)).receive(raw)


def test_a_notification_from_another_topic_is_forbidden(signer: SnsSigner) -> None:
    other = "arn:aws:sns:us-east-1:210987654321:someone-else"
    signed = signer.sign(notification("x", message_id="m", topic_arn=other))
    with pytest.raises(Forbidden):
        verifier_for(FakeAws(signer.cert_pem)).receive(body(signed))


def test_a_subscription_to_a_configured_topic_is_confirmed(signer: SnsSigner) -> None:
    aws = FakeAws(signer.cert_pem)
    confirmation = subscription_confirmation()
    receipt = verifier_for(aws).receive(body(signer.sign(confirmation, version="1")))
    assert receipt.action == "confirmed"
    assert aws.urls == [CERT_URL, confirmation["SubscribeURL"]]


def test_a_subscription_to_another_topic_is_ignored(signer: SnsSigner) -> None:
    aws = FakeAws(signer.cert_pem)
    other = "arn:aws:sns:us-east-1:210987654321:someone-else"
    receipt = verifier_for(aws).receive(
        body(signer.sign(subscription_confirmation(topic_arn=other)))
    )
    assert receipt.action == "ignored"
    assert aws.urls == [CERT_URL]  # verified, never confirmed


def test_an_unsubscribe_confirmation_is_ignored(signer: SnsSigner) -> None:
    aws = FakeAws(signer.cert_pem)
    message = {**subscription_confirmation(), "Type": "UnsubscribeConfirmation"}
    receipt = verifier_for(aws).receive(body(signer.sign(message)))
    assert receipt.action == "ignored"
    assert aws.urls == [CERT_URL]


def test_a_forged_subscribe_url_is_not_requested(signer: SnsSigner) -> None:
    aws = FakeAws(signer.cert_pem)
    confirmation = subscription_confirmation()
    confirmation["SubscribeURL"] = "https://evil.com/?Action=ConfirmSubscription&x=1"
    with pytest.raises(Unauthenticated):
        verifier_for(aws).receive(body(signer.sign(confirmation)))
    assert aws.urls == [CERT_URL]


# -- SES feedback inside the notification ---------------------------------------------

EXAMPLE_AT = datetime(2016, 1, 27, 14, 59, 38, 237000, tzinfo=UTC)


def sns_message(ses: object, message_id: str = "sns-1") -> SnsMessage:
    text = ses if isinstance(ses, str) else json.dumps(ses)
    return SnsMessage("Notification", message_id, TOPIC_ARN, text, "2016-01-27T14:59:38Z")


def test_a_permanent_bounce_is_a_hard_bounce_of_each_recipient() -> None:
    assert parse_ses_events(sns_message(SES_BOUNCE)) == [
        WebhookEvent(
            provider="ses",
            event_id="sns-1#0",
            kind=EventKind.HARD_BOUNCE,
            provider_message_id="00000138111222aa-33322211-cccc-cccc-cccc-ddddaaaa0680-000000",
            recipient="jane@example.com",
            reason="Permanent/General: smtp; 550 5.1.1 <jane@example.com>... User",
            occurred_at=EXAMPLE_AT,
        )
    ]


@pytest.mark.parametrize("bounce_type", ["Transient", "Undetermined"])
def test_transient_and_undetermined_bounces_are_soft(bounce_type: str) -> None:
    ses = json.loads(json.dumps(SES_BOUNCE))
    ses["bounce"]["bounceType"] = bounce_type
    ses["bounce"]["bounceSubType"] = "MailboxFull" if bounce_type == "Transient" else "Undetermined"
    ses["bounce"]["bouncedRecipients"].append({"emailAddress": "mary@example.com"})
    events = parse_ses_events(sns_message(ses, "sns-2"))
    assert [(e.event_id, e.recipient, e.kind) for e in events] == [
        ("sns-2#0", "jane@example.com", EventKind.SOFT_BOUNCE),
        ("sns-2#1", "mary@example.com", EventKind.SOFT_BOUNCE),
    ]
    assert events[1].reason == f"{bounce_type}/{ses['bounce']['bounceSubType']}"


def test_a_complaint_is_a_complaint() -> None:
    assert parse_ses_events(sns_message(SES_COMPLAINT, "sns-3")) == [
        WebhookEvent(
            provider="ses",
            event_id="sns-3#0",
            kind=EventKind.COMPLAINT,
            provider_message_id="000001378603177f-7a5433e7-8edb-42ae-af10-f0181f34d6ee-000000",
            recipient="richard@example.com",
            reason="complaint/abuse",
            occurred_at=EXAMPLE_AT,
        )
    ]


def test_a_not_spam_report_is_no_complaint() -> None:
    # SES Developer Guide: complaintFeedbackType "not-spam" means the reporter does not
    # consider the message spam.
    ses = json.loads(json.dumps(SES_COMPLAINT))
    ses["complaint"]["complaintFeedbackType"] = "not-spam"
    assert parse_ses_events(sns_message(ses)) == []


def test_event_publishing_records_use_event_type() -> None:
    # SES Developer Guide, "Contents of event data that Amazon SES publishes to Amazon
    # SNS": the same bounce object, under eventType instead of notificationType.
    record = {k: v for k, v in SES_BOUNCE.items() if k != "notificationType"}
    [event] = parse_ses_events(sns_message({"eventType": "Bounce", **record}))
    assert event.kind is EventKind.HARD_BOUNCE


@pytest.mark.parametrize(
    "ses",
    [
        {"notificationType": "Delivery", "mail": {"messageId": "m"}, "delivery": {}},
        {"eventType": "Open", "mail": {"messageId": "m"}},
        "Successfully validated SNS topic for Amazon SES event publishing.",
        ["Bounce"],
    ],
)
def test_other_messages_carry_no_event(ses: object) -> None:
    assert parse_ses_events(sns_message(ses)) == []


@pytest.mark.parametrize(
    "path",
    [
        ("mail",),
        ("mail", "messageId"),
        ("bounce",),
        ("bounce", "bouncedRecipients"),
        ("bounce", "bouncedRecipients", 0, "emailAddress"),
    ],
)
def test_a_bounce_without_its_parts_is_malformed(path: tuple[object, ...]) -> None:
    ses = json.loads(json.dumps(SES_BOUNCE))
    container: Any = ses
    for step in path[:-1]:
        container = container[step]
    del container[path[-1]]
    with pytest.raises(MalformedBody):
        parse_ses_events(sns_message(ses))


def test_signer_signature_is_base64_of_the_key_size(signer: SnsSigner) -> None:
    # Guard on the test signer itself: RSA-2048 signatures are 256 bytes.
    signed = signer.sign(notification("x", message_id="m"))
    assert len(base64.b64decode(signed["Signature"])) == 256


# -- SES Send / Delivery: evidence that SES accepted an email (issue 12) ---------------

KEY = "0192a4b5-6c7d-7e8f-9a0b-1c2d3e4f5a6b-20261202T090000Z"


def with_key(template: dict[str, Any], key: str = KEY) -> dict[str, Any]:
    """A copy of `template` whose "<key>" placeholders hold `key`."""
    return json.loads(json.dumps(template).replace("<key>", key))


def test_a_send_record_is_evidence_found_by_the_idempotency_key_tag() -> None:
    # The Send record of the SES Developer Guide, with our tag among SES's own.
    assert parse_ses_events(sns_message(with_key(SES_SEND), "sns-7")) == [
        WebhookEvent(
            provider="ses",
            event_id="sns-7#accepted",
            kind=EventKind.ACCEPTED,
            provider_message_id="EXAMPLE7c191be45-e9aedb9a-02f9-4d12-a87d-dd0099a07f8a-000000",
            recipient="recipient@example.com",
            reason="accepted",
            occurred_at=datetime(2016, 10, 14, 5, 2, 16, 645000, tzinfo=UTC),
            idempotency_key=KEY,
        )
    ]


def test_an_identity_delivery_notification_is_evidence_found_by_the_header() -> None:
    # Identity notifications carry no tags (SES Developer Guide); with the original
    # headers included, the X-Entity-Ref-ID header the sender sets names the key.
    [event] = parse_ses_events(sns_message(with_key(SES_DELIVERY_NOTIFICATION)))
    assert (event.kind, event.idempotency_key, event.recipient) == (
        EventKind.ACCEPTED,
        KEY,
        "jane@example.com",
    )
    assert event.provider_message_id == SES_DELIVERY_NOTIFICATION["mail"]["messageId"]


def test_a_send_record_without_our_key_is_no_event() -> None:
    ses = with_key(SES_SEND)
    del ses["mail"]["tags"]["idempotency_key"]
    assert parse_ses_events(sns_message(ses)) == []
    delivery = with_key(SES_DELIVERY_NOTIFICATION)
    delivery["mail"]["headers"] = delivery["mail"]["headers"][:2]
    assert parse_ses_events(sns_message(delivery)) == []
