"""What only the SQS backend has: long polling, delays past SQS's 900 s cap, partial batch
failures, dead-letter holds and copies, configuration, and `reminders queue create`.

Against a local moto server over HTTP. Faults SQS cannot be asked to produce (one entry
of a batch failing) are injected in botocore's documented event hooks: the request still
goes to the server, minus the entry said to have failed.
"""

from __future__ import annotations

import json
import time
import uuid
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from typing import Any

import boto3
import pytest
from botocore.exceptions import ClientError
from sqlalchemy import Engine
from typer.testing import CliRunner

from reminder_core.clock import utcnow
from reminder_core.errors import InfrastructureError
from reminder_core.queue import PostgresQueue, open_queue
from reminder_core.queue.sqs import SqsQueue, ensure_queues, sqs_target
from reminders.cli import app
from tests.support.moto import CREDENTIALS, REGION

MAX_RECEIVES = 3


@pytest.fixture
def client(moto_endpoint: str) -> Any:
    return boto3.client("sqs", endpoint_url=moto_endpoint, region_name=REGION, **CREDENTIALS)


@pytest.fixture
def queues(client: Any) -> Iterator[tuple[str, str]]:
    """A fresh queue and its DLQ (maxReceiveCount 3); deleted afterwards."""
    urls = ensure_queues(
        client,
        f"sqs-{uuid.uuid4().hex[:12]}",
        visibility_timeout_s=30,
        max_receive_count=MAX_RECEIVES,
    )
    yield urls
    for url in urls:
        client.delete_queue(QueueUrl=url)


@pytest.fixture
def queue(client: Any, queues: tuple[str, str]) -> SqsQueue:
    return SqsQueue(client, queues[0], wait_time_s=0, batch_attempts=2)


def counts(client: Any, url: str) -> tuple[int, int, int]:
    """(visible, in flight, delayed) as SQS reports them."""
    a = client.get_queue_attributes(QueueUrl=url, AttributeNames=["All"])["Attributes"]
    return (
        int(a["ApproximateNumberOfMessages"]),
        int(a["ApproximateNumberOfMessagesNotVisible"]),
        int(a["ApproximateNumberOfMessagesDelayed"]),
    )


def test_long_poll_returns_a_message_that_becomes_visible_during_the_wait(
    client: Any, queues: tuple[str, str]
) -> None:
    short = SqsQueue(client, queues[0], wait_time_s=0)
    long = SqsQueue(client, queues[0], wait_time_s=3)
    short.send_batch([{"n": 1}], now=utcnow(), delays_s=[1])
    assert short.receive(now=utcnow(), max_messages=10, visibility_timeout_s=30) == []
    got = long.receive(now=utcnow(), max_messages=10, visibility_timeout_s=30)
    assert [m.body for m in got] == [{"n": 1}]


def test_a_receive_of_more_than_ten_makes_several_calls(client: Any, queue: SqsQueue) -> None:
    calls = []
    client.meta.events.register(
        "provide-client-params.sqs.ReceiveMessage", lambda params, **_: calls.append(params)
    )
    queue.send_batch([{"n": i} for i in range(23)], now=utcnow(), delays_s=[0] * 23)
    got = queue.receive(now=utcnow(), max_messages=25, visibility_timeout_s=30)
    # moto returns every visible message asked for: 10, 10, then 3 (fewer: the last call).
    assert [c["MaxNumberOfMessages"] for c in calls] == [10, 10, 5]
    assert sorted(m.body["n"] for m in got) == list(range(23))


@pytest.mark.timeout(30)
def test_a_receive_with_visibility_timeout_zero_receives_each_message_once(
    queue: SqsQueue,
) -> None:
    queue.send_batch([{"n": i} for i in range(12)], now=utcnow(), delays_s=[0] * 12)
    first = queue.receive(now=utcnow(), max_messages=25, visibility_timeout_s=0)
    assert {m.receive_count for m in first} == {1}
    # Visible again at once: a second call would have received the same ones again.
    again = queue.receive(now=utcnow(), max_messages=25, visibility_timeout_s=30)
    counts = {m.body["n"]: m.receive_count for m in again}
    assert sorted(counts) == list(range(12))
    assert {counts[m.body["n"]] for m in first} == {2}


def test_a_fractional_delay_is_rounded_up_never_early(client: Any, queue: SqsQueue) -> None:
    sent = []
    client.meta.events.register(
        "provide-client-params.sqs.SendMessageBatch", lambda params, **_: sent.append(params)
    )
    queue.send_batch([{"n": 1}, {"n": 2}], now=utcnow(), delays_s=[0.2, 0])
    assert [e["DelaySeconds"] for e in sent[0]["Entries"]] == [1, 0]
    assert queue.receive(now=utcnow(), max_messages=10, visibility_timeout_s=30)[0].body == {"n": 2}


def test_a_delay_past_900_s_is_capped_and_carries_its_due_time(
    client: Any, queue: SqsQueue, queues: tuple[str, str]
) -> None:
    sent = []
    client.meta.events.register(
        "provide-client-params.sqs.SendMessageBatch", lambda params, **_: sent.append(params)
    )
    now = utcnow()
    queue.send_batch([{"n": 1}], now=now, delays_s=[1000])
    (entry,) = sent[0]["Entries"]
    assert entry["DelaySeconds"] == 900  # SQS's maximum DelaySeconds
    due = entry["MessageAttributes"]["reminders.due-at"]["StringValue"]
    assert datetime.fromisoformat(due) == now + timedelta(seconds=1000)
    assert counts(client, queues[0]) == (0, 0, 1)


def test_a_message_received_before_its_due_time_is_delayed_again_uncounted(
    client: Any, queue: SqsQueue, queues: tuple[str, str]
) -> None:
    # As a message capped at 900 s is when the 900 s are over: still before its due time.
    def send_due(n: int, due: datetime) -> None:
        client.send_message(
            QueueUrl=queues[0],
            MessageBody=json.dumps({"n": n}),
            MessageAttributes={
                "reminders.due-at": {"DataType": "String", "StringValue": due.isoformat()}
            },
        )

    now = utcnow()
    send_due(1, now + timedelta(seconds=2))
    send_due(2, now + timedelta(seconds=5000))
    send_due(3, now - timedelta(seconds=1))
    got = queue.receive(now=now, max_messages=10, visibility_timeout_s=30)
    assert [m.body for m in got] == [{"n": 3}]
    assert counts(client, queues[0]) == (0, 1, 2)  # 3 in flight, 1 and 2 delayed again
    time.sleep(2.5)
    (back,) = queue.receive(now=utcnow(), max_messages=10, visibility_timeout_s=30)
    assert back.body == {"n": 1}
    assert back.receive_count == 1  # the early receive does not count toward the DLQ


def test_only_the_entries_that_failed_on_the_server_are_sent_again(
    client: Any, queue: SqsQueue
) -> None:
    calls: list[list[str]] = []
    failed_once: set[str] = set()

    def drop(params: dict[str, Any], **_: Any) -> None:
        calls.append([e["Id"] for e in params["Entries"]])
        if "3" in calls[-1] and "3" not in failed_once:
            params["Entries"] = [e for e in params["Entries"] if e["Id"] != "3"]

    def report(parsed: dict[str, Any], **_: Any) -> None:
        if "3" in calls[-1] and "3" not in failed_once:
            failed_once.add("3")
            parsed.setdefault("Failed", []).append(
                {"Id": "3", "SenderFault": False, "Code": "InternalError", "Message": "oops"}
            )

    client.meta.events.register("provide-client-params.sqs.SendMessageBatch", drop)
    client.meta.events.register("after-call.sqs.SendMessageBatch", report)
    queue.send_batch([{"n": i} for i in range(12)], now=utcnow(), delays_s=[0] * 12)
    assert calls == [[str(i) for i in range(10)], ["3"], ["10", "11"]]
    received = []
    for _ in range(5):
        received += queue.receive(now=utcnow(), max_messages=10, visibility_timeout_s=30)
    assert sorted(m.body["n"] for m in received) == list(range(12))


def test_a_batch_entry_that_keeps_failing_raises(client: Any, queue: SqsQueue) -> None:
    def report(parsed: dict[str, Any], **_: Any) -> None:
        parsed.setdefault("Failed", []).append(
            {"Id": "0", "SenderFault": False, "Code": "ServiceUnavailable"}
        )

    client.meta.events.register("after-call.sqs.SendMessageBatch", report)
    with pytest.raises(InfrastructureError, match="ServiceUnavailable"):
        queue.send_batch([{"n": 1}], now=utcnow(), delays_s=[0])


def test_a_batch_entry_refused_as_the_senders_fault_raises(client: Any, queue: SqsQueue) -> None:
    def report(parsed: dict[str, Any], **_: Any) -> None:
        parsed["Failed"] = [{"Id": "1", "SenderFault": True, "Code": "InvalidMessageContents"}]

    client.meta.events.register("after-call.sqs.SendMessageBatch", report)
    with pytest.raises(InfrastructureError, match="InvalidMessageContents"):
        queue.send_batch([{"n": 1}, {"n": 2}], now=utcnow(), delays_s=[0, 0])


def test_errors_of_botocore_become_infrastructure_errors(client: Any, moto_endpoint: str) -> None:
    missing = SqsQueue(client, f"{moto_endpoint}/123456789012/no-such-queue", wait_time_s=0)
    with pytest.raises(InfrastructureError):
        missing.send_batch([{"n": 1}], now=utcnow(), delays_s=[0])
    with pytest.raises(InfrastructureError):
        missing.receive(now=utcnow(), max_messages=1, visibility_timeout_s=1)
    with pytest.raises(InfrastructureError):
        SqsQueue(client, "no-such-queue").depth(now=utcnow())


def test_a_queue_without_redrive_policy_is_refused_for_dead_letter_work(client: Any) -> None:
    url = client.create_queue(QueueName=f"plain-{uuid.uuid4().hex[:12]}")["QueueUrl"]
    try:
        with pytest.raises(InfrastructureError, match="RedrivePolicy"):
            SqsQueue(client, url, wait_time_s=0).depth(now=utcnow())
    finally:
        client.delete_queue(QueueUrl=url)


def dead_letter(queue: SqsQueue, n: int, bodies: list[dict[str, Any]] | None = None) -> None:
    """Send `bodies` (default: n bodies {"n": i}) and receive them until SQS moves them to
    the DLQ (maxReceiveCount receives, then the one that finds the count reached)."""
    bodies = [{"n": i} for i in range(n)] if bodies is None else bodies
    queue.send_batch(bodies, now=utcnow(), delays_s=[0] * len(bodies))
    for _ in range(MAX_RECEIVES + 1):
        queue.receive(now=utcnow(), max_messages=10, visibility_timeout_s=0)
    assert queue.depth(now=utcnow()).dead_lettered == len(bodies)


def test_unrecorded_dead_letters_are_held_from_another_worker(
    client: Any, queue: SqsQueue, queues: tuple[str, str]
) -> None:
    dead_letter(queue, 2)
    other = SqsQueue(client, queues[0], wait_time_s=0)
    mine = queue.dead_letters(limit=10, unrecorded_only=True)
    assert len(mine) == 2
    assert other.dead_letters(limit=10, unrecorded_only=True) == []
    queue.mark_dead_letters_recorded([mine[0].message_id], now=utcnow())
    # The letter not recorded (say, under a live lease) is free again for the next tick.
    assert [d.message_id for d in other.dead_letters(limit=10, unrecorded_only=True)] == [
        mine[1].message_id
    ]


def test_a_crash_while_recording_leaves_no_duplicate_letter(
    client: Any, queues: tuple[str, str]
) -> None:
    queue = SqsQueue(client, queues[0], wait_time_s=0, dead_letter_hold_s=1)
    dead_letter(queue, 1)
    (letter,) = queue.dead_letters(limit=10, unrecorded_only=True)

    def crash(**_: Any) -> None:
        raise ClientError({"Error": {"Code": "InternalError", "Message": "crash"}}, "Delete")

    client.meta.events.register("before-call.sqs.DeleteMessageBatch", crash)
    now = utcnow()
    with pytest.raises(InfrastructureError):
        queue.mark_dead_letters_recorded([letter.message_id], now=now)
    client.meta.events.unregister("before-call.sqs.DeleteMessageBatch", crash)
    assert queue.depth(now=utcnow()).dead_lettered == 2  # the copy was sent, not the delete
    time.sleep(1.5)  # the original's hold ends
    (listed,) = SqsQueue(client, queues[0], wait_time_s=0).dead_letters(limit=10)
    assert (listed.message_id, listed.recorded_at) == (letter.message_id, now)
    assert queue.depth(now=utcnow()).dead_lettered == 1


def test_queue_url_forms(engine: Engine, moto_endpoint: str) -> None:
    assert isinstance(
        open_queue("postgres://reminders", engine, max_receive_count=5), PostgresQueue
    )
    aws = sqs_target("https://sqs.eu-west-1.amazonaws.com/123456789012/reminders")
    assert aws is not None
    assert (aws.name, aws.region, aws.endpoint_url) == ("reminders", "eu-west-1", None)
    local = sqs_target(f"{moto_endpoint}/123456789012/reminders")
    assert local is not None
    assert (local.name, local.endpoint_url) == ("reminders", moto_endpoint)
    by_name = sqs_target("sqs://reminders", endpoint_url=moto_endpoint, region="eu-west-3")
    assert by_name is not None
    assert (by_name.queue, by_name.endpoint_url, by_name.region) == (
        "reminders",
        moto_endpoint,
        "eu-west-3",
    )
    for bad in ("sqs://", "redis://x", "https://sqs.example.com"):
        with pytest.raises(ValueError, match="QUEUE_URL"):
            open_queue(bad, engine, max_receive_count=5)


def test_open_queue_by_name_talks_to_the_configured_endpoint(
    engine: Engine, moto_endpoint: str, client: Any, queues: tuple[str, str], monkeypatch: Any
) -> None:
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", CREDENTIALS["aws_access_key_id"])
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", CREDENTIALS["aws_secret_access_key"])
    name = queues[0].rsplit("/", 1)[1]
    q = open_queue(
        f"sqs://{name}",
        engine,
        max_receive_count=5,
        sqs_endpoint_url=moto_endpoint,
        aws_region=REGION,
        sqs_wait_time_s=0,
    )
    q.send_batch([{"n": 1}], now=utcnow(), delays_s=[0])
    (m,) = client.receive_message(QueueUrl=queues[0])["Messages"]
    assert json.loads(m["Body"]) == {"n": 1}


def test_queue_create_provisions_the_queue_and_its_dlq_idempotently(
    client: Any, moto_endpoint: str
) -> None:
    name = f"created-{uuid.uuid4().hex[:12]}"
    env = {
        "QUEUE_URL": f"sqs://{name}",
        "SQS_ENDPOINT_URL": moto_endpoint,
        "AWS_REGION": REGION,
        "AWS_ACCESS_KEY_ID": CREDENTIALS["aws_access_key_id"],
        "AWS_SECRET_ACCESS_KEY": CREDENTIALS["aws_secret_access_key"],
        "VISIBILITY_TIMEOUT_S": "45",
        "MAX_RECEIVE_COUNT": "4",
    }
    runner = CliRunner()
    first = runner.invoke(app, ["queue", "create"], env=env)
    assert first.exit_code == 0, first.output
    again = runner.invoke(app, ["queue", "create"], env=env | {"MAX_RECEIVE_COUNT": "6"})
    assert again.exit_code == 0, again.output
    assert again.stdout == first.stdout  # the same two URLs
    queue_url = client.get_queue_url(QueueName=name)["QueueUrl"]
    dlq_url = client.get_queue_url(QueueName=f"{name}-dlq")["QueueUrl"]
    assert first.stdout == f"queue: {queue_url}\ndead-letter queue: {dlq_url}\n"
    attributes = client.get_queue_attributes(QueueUrl=queue_url, AttributeNames=["All"])[
        "Attributes"
    ]
    dlq_arn = client.get_queue_attributes(QueueUrl=dlq_url, AttributeNames=["QueueArn"])[
        "Attributes"
    ]["QueueArn"]
    assert attributes["VisibilityTimeout"] == "45"
    assert json.loads(attributes["RedrivePolicy"]) == {
        "deadLetterTargetArn": dlq_arn,
        "maxReceiveCount": 6,
    }
    retention = client.get_queue_attributes(
        QueueUrl=dlq_url, AttributeNames=["MessageRetentionPeriod"]
    )["Attributes"]["MessageRetentionPeriod"]
    assert retention == str(14 * 24 * 3600)  # SQS's maximum
    for url in (queue_url, dlq_url):
        client.delete_queue(QueueUrl=url)


def test_queue_create_with_the_postgres_queue_creates_nothing() -> None:
    result = CliRunner().invoke(app, ["queue", "create"], env={"QUEUE_URL": "postgres://r"})
    assert result.exit_code == 0
    assert "nothing to create" in result.output


def test_dead_letters_keep_their_send_order_when_recorded(queue: SqsQueue) -> None:
    for n in range(3):  # SentTimestamp is in milliseconds
        queue.send_batch([{"n": n}], now=utcnow(), delays_s=[0])
        time.sleep(0.01)
    for _ in range(MAX_RECEIVES + 1):
        queue.receive(now=datetime.now(UTC), max_messages=10, visibility_timeout_s=0)
    letters = queue.dead_letters(limit=10, unrecorded_only=True)
    assert [d.body["n"] for d in letters] == [0, 1, 2]
    # Recording replaces the oldest by a copy sent last; it still comes first.
    queue.mark_dead_letters_recorded([letters[0].message_id], now=utcnow())
    assert [d.body["n"] for d in queue.dead_letters(limit=10)] == [0, 1, 2]
    assert [d.body["n"] for d in queue.dead_letters(limit=1)] == [0]


@pytest.fixture
def cli_env(queues: tuple[str, str], moto_endpoint: str, database_url: str) -> dict[str, str]:
    """The environment of a `reminders` command run against `queues`."""
    return {
        "DATABASE_URL": database_url,
        "QUEUE_URL": queues[0],
        "SQS_ENDPOINT_URL": moto_endpoint,
        "SQS_WAIT_TIME_S": "0",
        "AWS_REGION": REGION,
        "AWS_ACCESS_KEY_ID": CREDENTIALS["aws_access_key_id"],
        "AWS_SECRET_ACCESS_KEY": CREDENTIALS["aws_secret_access_key"],
        "COLUMNS": "80",  # what the new-user trial had, ids cut to "556bd5f4-d…"
    }


def test_dlq_list_prints_whole_ids_and_says_when_a_scan_missed_held_letters(
    queue: SqsQueue, cli_env: dict[str, str]
) -> None:
    env = cli_env
    reminder_id = str(uuid.uuid4())
    body = {"reminder_id": reminder_id, "run_time_utc": "2030-01-01T09:00:00+00:00"}
    dead_letter(queue, 1, [body])
    runner = CliRunner()
    listed = runner.invoke(app, ["dlq", "list", "--json"], env=env)
    assert listed.exit_code == 0, listed.output
    (letter,) = json.loads(listed.stdout)
    assert (letter["reminder_id"], letter["receive_count"]) == (reminder_id, MAX_RECEIVES)
    table = runner.invoke(app, ["dlq", "list"], env=env)
    assert table.exit_code == 0, table.output
    assert letter["id"] in table.stdout
    assert reminder_id in table.stdout
    assert table.stderr == ""

    # The maintenance workload's scan holds the letter for 30 s (docs/configuration.md,
    # "Point it at SQS").
    assert len(queue.dead_letters(limit=10, unrecorded_only=True)) == 1
    missed = runner.invoke(app, ["dlq", "list", "--json"], env=env)

    assert missed.exit_code == 0, missed.output
    assert json.loads(missed.stdout) == []
    assert missed.stderr.startswith("note: the dead-letter queue counts about 1 message(s)")


def occurrence() -> dict[str, Any]:
    """A well-formed occurrence message body (reminder_core.messages), of no reminder in
    the database: a replay finds no delivery row, so it redrives the letter."""
    return {
        "reminder_id": str(uuid.uuid4()),
        "run_time_utc": "2030-01-01T09:00:00+00:00",
        "user_id": "alice",
        "version": 1,
    }


def hold_dead_letters(client: Any, dlq_url: str, *, visibility_timeout_s: int) -> list[str]:
    """Receive every dead letter as another reader would (the maintenance workload, another
    `dlq` command, the AWS console): SQS hides each for `visibility_timeout_s` (AWS SQS
    Developer Guide, "Amazon SQS visibility timeout"). Returns the receipt handles."""
    messages = client.receive_message(
        QueueUrl=dlq_url, MaxNumberOfMessages=10, VisibilityTimeout=visibility_timeout_s
    ).get("Messages", [])
    return [m["ReceiptHandle"] for m in messages]


@pytest.mark.timeout(60)
def test_dlq_replay_waits_for_dead_letters_another_reader_holds(
    client: Any, queue: SqsQueue, queues: tuple[str, str], cli_env: dict[str, str]
) -> None:
    # Issue 12: `dlq list --json` showed 2 dead letters, then `dlq replay` printed
    # "redriven: 0; ... not found: 0" and exited 0 while another reader held them.
    bodies = [occurrence(), occurrence()]
    dead_letter(queue, 2, bodies)
    runner = CliRunner()
    listed = runner.invoke(app, ["dlq", "list", "--json"], env=cli_env)
    assert len(json.loads(listed.stdout)) == 2
    assert len(hold_dead_letters(client, queues[1], visibility_timeout_s=3)) == 2
    # SQS counts a received message as not visible until its visibility timeout ends.
    assert counts(client, queues[1]) == (0, 2, 0)

    replayed = runner.invoke(app, ["dlq", "replay"], env=cli_env)

    assert replayed.exit_code == 0, replayed.output
    assert "redriven: 2;" in replayed.stdout
    assert "2 dead letter(s) held invisible by another reader" in replayed.stderr
    back = queue.receive(now=utcnow(), max_messages=10, visibility_timeout_s=30)
    key = "reminder_id"
    assert sorted((m.body for m in back), key=lambda b: b[key]) == sorted(
        (b | {"replay": True} for b in bodies), key=lambda b: b[key]
    )
    assert counts(client, queues[1]) == (0, 0, 0)


def test_dlq_replay_of_letters_still_held_says_so_and_exits_4(
    client: Any, queue: SqsQueue, queues: tuple[str, str], cli_env: dict[str, str]
) -> None:
    dead_letter(queue, 2, [occurrence(), occurrence()])
    runner = CliRunner()
    ids = [
        d["id"]
        for d in json.loads(runner.invoke(app, ["dlq", "list", "--json"], env=cli_env).stdout)
    ]
    handles = hold_dead_letters(client, queues[1], visibility_timeout_s=60)
    assert len(handles) == 2

    every = runner.invoke(app, ["dlq", "replay", "--wait-s", "1"], env=cli_env)
    assert every.exit_code == 4, every.output
    assert "redriven: 0;" in every.stdout
    assert "not reachable now (held invisible by another reader): 2" in every.stderr

    # An id asked for is in the DLQ, held: not reachable, not "not in the dead-letter queue".
    one = runner.invoke(app, ["dlq", "replay", "--id", ids[0], "--wait-s", "0"], env=cli_env)
    assert one.exit_code == 4, one.output
    assert f"not reachable now (held invisible by another reader): 1 ({ids[0]})" in one.stderr
    assert "error: not in the dead-letter queue" not in one.stderr

    # Nothing was lost: once the other reader lets go, both are there to replay.
    client.change_message_visibility_batch(
        QueueUrl=queues[1],
        Entries=[
            {"Id": str(i), "ReceiptHandle": h, "VisibilityTimeout": 0}
            for i, h in enumerate(handles)
        ],
    )
    assert sorted(d.message_id for d in queue.dead_letters(limit=10)) == sorted(ids)


def test_dlq_purge_of_letters_still_held_says_so_and_exits_4(
    client: Any, queue: SqsQueue, queues: tuple[str, str], cli_env: dict[str, str]
) -> None:
    dead_letter(queue, 2, [occurrence(), occurrence()])
    first = queue.dead_letters(limit=10)[0].message_id
    runner = CliRunner()
    assert len(hold_dead_letters(client, queues[1], visibility_timeout_s=60)) == 2

    every = runner.invoke(app, ["dlq", "purge", "--all", "--wait-s", "1"], env=cli_env)
    assert every.exit_code == 4, every.output
    assert "purged: 0" in every.stdout
    assert "not reachable now (held invisible by another reader): 2" in every.stderr

    one = runner.invoke(app, ["dlq", "purge", "--id", first, "--wait-s", "0"], env=cli_env)
    assert one.exit_code == 4, one.output
    assert f"not reachable now (held invisible by another reader): 1 ({first})" in one.stderr
    assert counts(client, queues[1]) == (0, 2, 0)  # both still in the DLQ


@pytest.mark.timeout(60)
def test_dlq_purge_waits_for_a_held_letter_it_was_asked_for(
    client: Any, queue: SqsQueue, queues: tuple[str, str], cli_env: dict[str, str]
) -> None:
    dead_letter(queue, 2, [occurrence(), occurrence()])
    (first, second) = (d.message_id for d in queue.dead_letters(limit=10))
    assert len(hold_dead_letters(client, queues[1], visibility_timeout_s=2)) == 2

    purged = CliRunner().invoke(app, ["dlq", "purge", "--id", first], env=cli_env)

    assert purged.exit_code == 0, purged.output
    assert purged.stdout == "purged: 1\n"
    assert [d.message_id for d in queue.dead_letters(limit=10)] == [second]
