"""Amazon SQS queue backend (boto3): the production queue between the outbox and the senders.

How the `Queue` interface maps onto a standard SQS queue and its dead-letter queue (DLQ):

- **Send**: SendMessageBatch, 10 entries a call. Entries that fail on the server side
  (`SenderFault` false) are sent again, alone, a few times with jittered backoff;
  anything still failing, or refused as the sender's fault, raises InfrastructureError
  (the caller resends: at-least-once). Throttling and 5xx of whole calls are retried by
  botocore's `standard` retry mode.
- **Delay**: `DelaySeconds` is whole seconds, at most 900 (15 min). A delay is rounded
  *up* (a message is never visible early). A longer delay is capped at 900 s and the
  message carries the attribute `reminders.due-at` (ISO 8601, UTC); a receive that gets
  it before that instant does not return it but sends it again with the remaining delay
  (again capped at 900 s) and deletes the early copy, so early receives never count
  toward the redrive policy's maxReceiveCount.
- **Receive**: ReceiveMessage long-polls for `wait_time_s` (WaitTimeSeconds), returns at
  most 10 messages (SQS's limit), `receive_count` from ApproximateReceiveCount, ordered by
  SentTimestamp within the batch (a standard queue does not promise order across calls).
- **Dead-lettering** is SQS's own: the queue's RedrivePolicy moves a message to the DLQ
  when a receive finds it already received maxReceiveCount times. The DLQ is found from
  that policy (deadLetterTargetArn), once per process.
- **Time**: SQS keeps time on its own clock. The `now` arguments are used only for the
  `reminders.due-at` instants above; visibility timeouts and delays run from the call.
- **Receipt handles**: AWS documents that a delete with a handle from an earlier receive
  "succeeds, but the message might not be deleted"; the system never relies on either
  outcome (the unique delivery row does). A change of visibility with a stale or expired
  handle changes nothing and raises nothing.

Dead letters. SQS cannot read a queue without receiving from it, and message attributes
cannot change after the send. So:

- Every DLQ operation *scans* the DLQ: it receives every message, each hidden for
  `dead_letter_hold_s` so the scan sees it once, then makes the ones it does not act on
  visible again (visibility 0). Two scans at the same moment (a maintenance tick and an
  operator's `reminders dlq list`) may each miss what the other holds; a missed letter is
  seen by the next scan. `depth().dead_lettered_held` (the DLQ's
  ApproximateNumberOfMessagesNotVisible) counts the letters held at that moment, so that
  `reminders dlq replay|purge` can tell "none left" from "held by another reader".
- `dead_letters(unrecorded_only=True)` keeps the letters it returns hidden (held) for
  `dead_letter_hold_s`: a lease, so that two maintenance workers do not record the same
  letter, and the handles that `mark_dead_letters_recorded` then uses. A letter that is
  not marked becomes visible again at the next `mark_dead_letters_recorded` call of this
  instance, or when its hold ends.
- `mark_dead_letters_recorded` sends a copy of each letter to the DLQ with the attribute
  `reminders.recorded-at`, then deletes the original. The copy also carries
  `reminders.dead-letter-id` (the original MessageId, so a letter keeps its id),
  `reminders.sent-at` (the original SentTimestamp, for ordering) and
  `reminders.receive-count`. A crash between the send and the delete leaves two copies
  with one id; the next scan deletes the extra one (keeping the recorded one).
- `receive_count` of a letter is the RedrivePolicy's maxReceiveCount: SQS moves a message
  once its receive count exceeds it, so it was delivered exactly that many times.
  `dead_lettered_at` is None: SQS records no such instant (it keeps the original enqueue
  timestamp on the move; AWS SQS Developer Guide, "dead-letter queue retention").
- `redrive` sends each body marked as a replay (`messages.as_replay`) to the source
  queue (visible at once, receive count starting from zero, as the PostgreSQL backend's
  queue_message_redrive), then deletes the letter. SQS's own StartMessageMoveTask is not used: it
  moves every message unchanged and cannot mark a replay.
"""

from __future__ import annotations

import json
import logging
import math
import threading
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import TYPE_CHECKING, Any, TypeVar
from urllib.parse import urlsplit

import boto3
from botocore.config import Config
from botocore.exceptions import BotoCoreError, ClientError
from tenacity import Retrying, retry_if_exception_type, stop_after_attempt, wait_random_exponential

from reminder_core.errors import InfrastructureError, QueueNotFound
from reminder_core.messages import as_replay
from reminder_core.queue.base import DeadLetter, Message, QueueDepth

if TYPE_CHECKING:
    from mypy_boto3_sqs.client import SQSClient
    from mypy_boto3_sqs.literals import QueueAttributeNameType
    from mypy_boto3_sqs.type_defs import (
        BatchResultErrorEntryTypeDef,
        ChangeMessageVisibilityBatchRequestEntryTypeDef,
        DeleteMessageBatchRequestEntryTypeDef,
        MessageAttributeValueTypeDef,
        MessageTypeDef,
        SendMessageBatchRequestEntryTypeDef,
    )

log = logging.getLogger(__name__)

#: SQS limits (Amazon SQS Developer Guide, "Amazon SQS quotas").
MAX_BATCH = 10  # entries of a *Batch call; messages of one ReceiveMessage
MAX_DELAY_S = 900  # DelaySeconds
MAX_VISIBILITY_TIMEOUT_S = 43_200  # VisibilityTimeout (12 hours)
MAX_WAIT_TIME_S = 20  # WaitTimeSeconds
DEAD_LETTER_RETENTION_S = 1_209_600  # 14 days, the maximum MessageRetentionPeriod

#: Message attributes written by this backend (names: Amazon SQS message attribute rules).
ATTR_PREFIX = "reminders."
ATTR_DUE_AT = "reminders.due-at"
ATTR_LETTER_ID = "reminders.dead-letter-id"
ATTR_SENT_AT = "reminders.sent-at"
ATTR_RECEIVES = "reminders.receive-count"
ATTR_RECORDED_AT = "reminders.recorded-at"

#: Most dead letters one scan reads.
DEAD_LETTER_SCAN_MAX = 10_000

_COUNTS: list[QueueAttributeNameType] = [
    "ApproximateNumberOfMessages",
    "ApproximateNumberOfMessagesNotVisible",
    "ApproximateNumberOfMessagesDelayed",
]
_STALE_HANDLE_CODES = frozenset(
    {
        "ReceiptHandleIsInvalid",
        "MessageNotInflight",
        "AWS.SimpleQueueService.MessageNotInflight",
        "InvalidParameterValue",  # AWS: "The receipt handle has expired", 12 h visibility limit
    }
)
_NO_QUEUE_CODES = frozenset({"QueueDoesNotExist", "AWS.SimpleQueueService.NonExistentQueue"})

_Entry = TypeVar(
    "_Entry",
    "SendMessageBatchRequestEntryTypeDef",
    "DeleteMessageBatchRequestEntryTypeDef",
    "ChangeMessageVisibilityBatchRequestEntryTypeDef",
)


# --- configuration -------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class SqsTarget:
    """Where an SQS queue is, as read from QUEUE_URL and the settings.

    Attributes:
        queue: the queue URL, or its name (then looked up with GetQueueUrl at first use).
        name: the queue name (the last segment of a URL).
        endpoint_url: the SQS endpoint to call (None: AWS's endpoint for the region).
        region: the AWS region (None: boto3's default chain, e.g. AWS_DEFAULT_REGION).
    """

    queue: str
    name: str
    endpoint_url: str | None
    region: str | None


def sqs_target(
    queue_url: str, *, endpoint_url: str | None = None, region: str | None = None
) -> SqsTarget | None:
    """Read an SQS queue from QUEUE_URL; None when it names no SQS queue.

    Accepted forms:
        - `sqs://<name>`: the queue of that name at SQS_ENDPOINT_URL, or at AWS in
          AWS_REGION.
        - `https://sqs.<region>.amazonaws.com/<account>/<name>`: an AWS queue URL; the
          region comes from the host unless AWS_REGION is set.
        - `http(s)://<host>[:port]/<account>/<name>`: a queue URL of a local
          SQS-compatible server; its origin is the endpoint unless SQS_ENDPOINT_URL is set.

    Raises:
        ValueError: an `sqs://` URL without a queue name, or a queue URL without a path.
    """
    scheme, _, rest = queue_url.partition("://")
    scheme = scheme.lower()
    if scheme == "sqs":
        name = rest.strip("/")
        if not name or "/" in name:
            raise ValueError(f"QUEUE_URL {queue_url!r}: expected sqs://<queue name>")
        return SqsTarget(queue=name, name=name, endpoint_url=endpoint_url, region=region)
    if scheme not in ("http", "https"):
        return None
    parts = urlsplit(queue_url)
    name = parts.path.rstrip("/").rpartition("/")[2]
    if not name or not parts.netloc:
        raise ValueError(f"QUEUE_URL {queue_url!r}: expected <endpoint>/<account>/<queue name>")
    host = parts.hostname or ""
    labels = host.split(".")
    if host.endswith(".amazonaws.com") and labels[0] == "sqs" and len(labels) >= 4:
        return SqsTarget(queue_url, name, endpoint_url, region or labels[1])
    return SqsTarget(queue_url, name, endpoint_url or f"{parts.scheme}://{parts.netloc}", region)


def sqs_client(target: SqsTarget, *, wait_time_s: int = 2) -> SQSClient:
    """Build a boto3 SQS client for `target` (credentials: boto3's default chain).

    botocore retries throttling, 5xx and connection errors (`standard` mode, 3 attempts);
    the read timeout leaves room for a long poll of `wait_time_s` seconds. A local
    endpoint with no region configured anywhere gets `us-east-1` (any region works there).

    Raises:
        InfrastructureError: no region is configured for AWS's endpoint.
    """
    session = boto3.session.Session()
    region = target.region or session.region_name
    if region is None and target.endpoint_url is not None:
        region = "us-east-1"
    config = Config(
        connect_timeout=5,
        read_timeout=wait_time_s + 15,
        retries={"mode": "standard", "max_attempts": 3},
    )
    with _aws("client setup (is AWS_REGION set?)"):
        return session.client(
            "sqs", endpoint_url=target.endpoint_url, region_name=region, config=config
        )


def ensure_queues(
    client: SQSClient,
    name: str,
    *,
    visibility_timeout_s: float,
    max_receive_count: int,
) -> tuple[str, str]:
    """Create, or bring up to date, the queue `name` and its dead-letter queue `<name>-dlq`.

    The DLQ keeps messages 14 days (the maximum; AWS advises a DLQ retention longer than
    the source queue's, 4 days by default). The queue gets VisibilityTimeout (rounded up to
    whole seconds) and a RedrivePolicy {deadLetterTargetArn: the DLQ, maxReceiveCount}.
    Idempotent: an existing queue keeps its messages and gets these attributes.

    Returns:
        (queue URL, dead-letter queue URL).

    Raises:
        InfrastructureError: SQS refused or could not be reached.
        ValueError: a value outside SQS's limits (VisibilityTimeout 0..43200 s,
            maxReceiveCount 1..1000).
    """
    if not 0 <= visibility_timeout_s <= MAX_VISIBILITY_TIMEOUT_S:
        raise ValueError(f"visibility timeout {visibility_timeout_s} s is outside 0..43200")
    if not 1 <= max_receive_count <= 1000:
        raise ValueError(f"maxReceiveCount {max_receive_count} is outside 1..1000")
    with _aws("queue creation"):
        dlq_url = _ensure_queue(
            client, f"{name}-dlq", {"MessageRetentionPeriod": str(DEAD_LETTER_RETENTION_S)}
        )
        dlq_arn = client.get_queue_attributes(QueueUrl=dlq_url, AttributeNames=["QueueArn"])[
            "Attributes"
        ]["QueueArn"]
        policy = {"deadLetterTargetArn": dlq_arn, "maxReceiveCount": max_receive_count}
        queue_url = _ensure_queue(
            client,
            name,
            {
                "VisibilityTimeout": str(math.ceil(visibility_timeout_s)),
                "RedrivePolicy": json.dumps(policy),
            },
        )
    return queue_url, dlq_url


def _ensure_queue(
    client: SQSClient, name: str, attributes: Mapping[QueueAttributeNameType, str]
) -> str:
    try:
        url = client.get_queue_url(QueueName=name)["QueueUrl"]
    except ClientError as exc:
        if _code(exc) not in _NO_QUEUE_CODES:
            raise
        # CreateQueue is idempotent for identical attributes, so two creators may race.
        return client.create_queue(QueueName=name, Attributes=attributes)["QueueUrl"]
    client.set_queue_attributes(QueueUrl=url, Attributes=attributes)
    return url


# --- the backend -----------------------------------------------------------------------


@dataclass(slots=True)
class _Letter:
    """A dead letter as one scan received it."""

    sqs_message_id: str
    letter_id: str
    receipt_handle: str
    raw_body: str
    sent_at_ms: int
    receive_count: int | None
    recorded_at: datetime | None

    def public(self, default_receive_count: int) -> DeadLetter:
        return DeadLetter(
            message_id=self.letter_id,
            body=_parse_body(self.raw_body),
            receive_count=self.receive_count or default_receive_count,
            dead_lettered_at=None,
            recorded_at=self.recorded_at,
        )


class _ServerFaults(Exception):
    """Entries of a batch call that failed on the SQS side (worth retrying)."""

    def __init__(self, failed: list[BatchResultErrorEntryTypeDef]) -> None:
        super().__init__(", ".join(f"{f['Id']}: {f['Code']}" for f in failed))
        self.failed = failed


class SqsQueue:
    """The `Queue` interface on an Amazon SQS standard queue with a redrive policy.

    See the module docstring for how each operation maps onto SQS. Safe to share between
    threads (the sender's heartbeat thread changes visibilities while it receives).

    Args:
        client: a boto3 SQS client (`sqs_client`).
        queue: the queue URL, or its name (looked up with GetQueueUrl at first use).
        wait_time_s: long-poll wait of a receive, 0..20 s (0: short polling, which on AWS
            samples only some servers and may miss messages).
        dead_letter_hold_s: seconds a DLQ scan hides each letter (> the scan's duration).
        batch_attempts: calls per batch for entries that fail on the server side.

    Raises (every method):
        InfrastructureError: SQS refused, could not be reached, or the queue has no
            RedrivePolicy (DLQ operations and `depth`).
    """

    def __init__(
        self,
        client: SQSClient,
        queue: str,
        *,
        wait_time_s: int = 2,
        dead_letter_hold_s: int = 30,
        batch_attempts: int = 3,
    ) -> None:
        if not 0 <= wait_time_s <= MAX_WAIT_TIME_S:
            raise ValueError(f"wait_time_s {wait_time_s} is outside 0..20")
        self._client = client
        self._queue = queue
        self.wait_time_s = wait_time_s
        self.dead_letter_hold_s = dead_letter_hold_s
        self.batch_attempts = batch_attempts
        self._lock = threading.Lock()
        self._queue_url: str | None = queue if "://" in queue else None
        self._dead_letter_queue: tuple[str, int] | None = None
        self._held: dict[str, _Letter] = {}

    # --- main queue ------------------------------------------------------------------

    def send_batch(
        self, bodies: Sequence[Mapping[str, Any]], *, now: datetime, delays_s: Sequence[float]
    ) -> None:
        """Send each body as JSON, 10 a call; body i is delayed `delays_s[i]` seconds
        (rounded up; over 900 s: see the module docstring).

        Raises:
            ValueError: `bodies` and `delays_s` differ in length.
            InfrastructureError: some entries could not be sent; others may have been.
        """
        if len(bodies) != len(delays_s):
            raise ValueError("bodies and delays_s must have the same length")
        entries = [
            _delayed_entry(str(i), json.dumps(dict(body)), delay_s=d, now=now)
            for i, (body, d) in enumerate(zip(bodies, delays_s, strict=True))
        ]
        self._send(self._url(), entries)

    def receive(
        self, *, now: datetime, max_messages: int, visibility_timeout_s: float
    ) -> list[Message]:
        """Receive up to `max_messages` messages, each hidden for `visibility_timeout_s`
        (rounded up to whole seconds); ordered by send time.

        ReceiveMessage returns at most 10 messages a call, so this calls again (without
        waiting) while calls come back full and more are wanted; the first call waits up
        to `wait_time_s` for a message. A message already received the redrive policy's
        maxReceiveCount times is moved to the DLQ by SQS instead of being returned. A
        message whose `reminders.due-at` is after `now` is delayed again, not returned.

        Raises:
            InfrastructureError: the first call failed (a later failure ends the
                gathering; what was received is returned).
        """
        if max_messages < 1:
            return []
        url = self._url()
        timeout_s = _whole_seconds(visibility_timeout_s, MAX_VISIBILITY_TIMEOUT_S)
        # By message id: a message visible again by the next call (a short timeout) is
        # kept once, with its newest receipt handle.
        received: dict[str, MessageTypeDef] = {}
        while len(received) < max_messages:
            wanted = min(max_messages - len(received), MAX_BATCH)
            try:
                with _aws("ReceiveMessage"):
                    messages = self._client.receive_message(
                        QueueUrl=url,
                        MaxNumberOfMessages=wanted,
                        VisibilityTimeout=timeout_s,
                        WaitTimeSeconds=0 if received else self.wait_time_s,
                        MessageSystemAttributeNames=["ApproximateReceiveCount", "SentTimestamp"],
                        MessageAttributeNames=[ATTR_DUE_AT],
                    ).get("Messages", [])
            except InfrastructureError:
                if not received:
                    raise
                log.warning("receive ended early", exc_info=True)
                break
            received.update((m["MessageId"], m) for m in messages)
            if len(messages) < wanted or timeout_s == 0:
                break  # timeout 0: the next call would get the same messages again
        ready: list[MessageTypeDef] = []
        early: list[tuple[MessageTypeDef, datetime]] = []
        for m in received.values():
            due = _attribute(m, ATTR_DUE_AT)
            due_at = datetime.fromisoformat(due) if due else None
            if due_at is not None and due_at > now:
                early.append((m, due_at))
            else:
                ready.append(m)
        if early:
            self._delay_again(url, early, now)
        ready.sort(key=_sent_at_ms)
        return [
            Message(
                message_id=m["MessageId"],
                body=_parse_body(m["Body"]),
                receipt_handle=m["ReceiptHandle"],
                receive_count=int(m.get("Attributes", {}).get("ApproximateReceiveCount", "1")),
            )
            for m in ready
        ]

    def delete(self, receipt_handles: Sequence[str]) -> None:
        """Delete received messages (DeleteMessageBatch, 10 a call). A handle SQS does not
        know is skipped; one from an earlier receive may or may not delete (AWS)."""
        self._delete(self._url(), receipt_handles)

    def change_visibility(
        self,
        receipt_handle: str,
        *,
        now: datetime,  # noqa: ARG002  # SQS keeps time on its own clock
        timeout_s: float,
    ) -> None:
        """Hide the message `timeout_s` seconds (rounded up) from this call on; 0 makes it
        visible now. `now` is not used (SQS's clock). A stale or expired handle, or a total
        visibility beyond SQS's 12 hours, changes nothing."""
        try:
            self._client.change_message_visibility(
                QueueUrl=self._url(),
                ReceiptHandle=receipt_handle,
                VisibilityTimeout=_whole_seconds(timeout_s, MAX_VISIBILITY_TIMEOUT_S),
            )
        except ClientError as exc:
            if _code(exc) not in _STALE_HANDLE_CODES:
                raise InfrastructureError(f"SQS ChangeMessageVisibility failed: {exc}") from exc
            log.debug("visibility not changed (%s): %s", _code(exc), exc)
        except BotoCoreError as exc:
            raise InfrastructureError(f"SQS ChangeMessageVisibility failed: {exc}") from exc

    def change_visibility_batch(
        self,
        changes: Sequence[tuple[str, float]],
        *,
        now: datetime,  # noqa: ARG002  # SQS keeps time on its own clock
    ) -> None:
        """`change_visibility` for many (handle, seconds) pairs: ChangeMessageVisibilityBatch,
        10 a call. Stale handles change nothing."""
        self._change_visibilities(self._url(), changes)

    def depth(self, *, now: datetime) -> QueueDepth:  # noqa: ARG002  # SQS counts now
        """Approximate counts from GetQueueAttributes (AWS: eventually consistent, about a
        minute): visible; in flight plus delayed; every message of the DLQ, and those of
        them a reader holds (the DLQ's ApproximateNumberOfMessagesNotVisible)."""
        main = self._counts(self._url())
        dead = self._counts(self._dlq()[0])
        return QueueDepth(
            visible=main["ApproximateNumberOfMessages"],
            not_visible=main["ApproximateNumberOfMessagesNotVisible"]
            + main["ApproximateNumberOfMessagesDelayed"],
            dead_lettered=sum(dead.values()),
            dead_lettered_held=dead["ApproximateNumberOfMessagesNotVisible"],
        )

    # --- dead-letter queue -------------------------------------------------------------

    def dead_letters(self, *, limit: int, unrecorded_only: bool = False) -> list[DeadLetter]:
        """Up to `limit` letters, by original send time. Scans the whole DLQ (at most
        10,000 letters). With `unrecorded_only`, the letters returned stay hidden for
        `dead_letter_hold_s` (held for `mark_dead_letters_recorded`); otherwise every
        letter is visible again when this returns."""
        dlq_url, max_receives = self._dlq()
        if unrecorded_only and not sum(self._counts(dlq_url).values()):
            return []  # the usual case, without waiting out a long poll
        letters = self._scan(dlq_url)
        if unrecorded_only:
            chosen = [letter for letter in letters if letter.recorded_at is None][:limit]
            with self._lock:
                self._held.update({letter.letter_id: letter for letter in chosen})
            kept = {letter.letter_id for letter in chosen}
            self._release(dlq_url, [le for le in letters if le.letter_id not in kept])
        else:
            chosen = letters[:limit]
            self._release(dlq_url, letters)
        return [letter.public(max_receives) for letter in chosen]

    def mark_dead_letters_recorded(self, message_ids: Sequence[str], *, now: datetime) -> None:
        """Replace each letter by a copy carrying `reminders.recorded-at` = `now` (same id);
        then make the other letters this instance holds visible again."""
        dlq_url, max_receives = self._dlq()
        letters = self._take(dlq_url, message_ids) if message_ids else []
        recorded = _text_attribute(now.astimezone(UTC).isoformat())
        entries: list[SendMessageBatchRequestEntryTypeDef] = [
            {
                "Id": str(i),
                "MessageBody": letter.raw_body,
                "MessageAttributes": {
                    ATTR_LETTER_ID: _text_attribute(letter.letter_id),
                    ATTR_SENT_AT: _number_attribute(letter.sent_at_ms),
                    ATTR_RECEIVES: _number_attribute(letter.receive_count or max_receives),
                    ATTR_RECORDED_AT: recorded,
                },
            }
            for i, letter in enumerate(letters)
        ]
        self._send(dlq_url, entries)
        self._delete(dlq_url, [letter.receipt_handle for letter in letters])
        with self._lock:
            held, self._held = list(self._held.values()), {}
        self._release(dlq_url, held)

    def redrive(
        self,
        message_ids: Sequence[str],
        *,
        now: datetime,  # noqa: ARG002  # visible at once by SQS's clock
    ) -> list[str]:
        """Send these letters' bodies, marked as a replay (`messages.as_replay`), to the
        queue (visible at once), then delete them from the DLQ; returns the ids found and
        moved (a letter another reader holds is not found)."""
        if not message_ids:
            return []
        dlq_url, _ = self._dlq()
        letters = self._take(dlq_url, message_ids)
        entries: list[SendMessageBatchRequestEntryTypeDef] = [
            {"Id": str(i), "MessageBody": json.dumps(as_replay(_parse_body(letter.raw_body)))}
            for i, letter in enumerate(letters)
        ]
        self._send(self._url(), entries)
        self._delete(dlq_url, [letter.receipt_handle for letter in letters])
        return [letter.letter_id for letter in letters]

    def delete_dead_letters(self, message_ids: Sequence[str] | None) -> list[str]:
        """Delete these letters (None: every letter a scan finds); returns their ids."""
        dlq_url, _ = self._dlq()
        if message_ids is None:
            with self._lock:
                letters, self._held = list(self._held.values()), {}
            letters += self._scan(dlq_url)
        elif not message_ids:
            return []
        else:
            letters = self._take(dlq_url, message_ids)
        self._delete(dlq_url, [letter.receipt_handle for letter in letters])
        return [letter.letter_id for letter in letters]

    # --- start --------------------------------------------------------------------------

    def check(self) -> None:
        """Check once, at start, that the queue can be used: it exists (GetQueueUrl for a
        name, GetQueueAttributes for a URL), it has a RedrivePolicy, and its dead-letter
        queue exists. Caches what it learns (the URLs) for the later calls.

        Raises:
            QueueNotFound: SQS says the queue or its dead-letter queue does not exist.
            InfrastructureError: SQS could not be reached or refused the calls, or the
                queue has no RedrivePolicy.
        """
        self._dlq()

    # --- internals ---------------------------------------------------------------------

    def _url(self) -> str:
        if self._queue_url is None:
            with _aws("GetQueueUrl"):
                url = self._client.get_queue_url(QueueName=self._queue)["QueueUrl"]
            self._queue_url = url
        return self._queue_url

    def _dlq(self) -> tuple[str, int]:
        """(DLQ URL, maxReceiveCount) from the queue's RedrivePolicy, read once."""
        if self._dead_letter_queue is None:
            url = self._url()
            with _aws("GetQueueAttributes"):
                attributes = self._client.get_queue_attributes(
                    QueueUrl=url, AttributeNames=["RedrivePolicy"]
                ).get("Attributes", {})
            if "RedrivePolicy" not in attributes:
                raise InfrastructureError(
                    f"SQS queue {url} has no RedrivePolicy, so nothing is ever dead-lettered;"
                    " run `reminders queue create` or attach a dead-letter queue"
                )
            policy = json.loads(attributes["RedrivePolicy"])
            # arn:aws:sqs:<region>:<account>:<name>; a DLQ is in the queue's region.
            account, name = str(policy["deadLetterTargetArn"]).split(":")[4:6]
            with _aws("GetQueueUrl"):
                dlq_url = self._client.get_queue_url(
                    QueueName=name, QueueOwnerAWSAccountId=account
                )["QueueUrl"]
            self._dead_letter_queue = (dlq_url, int(policy["maxReceiveCount"]))
        return self._dead_letter_queue

    def _counts(self, url: str) -> dict[str, int]:
        with _aws("GetQueueAttributes"):
            attributes = self._client.get_queue_attributes(
                QueueUrl=url, AttributeNames=_COUNTS
            ).get("Attributes", {})
        return {name: int(attributes.get(name, "0")) for name in _COUNTS}

    def _delay_again(
        self, url: str, early: list[tuple[MessageTypeDef, datetime]], now: datetime
    ) -> None:
        """Send early copies again with the remaining delay, then delete them."""
        entries = [
            _delayed_entry(str(i), m["Body"], delay_s=(due_at - now).total_seconds(), now=now)
            for i, (m, due_at) in enumerate(early)
        ]
        try:
            self._send(url, entries)
            self._delete(url, [m["ReceiptHandle"] for m, _ in early])
        except InfrastructureError:
            log.warning("could not delay %d early messages again; they come back", len(early))

    def _scan(self, dlq_url: str) -> list[_Letter]:
        """Receive every letter (hidden `dead_letter_hold_s`), oldest first, one per id."""
        letters: dict[str, _Letter] = {}
        extra: list[_Letter] = []
        for _ in range(DEAD_LETTER_SCAN_MAX // MAX_BATCH):
            with _aws("ReceiveMessage (dead-letter queue)"):
                messages = self._client.receive_message(
                    QueueUrl=dlq_url,
                    MaxNumberOfMessages=MAX_BATCH,
                    VisibilityTimeout=self.dead_letter_hold_s,
                    WaitTimeSeconds=min(self.wait_time_s, 1),
                    MessageSystemAttributeNames=["SentTimestamp"],
                    MessageAttributeNames=[ATTR_PREFIX + "*"],
                ).get("Messages", [])
            if not messages:
                break
            for m in messages:
                letter = _letter(m)
                seen = letters.get(letter.letter_id)
                if seen is None or seen.sqs_message_id == letter.sqs_message_id:
                    letters[letter.letter_id] = letter  # a newer receive: a newer handle
                elif seen.recorded_at is None and letter.recorded_at is not None:
                    letters[letter.letter_id] = letter
                    extra.append(seen)
                else:
                    extra.append(letter)
        if extra:
            log.info("deleting %d duplicate dead letters", len(extra))
            self._delete(dlq_url, [letter.receipt_handle for letter in extra])
        return sorted(letters.values(), key=lambda le: (le.sent_at_ms, le.letter_id))

    def _take(self, dlq_url: str, message_ids: Sequence[str]) -> list[_Letter]:
        """The letters with these ids, held: from this instance's holds, else a scan."""
        wanted = set(message_ids)
        with self._lock:
            found = {i: self._held.pop(i) for i in wanted if i in self._held}
        if wanted - found.keys():
            others = []
            for letter in self._scan(dlq_url):
                if letter.letter_id in wanted and letter.letter_id not in found:
                    found[letter.letter_id] = letter
                else:
                    others.append(letter)
            self._release(dlq_url, others)
        return list(found.values())

    def _release(self, dlq_url: str, letters: Sequence[_Letter]) -> None:
        self._change_visibilities(dlq_url, [(letter.receipt_handle, 0) for letter in letters])

    def _send(self, url: str, entries: Sequence[SendMessageBatchRequestEntryTypeDef]) -> None:
        refused = self._batch(
            "SendMessageBatch",
            lambda chunk: self._client.send_message_batch(QueueUrl=url, Entries=chunk).get(
                "Failed", []
            ),
            entries,
        )
        if refused:
            details = "; ".join(f"{f['Code']}: {f.get('Message', '')}" for f in refused)
            raise InfrastructureError(f"SQS refused {len(refused)} messages: {details}")

    def _delete(self, url: str, receipt_handles: Sequence[str]) -> None:
        entries: list[DeleteMessageBatchRequestEntryTypeDef] = [
            {"Id": str(i), "ReceiptHandle": h} for i, h in enumerate(receipt_handles)
        ]
        stale = self._batch(
            "DeleteMessageBatch",
            lambda chunk: self._client.delete_message_batch(QueueUrl=url, Entries=chunk).get(
                "Failed", []
            ),
            entries,
        )
        for f in stale:
            log.debug("not deleted (%s): %s", f["Code"], f.get("Message", ""))

    def _change_visibilities(self, url: str, changes: Sequence[tuple[str, float]]) -> None:
        entries: list[ChangeMessageVisibilityBatchRequestEntryTypeDef] = [
            {
                "Id": str(i),
                "ReceiptHandle": h,
                "VisibilityTimeout": _whole_seconds(t, MAX_VISIBILITY_TIMEOUT_S),
            }
            for i, (h, t) in enumerate(changes)
        ]
        stale = self._batch(
            "ChangeMessageVisibilityBatch",
            lambda chunk: self._client.change_message_visibility_batch(
                QueueUrl=url, Entries=chunk
            ).get("Failed", []),
            entries,
        )
        for f in stale:
            log.debug("visibility not changed (%s): %s", f["Code"], f.get("Message", ""))

    def _batch(
        self,
        operation: str,
        call: Callable[[list[_Entry]], list[BatchResultErrorEntryTypeDef]],
        entries: Sequence[_Entry],
    ) -> list[BatchResultErrorEntryTypeDef]:
        """Call a *Batch operation 10 entries at a time. Entries that failed on the server
        side are retried (`batch_attempts` calls in all, jittered backoff); returns the
        entries refused as the sender's fault.

        Raises:
            InfrastructureError: a call failed, or entries still failed on the server side.
        """
        refused: list[BatchResultErrorEntryTypeDef] = []
        for start in range(0, len(entries), MAX_BATCH):
            pending = list(entries[start : start + MAX_BATCH])
            retrying = Retrying(
                stop=stop_after_attempt(self.batch_attempts),
                wait=wait_random_exponential(multiplier=0.1, max=2),
                retry=retry_if_exception_type(_ServerFaults),
                reraise=True,
            )
            try:
                for attempt in retrying:
                    with attempt, _aws(operation):
                        by_id = {entry["Id"]: entry for entry in pending}
                        failed = call(pending)
                        refused += [f for f in failed if f["SenderFault"]]
                        retry = [f for f in failed if not f["SenderFault"]]
                        pending = [by_id[f["Id"]] for f in retry]
                        if retry:
                            raise _ServerFaults(retry)
            except _ServerFaults as exc:
                raise InfrastructureError(
                    f"SQS {operation}: entries still failing after "
                    f"{self.batch_attempts} calls ({exc})"
                ) from exc
        return refused


# --- helpers ---------------------------------------------------------------------------


@contextmanager
def _aws(what: str) -> Iterator[None]:
    """Map botocore's errors to InfrastructureError (QueueNotFound for a queue SQS says
    does not exist)."""
    try:
        yield
    except ClientError as exc:
        if _code(exc) in _NO_QUEUE_CODES:
            raise QueueNotFound(f"SQS {what}: no such queue ({_code(exc)})") from exc
        raise InfrastructureError(f"SQS {what} failed: {exc}") from exc
    except BotoCoreError as exc:
        raise InfrastructureError(f"SQS {what} failed: {exc}") from exc


def _code(exc: ClientError) -> str:
    return str(exc.response.get("Error", {}).get("Code", ""))


def _whole_seconds(seconds: float, limit: int) -> int:
    """Seconds rounded up to an integer within 0..limit."""
    return min(limit, max(0, math.ceil(seconds)))


def _delayed_entry(
    entry_id: str, body: str, *, delay_s: float, now: datetime
) -> SendMessageBatchRequestEntryTypeDef:
    """A send entry delayed `delay_s` seconds, rounded up; over 900 s, delayed 900 s and
    carrying `reminders.due-at` = `now` + `delay_s`."""
    entry: SendMessageBatchRequestEntryTypeDef = {
        "Id": entry_id,
        "MessageBody": body,
        "DelaySeconds": _whole_seconds(delay_s, MAX_DELAY_S),
    }
    if math.ceil(delay_s) > MAX_DELAY_S:
        due_at = (now + timedelta(seconds=delay_s)).astimezone(UTC)
        entry["MessageAttributes"] = {ATTR_DUE_AT: _text_attribute(due_at.isoformat())}
    return entry


def _text_attribute(value: str) -> MessageAttributeValueTypeDef:
    return {"DataType": "String", "StringValue": value}


def _number_attribute(value: int) -> MessageAttributeValueTypeDef:
    return {"DataType": "Number", "StringValue": str(value)}


def _attribute(message: MessageTypeDef, name: str) -> str | None:
    value = message.get("MessageAttributes", {}).get(name)
    return value.get("StringValue") if value else None


def _sent_at_ms(message: MessageTypeDef) -> int:
    return int(message.get("Attributes", {}).get("SentTimestamp", "0"))


def _parse_body(raw: str) -> dict[str, Any]:
    """The JSON object sent; anything else is kept under "unparsable_body" (the sender
    then treats the message as malformed)."""
    try:
        body = json.loads(raw)
    except ValueError:
        body = None
    return body if isinstance(body, dict) else {"unparsable_body": raw}


def _letter(message: MessageTypeDef) -> _Letter:
    receives = _attribute(message, ATTR_RECEIVES)
    sent_at = _attribute(message, ATTR_SENT_AT)
    recorded_at = _attribute(message, ATTR_RECORDED_AT)
    return _Letter(
        sqs_message_id=message["MessageId"],
        letter_id=_attribute(message, ATTR_LETTER_ID) or message["MessageId"],
        receipt_handle=message["ReceiptHandle"],
        raw_body=message["Body"],
        sent_at_ms=int(sent_at) if sent_at else _sent_at_ms(message),
        receive_count=int(receives) if receives else None,
        recorded_at=datetime.fromisoformat(recorded_at) if recorded_at else None,
    )
