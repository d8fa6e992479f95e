"""A throwaway Amazon SNS for the webhook tests: a signer with its own RSA key and
self-signed certificate, and a local HTTPS server standing in for
sns.us-east-1.amazonaws.com (certificate and ConfirmSubscription URLs).

The signer builds the string to sign itself, from the AWS SNS Developer Guide ("Verifying
the signature of an Amazon SNS message": the signed fields of each message type in a fixed
order, each as name, newline, value, newline), not with the code under test.
"""

from __future__ import annotations

import base64
import ssl
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import UTC, datetime, timedelta
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import httpx
import trustme
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import padding, rsa
from cryptography.x509.oid import NameOID

SNS_HOST = "sns.us-east-1.amazonaws.com"
#: Shaped like AWS's (SimpleNotificationService-<hex>.pem); the hex is made up.
CERT_PATH = "/SimpleNotificationService-0123456789abcdef0123456789abcdef.pem"
CERT_URL = f"https://{SNS_HOST}{CERT_PATH}"
TOPIC_ARN = "arn:aws:sns:us-east-1:123456789012:ses-feedback"

# AWS SNS Developer Guide: the fields signed for each Type, in signing order.
_SIGNED = {
    "Notification": ["Message", "MessageId", "Subject", "Timestamp", "TopicArn", "Type"],
    "SubscriptionConfirmation": [
        "Message",
        "MessageId",
        "SubscribeURL",
        "Timestamp",
        "Token",
        "TopicArn",
        "Type",
    ],
}
_SIGNED["UnsubscribeConfirmation"] = _SIGNED["SubscriptionConfirmation"]


class SnsSigner:
    """Signs SNS messages as SNS does, with a key made for this test run."""

    def __init__(self) -> None:
        self.key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
        name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "sns.amazonaws.com")])
        now = datetime.now(UTC)
        self.certificate = (
            x509.CertificateBuilder()
            .subject_name(name)
            .issuer_name(name)
            .public_key(self.key.public_key())
            .serial_number(x509.random_serial_number())
            .not_valid_before(now - timedelta(days=1))
            .not_valid_after(now + timedelta(days=30))
            .sign(self.key, hashes.SHA256())
        )
        self.cert_pem = self.certificate.public_bytes(serialization.Encoding.PEM)

    def sign(
        self, message: dict[str, Any], *, version: str = "2", cert_url: str = CERT_URL
    ) -> dict[str, Any]:
        """`message` with SignatureVersion, SigningCertURL and Signature added."""
        canonical = "".join(
            f"{name}\n{message[name]}\n"
            for name in _SIGNED[message["Type"]]
            if message.get(name) is not None
        )
        digest = hashes.SHA1() if version == "1" else hashes.SHA256()
        signature = self.key.sign(canonical.encode("utf-8"), padding.PKCS1v15(), digest)
        return {
            **message,
            "SignatureVersion": version,
            "Signature": base64.b64encode(signature).decode("ascii"),
            "SigningCertURL": cert_url,
        }


def notification(message: str, *, message_id: str, topic_arn: str = TOPIC_ARN) -> dict[str, Any]:
    """An unsigned SNS Notification (AWS SNS Developer Guide, "HTTP/HTTPS notification
    JSON format"), without Subject, as SES sends its feedback."""
    return {
        "Type": "Notification",
        "MessageId": message_id,
        "TopicArn": topic_arn,
        "Message": message,
        "Timestamp": "2016-01-27T14:59:38.237Z",
        "UnsubscribeURL": f"https://{SNS_HOST}/?Action=Unsubscribe&SubscriptionArn={topic_arn}:1",
    }


def subscription_confirmation(*, topic_arn: str = TOPIC_ARN) -> dict[str, Any]:
    """An unsigned SubscriptionConfirmation (AWS SNS Developer Guide, "HTTP/HTTPS
    subscription confirmation JSON format"; its example's values, our topic)."""
    token = (
        "2336412f37fb687f5d51e6e241d09c805a5a57b30d712f794cc5f6a988666d92768dd60a747ba6f3beb"
        "71854e285d6ad02428b09ceece29417f1f02d609c582afbacc99c583a916b9981dd2728f4ae6fdb82ef"
        "d087cc3b7849e05798d2d2785c03b0879594eeac82c01f235d0e717736"
    )
    return {
        "Type": "SubscriptionConfirmation",
        "MessageId": "165545c9-2a5c-472c-8df2-7ff2be2b3b1b",
        "Token": token,
        "TopicArn": topic_arn,
        "Message": f"You have chosen to subscribe to the topic {topic_arn}.\n"
        "To confirm the subscription, visit the SubscribeURL included in this message.",
        "SubscribeURL": f"https://{SNS_HOST}/?Action=ConfirmSubscription&TopicArn={topic_arn}"
        f"&Token={token}",
        "Timestamp": "2012-04-26T20:45:04.751Z",
    }


class FakeSnsHost:
    """A local HTTPS server answering as sns.us-east-1.amazonaws.com: the certificate at
    CERT_PATH, 200 to ConfirmSubscription, 404 otherwise. `requests` lists each path asked.

    `client()` is an httpx.Client whose transport sends requests for SNS_HOST to this
    server (TLS checked against a throwaway CA, for the name SNS_HOST) and refuses every
    other host, so a test proves what was, and was not, fetched.
    """

    def __init__(self, cert_pem: bytes) -> None:
        self.cert_pem = cert_pem
        self.requests: list[str] = []
        self.ca = trustme.CA()
        fake = self

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self) -> None:
                fake.requests.append(self.path)
                if self.path == CERT_PATH:
                    self._answer(200, fake.cert_pem, "application/x-x509-ca-cert")
                elif self.path.startswith("/?Action=ConfirmSubscription&"):
                    self._answer(200, b"<ConfirmSubscriptionResponse/>", "text/xml")
                else:
                    self._answer(404, b"not found", "text/plain")

            def _answer(self, status: int, body: bytes, media: str) -> None:
                self.send_response(status)
                self.send_header("Content-Type", media)
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, format: str, *args: object) -> None:
                pass

        context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
        self.ca.issue_cert(SNS_HOST).configure_cert(context)
        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.server.socket = context.wrap_socket(self.server.socket, server_side=True)
        self.port = self.server.server_address[1]
        self._thread = threading.Thread(target=self.server.serve_forever, daemon=True)

    def start(self) -> None:
        self._thread.start()

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()

    def client(self) -> httpx.Client:
        context = ssl.create_default_context()
        self.ca.configure_trust(context)
        return httpx.Client(transport=_ToLocal(self.port, context))


class _ToLocal(httpx.BaseTransport):
    def __init__(self, port: int, context: ssl.SSLContext) -> None:
        self._port = port
        self._inner = httpx.HTTPTransport(verify=context)

    def handle_request(self, request: httpx.Request) -> httpx.Response:
        if request.url.host != SNS_HOST or request.url.scheme != "https":
            raise httpx.ConnectError(f"test network: no route to {request.url}")
        local = httpx.Request(
            request.method,
            request.url.copy_with(host="127.0.0.1", port=self._port),
            headers=request.headers,
            extensions={**request.extensions, "sni_hostname": SNS_HOST},
        )
        return self._inner.handle_request(local)

    def close(self) -> None:
        self._inner.close()


@contextmanager
def fake_sns_host(cert_pem: bytes) -> Iterator[FakeSnsHost]:
    host = FakeSnsHost(cert_pem)
    host.start()
    try:
        yield host
    finally:
        host.close()
