"""Emails sent twice after a sender's kill -9, at a provider that does not deduplicate
but reports each acceptance by webhook (issue 12, provider feedback reconciliation).

Issue 12 measured, through the separate workloads on the PostgreSQL queue, the Resend
adapter against the fake provider, 2,000 one-time reminders and 30 random kill -9s (20 of
them senders): nothing lost and no key accepted twice by the fake (it honours the
Idempotency-Key), but requests re-sent a key the provider had already accepted, 0.8 and
3.1 per sender kill in two runs with the fake answering in 50 ms. At SES or an SMTP
server, which keep no key, each of those is a second email in someone's inbox.

The storm here: the same workloads, the fake in its no-dedupe mode (every call a new
email, as at SES; tests/support/fake_provider.py `/_mode`) answering in 50 ms, and, as
Resend and SES do, reporting every email it accepts by a signed webhook: `email.sent`,
WEBHOOK_DELAY_S after acceptance, also for a call whose sender was killed before the
answer reached it or before it wrote it, POSTed to the API's /v1/webhooks/resend (the
`api` workload, running beside the storm and never killed; WEBHOOK_RESEND_SECRET). The
event carries the idempotency key as a message tag, the endpoint records the provider's
message id on the delivery row still `sending`, and the sender that takes that row over
once the dead sender's lease (DELIVERY_LEASE_S, 4 s here) has run out records it `sent`
instead of calling the provider again. Checked: nothing lost, every occurrence in exactly
one terminal state, every webhook answered 2xx, re-sends with no sender kill near them at
most MAX_UNEXPLAINED per run, and re-sent accepted keys at most
MAX_RESENT_PER_SENDER_KILL (issue 12's 0.5) per sender kill on average over the runs.

That figure holds only for a provider that reports acceptance by webhook well within the
delivery lease, as here. An SMTP server sends no such feedback: there every call under way
at a kill, and every answer not yet written, is still a second email (docs/operations.md,
"Delivery guarantees"); without webhooks this storm measured 0.17-1.17 re-sends per sender
kill from answers not yet written alone, besides the calls in flight.

Each re-sent key is classified twice. By the senders' kill times (`resent_split`):
accepted after a sender's kill, the call was under way when its sender died
(`in_flight`); accepted shortly before a kill, the answer reached a live sender that had
not written it yet (`answered`, what the streaming completer bounds); neither,
`unexplained`. By the feedback (`feedback_split`): an earlier acceptance of the key had
its webhook answered 2xx by the API before the re-send reached the provider
(`feedback_in_time`: the takeover could have known; a miss of the reconciliation, or an
endpoint that ignores `email.sent`), only later (`feedback_late`), or never
(`feedback_missing`).

CRASH_DUPLICATES_RUNS=N repeats the storm N times in one invocation (each on a fresh
database, provider and set of processes) and asserts on the mean of the per-run figures;
CI runs it once.
"""

from __future__ import annotations

import json
import os
import random
import statistics
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import pytest
from prometheus_client.parser import text_string_to_metric_families

from tests.support.fake_provider import new_webhook_secret
from tests.support.rig import USER, Rig, assert_each_sent_once, kill_storm, report
from tests.support.workloads import (
    fresh_database,
    insert_due,
    progress,
    wait_until,
    whole_second,
)

#: Issue 12, "How we will check it": re-sent accepted keys at most 0.5 per sender kill on
#: average over several runs, the provider answering in 50 ms, quiet or loaded (measured
#: 0.8 and 3.1 when the issue was filed). Met only with provider feedback (module
#: docstring).
MAX_RESENT_PER_SENDER_KILL = 0.5
MAX_RECEIVE_COUNT = 12

OCCURRENCES = 2000
PROVIDER_LATENCY_S = 0.05  # SES and Resend answer in about 50 ms (issue 12)
#: The fake's email.sent webhook follows each acceptance by this long: well within the
#: delivery lease (DELIVERY_LEASE_S 4 s in the rig), after which a takeover happens.
WEBHOOK_DELAY_S = 0.4
WEBHOOKS_IDLE_TIMEOUT_S = 30.0  # after settling: every webhook posted (retries included)
KILLS = 30  # kill -9s per storm, about two thirds of them senders (issue 12)
SENDER_SHARE = 2 / 3  # the chance that a kill picks a sender
SENDERS = ("sender-1", "sender-2")
OTHERS = ("coordinator", "sweeper")
GAP_S = (0.4, 0.9)  # pause before each kill (none when the group drawn is still starting)
#: Due times spread over the storm, so work keeps arriving during it. A workload takes
#: 3-6 s to start on 2 loaded cores and a victim must be in its loop, so 30 kills take
#: some 45-60 s.
SPREAD_S = 40
STORM_MAX_S = 75.0  # the storm ends after this even short of KILLS
SETTLE_TIMEOUT_S = 150.0
RUN_TIMEOUT_S = 270  # per run: start-up, storm, settling, webhooks, teardown

RUNS = int(os.environ.get("CRASH_DUPLICATES_RUNS") or "1")


@dataclass(frozen=True)
class StormFigures:
    kills: dict[str, int]
    sender_kills: int
    resent: int
    resent_in_flight: int
    resent_answered: int
    unexplained: int
    feedback: Feedback
    webhooks: dict[str, Any]  # the fake's counts (posted, failed, pending, answers, ...)
    storm_s: float
    settle_s: float

    @property
    def resent_per_sender_kill(self) -> float:
        return self.resent / self.sender_kills

    @property
    def answered_per_sender_kill(self) -> float:
        return self.resent_answered / self.sender_kills

    @property
    def in_flight_per_sender_kill(self) -> float:
        return self.resent_in_flight / self.sender_kills


def sender_weighted(rng: random.Random) -> Callable[[list[str]], str | None]:
    """A kill_storm choice: a sender with probability SENDER_SHARE, else the coordinator
    or the sweeper; no kill when none of the group drawn is ready."""

    def choose(ready: list[str]) -> str | None:
        group = SENDERS if rng.random() < SENDER_SHARE else OTHERS
        candidates = [name for name in ready if name in group]
        return rng.choice(candidates) if candidates else None

    return choose


#: A call under way when its sender was killed is accepted by the fake up to this long
#: after the kill (its 50 ms latency, plus a loaded machine's delays: 0.3 s once left one
#: such call unexplained).
IN_FLIGHT_S = 0.6
#: Re-sent keys per run allowed to be near no sender kill (a stray slower acceptance);
#: a defect that re-sends without a kill would show many.
MAX_UNEXPLAINED = 2
#: An accepted call whose outcome its sender had not yet written when it was killed was
#: answered at most this long before the kill (the completer's flush interval plus one
#: statement; far more than it takes, far less than the 0.4 s between two kills).
ANSWERED_S = 0.25


@dataclass(frozen=True)
class Resent:
    """Re-sent accepted keys by what their previous acceptance was, against the senders'
    kill times: `answered`, accepted while its sender lived but not yet written when that
    sender was killed (what the completer's flushes bound, issue 12); `in_flight`, accepted
    after its sender had been killed (the call was under way: no sender can record it,
    and a provider that received the request delivers it); `unexplained`, neither (a bug;
    each given as the ms from the nearest sender kill to the acceptance).
    `answered_ms`: for each answered one, how long before the kill it was accepted."""

    answered: int
    in_flight: int
    unexplained: list[int | None]  # ms from the nearest sender kill to the acceptance
    answered_ms: list[float]


def resent_split(stats: dict[str, Any], sender_kills: list[float]) -> Resent:
    """Classify each re-sent key's previous acceptance (the fake's messages: every key's
    first, then each resent email, in the order accepted) by the sender kills around it
    (time.time() of each kill -9)."""
    kills = sorted(sender_kills)
    previous: dict[str, float] = {}
    answered_ms: list[float] = []
    in_flight = 0
    unexplained: list[int | None] = []
    for message in stats["messages"]:
        at = previous.get(message["key"])
        if at is not None:
            after = next((k for k in kills if k >= at), None)
            before = next((k for k in reversed(kills) if k < at), None)
            if after is not None and after - at <= ANSWERED_S:
                answered_ms.append(round((after - at) * 1000, 1))
            elif before is not None and at - before <= IN_FLIGHT_S:
                in_flight += 1
            else:
                nearest = min(kills, key=lambda k: abs(k - at), default=None)
                unexplained.append(round((at - nearest) * 1000) if nearest else None)
        previous[message["key"]] = message["at"]
    return Resent(len(answered_ms), in_flight, unexplained, sorted(answered_ms))


@dataclass(frozen=True)
class Feedback:
    """Re-sent accepted keys by the provider feedback about the key's earlier
    acceptances: `in_time`, an email.sent webhook of one was answered 2xx by the API
    before the re-send reached the provider (the takeover could have known); `late`, only
    after; `missing`, none was answered 2xx (failed, or still pending).
    `in_time_answers`: the API's answers (JSON `status`) to those in-time webhooks;
    `in_time_ms`: for each in-time one, how long before the re-send it was answered."""

    in_time: int
    late: int
    missing: int
    in_time_answers: dict[str, int]
    in_time_ms: list[int]


def feedback_split(stats: dict[str, Any]) -> Feedback:
    """Classify each re-sent email (the fake's messages in the order accepted) by the
    webhooks of its key's earlier acceptances. A re-send reached the fake
    PROVIDER_LATENCY_S before it was accepted (the fake's latency)."""
    answered_at: dict[str, tuple[float, str]] = {}  # key -> earliest 2xx answer so far
    seen: set[str] = set()
    in_time = late = missing = 0
    answers: dict[str, int] = {}
    in_time_ms: list[int] = []
    for message in stats["messages"]:
        key = message["key"]
        if key in seen:
            earliest = answered_at.get(key)
            called_at = message["at"] - PROVIDER_LATENCY_S
            if earliest is None:
                missing += 1
            elif earliest[0] < called_at:
                in_time += 1
                answers[earliest[1]] = answers.get(earliest[1], 0) + 1
                in_time_ms.append(round((called_at - earliest[0]) * 1000))
            else:
                late += 1
        seen.add(key)
        for hook in message.get("webhooks") or []:
            if hook["type"] == "email.sent" and hook["status"] == "posted":
                if key not in answered_at or hook["posted_at"] < answered_at[key][0]:
                    answered_at[key] = (hook["posted_at"], hook["answer"])
    return Feedback(in_time, late, missing, answers, sorted(in_time_ms))


#: What the senders log for a row they took over and recorded `sent` from the provider's
#: feedback (sender/execute.py), and the abandon reaper for one it recorded `sent`.
RECOVERED_LOGS = (
    "send recovered from provider feedback",
    "delivery abandoned: recorded sent (the provider reported it accepted)",
)


def evidence_counts(rig: Rig) -> dict[str, int]:
    """The API's reminders_send_evidence_total by outcome (recorded on a row still
    `sending`, known, unknown): the API is never killed, so its counter covers the run."""
    text = httpx.get(f"{rig.api}/metrics", timeout=10).text
    counts: dict[str, int] = {}
    for family in text_string_to_metric_families(text):
        if family.name == "reminders_send_evidence":
            for sample in family.samples:
                if sample.name.endswith("_total"):
                    outcome = sample.labels["outcome"]
                    counts[outcome] = counts.get(outcome, 0) + int(sample.value)
    return counts


def recovered_keys(rig: Rig) -> dict[str, Any]:
    """Keys the workloads recorded `sent` from the provider's feedback, from their logs
    (appended across restarts, so a killed sender's lines count too): distinct keys by
    the senders and by the abandon reaper, and the senders' log lines (a key appears
    twice when the sender that recovered it was killed before writing it)."""
    found: dict[str, set[str]] = {needle: set() for needle in RECOVERED_LOGS}
    lines = 0
    for path in rig.procs.logdir.glob("*.log"):
        for line in path.open(errors="replace"):
            needle = next((n for n in RECOVERED_LOGS if n in line), None)
            if needle is None or not line.startswith("{"):
                continue
            fields = json.loads(line)
            lines += needle == RECOVERED_LOGS[0]
            key = (
                fields.get("idempotency_key")
                or f"{fields.get('reminder_id')}-{fields.get('run_time_utc')}"
            )
            found[needle].add(key)
    return {
        "by_sender": len(found[RECOVERED_LOGS[0]]),
        "by_reaper": len(found[RECOVERED_LOGS[1]]),
        "sender_log_lines": lines,
    }


def storm(rig: Rig, rng: random.Random, run: int) -> StormFigures:
    """One storm on a fresh rig: the separate workloads and the API, the fake reporting
    every acceptance to the API by webhook, OCCURRENCES reminders due over the storm,
    KILLS kill -9s (never of the API), each victim restarted; then every occurrence
    checked, once every webhook has been posted."""
    rig.provider.client.post("/_faults", json={"latency_s": PROVIDER_LATENCY_S}).raise_for_status()
    rig.provider.set_dedupe(False)
    load_before = os.getloadavg()[0]
    # Each sender kill costs the messages of its batch two receives (the one it held, then
    # a `busy` one while the dead sender's lease runs out); 15-19 sender kills in some 40 s
    # took a few messages past the default 5 (dead-lettered, recorded `failed`). This test
    # measures duplicates, so it gives them room.
    # The fake keeps no key here, as SES does: the sender a real SES adapter makes leases
    # every send (providers.base.deduplicates_keys is false for SES); the Resend adapter
    # used to speak to the fake says it deduplicates, so its first sends without a lease
    # are turned off to match (docs/design.md, "First sends without a lease").
    rig.configure(MAX_RECEIVE_COUNT=str(MAX_RECEIVE_COUNT), SENDER_LEASELESS_FIRST_SEND="false")
    rig.migrate()
    rig.start("api", "coordinator", "sweeper", "maintenance", *SENDERS)
    wait_until(rig.api_ready, 60, "the API")
    rig.provider_webhooks_to_api(WEBHOOK_DELAY_S)
    rig.wait_connected("coordinator", "sweeper", "maintenance", "sender")
    due = insert_due(rig.engine, USER, OCCURRENCES, first_due=whole_second(0.5), spread_s=SPREAD_S)
    started = time.monotonic()
    kills = kill_storm(
        rig,
        (*OTHERS, *SENDERS),
        sender_weighted(rng),
        rng=rng,
        gap_s=GAP_S,
        seconds=STORM_MAX_S,
        max_kills=KILLS,
    )
    storm_s = time.monotonic() - started
    settle_s = rig.wait_settled(OCCURRENCES, timeout=SETTLE_TIMEOUT_S)
    wait_until(rig.provider.webhooks_idle, WEBHOOKS_IDLE_TIMEOUT_S, "the webhooks to be posted")

    figures = assert_each_sent_once(rig, due, provider_dedupes=False)  # 0 lost, one row each
    final = progress(rig.engine)
    assert final.reminders == {"completed": OCCURRENCES}
    assert final.deliveries == {"sent": OCCURRENCES}
    stats = rig.provider.stats()
    split = resent_split(stats, [k for s in SENDERS for k in rig.procs.killed_at.get(s, [])])
    assert split.in_flight + split.answered + len(split.unexplained) == stats["duplicates"]
    feedback = feedback_split(stats)
    assert feedback.in_time + feedback.late + feedback.missing == stats["duplicates"]
    webhooks = stats["webhooks"]
    evidence = evidence_counts(rig)
    recovered = recovered_keys(rig)
    result = StormFigures(
        kills=kills,
        sender_kills=sum(kills[s] for s in SENDERS),
        resent=stats["duplicates"],
        resent_in_flight=split.in_flight,
        resent_answered=split.answered,
        unexplained=len(split.unexplained),
        feedback=feedback,
        webhooks=webhooks,
        storm_s=storm_s,
        settle_s=settle_s,
    )
    report(
        f"crash duplicates, run {run}/{RUNS}",
        kills=kills,
        total_kills=sum(kills.values()),
        sender_kills=result.sender_kills,
        resent_accepted_keys=result.resent,
        resent_per_sender_kill=round(result.resent_per_sender_kill, 2),
        resent_in_flight=split.in_flight,
        resent_answered=split.answered,
        answered_ms_before_kill=split.answered_ms,
        unexplained=split.unexplained,
        answered_per_sender_kill=round(result.answered_per_sender_kill, 2),
        in_flight_per_sender_kill=round(result.in_flight_per_sender_kill, 2),
        resent_feedback_in_time=feedback.in_time,
        resent_feedback_late=feedback.late,
        resent_feedback_missing=feedback.missing,
        feedback_in_time_answers=feedback.in_time_answers,
        feedback_in_time_ms_before_resend=feedback.in_time_ms,
        webhooks_posted=webhooks["posted"],
        webhooks_failed=webhooks["failed"],
        webhooks_retried=webhooks["retried"],
        webhook_answers=webhooks["answers"],
        webhook_last_error=webhooks["last_error"],
        api_send_evidence=evidence,
        recorded_sent_from_feedback=recovered,
        storm_s=round(storm_s, 1),
        settled_s_after_storm=round(settle_s, 1),
        provider_calls=sum(figures["calls"].values()),
        calls_by_status=figures["by_status"],
        dead_letters=final.dead_letters,
        load_1m_before=round(load_before, 2),
        load_1m_after=round(os.getloadavg()[0], 2),
    )
    assert result.sender_kills >= KILLS // 3, f"too few sender kills for a figure: {kills}"
    # One email.sent per accepted email, each answered 2xx by the API (an "ignored"
    # answer included): the feedback reached the endpoint.
    assert webhooks["posted"] == len(stats["messages"]), webhooks
    assert webhooks["failed"] == 0, webhooks
    return result


@pytest.mark.e2e
@pytest.mark.timeout(RUN_TIMEOUT_S * RUNS)
def test_kill_9_storm_resends_few_accepted_keys(admin_url: str, tmp_path: Path) -> None:
    """2,000 occurrences through coordinator, sweeper, maintenance and two senders, the
    Resend adapter against a fake that keeps no key, answers in 50 ms and reports each
    email it accepts by an email.sent webhook to the API 0.4 s later, while one of
    coordinator, sweeper and the senders (a sender two times in three) is killed with
    SIGKILL every second or two and restarted, 30 times: every occurrence is delivered and
    recorded `sent` once (docs/design.md, "Exactly once per occurrence",
    "Every occurrence ends"), and the provider receives a key it already accepted at most
    MAX_RESENT_PER_SENDER_KILL times per sender kill, on average over
    CRASH_DUPLICATES_RUNS runs (issue 12)."""
    assert RUNS >= 1, f"CRASH_DUPLICATES_RUNS={RUNS}"
    rng = random.Random()
    runs: list[StormFigures] = []
    for run in range(1, RUNS + 1):
        workdir = tmp_path / f"run-{run}"
        workdir.mkdir()
        with fresh_database(admin_url, "reminders_crash_dup") as (url, engine):
            rig = Rig(workdir, url, engine, resend_webhook_secret=new_webhook_secret())
            try:
                runs.append(storm(rig, rng, run))
            finally:
                rig.close()

    resent = statistics.fmean(r.resent_per_sender_kill for r in runs)
    report(
        "crash duplicates",
        runs=RUNS,
        resent_per_sender_kill_by_run=[round(r.resent_per_sender_kill, 2) for r in runs],
        answered_per_sender_kill_by_run=[round(r.answered_per_sender_kill, 2) for r in runs],
        in_flight_per_sender_kill_by_run=[round(r.in_flight_per_sender_kill, 2) for r in runs],
        mean_resent_per_sender_kill=round(resent, 2),
        issue_12_threshold=MAX_RESENT_PER_SENDER_KILL,
        resent_by_run=[r.resent for r in runs],
        feedback_in_time_by_run=[r.feedback.in_time for r in runs],
        sender_kills_by_run=[r.sender_kills for r in runs],
        webhooks_posted_by_run=[r.webhooks["posted"] for r in runs],
        webhook_answers_by_run=[r.webhooks["answers"] for r in runs],
    )
    assert all(r.unexplained <= MAX_UNEXPLAINED for r in runs), (
        f"keys re-sent with no sender kill near them: {[r.unexplained for r in runs]}"
    )
    assert resent <= MAX_RESENT_PER_SENDER_KILL, (
        f"{resent:.2f} re-sent accepted keys per sender kill (runs: "
        f"{[round(r.resent_per_sender_kill, 2) for r in runs]}; of them with the provider's "
        f"email.sent answered by the API before the re-send: "
        f"{[r.feedback.in_time for r in runs]}); issue 12 asks {MAX_RESENT_PER_SENDER_KILL}"
    )
