"""The suppression list's pure rules (docs/design.md, "Suppression list"; issue 6): what
each provider event does, how addresses are compared, when a paused reminder may
resume."""

from __future__ import annotations

import pytest

from reminder_core.domain.states import DeliveryStatus
from reminder_core.domain.suppression import (
    ApplyOutcome,
    FeedbackKind,
    ResumeAction,
    ResumeDecision,
    SuppressionReason,
    decide_feedback,
    decide_resume,
    normalize_address,
)
from webhooks.events import EventKind


def test_feedback_kinds_are_the_webhook_event_kinds() -> None:
    # reminder_core cannot import webhooks; the stored values must stay the same.
    # ACCEPTED is evidence of a send, applied to its delivery row and never stored as a
    # webhook_events row (webhooks.apply.apply_evidence).
    stored = {k.value for k in EventKind if k is not EventKind.ACCEPTED}
    assert {k.value for k in FeedbackKind} == stored


@pytest.mark.parametrize(
    ("kind", "outcome", "status", "suppress"),
    [
        # Issue 6: a hard bounce or complaint sets the delivery bounced / complained and
        # suppresses the address; a soft bounce is recorded only.
        (FeedbackKind.HARD_BOUNCE, ApplyOutcome.SUPPRESSED, DeliveryStatus.BOUNCED,
         SuppressionReason.BOUNCE),
        (FeedbackKind.COMPLAINT, ApplyOutcome.SUPPRESSED, DeliveryStatus.COMPLAINED,
         SuppressionReason.COMPLAINT),
        (FeedbackKind.SOFT_BOUNCE, ApplyOutcome.RECORDED, None, None),
    ],
)  # fmt: skip
def test_known_delivery(kind, outcome, status, suppress) -> None:
    decision = decide_feedback(kind, delivery_found=True)
    assert (decision.outcome, decision.delivery_status, decision.suppress) == (
        outcome,
        status,
        suppress,
    )


@pytest.mark.parametrize("kind", list(FeedbackKind))
def test_unknown_delivery_changes_nothing(kind) -> None:
    # Issue 6: unknown message ids are stored and acknowledged, not errors.
    decision = decide_feedback(kind, delivery_found=False)
    assert (decision.outcome, decision.delivery_status, decision.suppress) == (
        ApplyOutcome.UNMATCHED,
        None,
        None,
    )


@pytest.mark.parametrize(
    ("given", "expected"),
    [
        ("alice@example.com", "alice@example.com"),
        ("  Alice@Example.COM\n", "alice@example.com"),
        ("STRASSE@example.com", "strasse@example.com"),
        ("straße@example.com", "strasse@example.com"),  # casefold: ß folds to ss
    ],
)
def test_addresses_are_case_folded(given, expected) -> None:
    assert normalize_address(given) == expected


def test_an_empty_address_is_refused() -> None:
    with pytest.raises(ValueError, match="empty"):
        normalize_address("   ")


OLD, NEW = "old@example.com", "new@example.com"


@pytest.mark.parametrize(
    ("profile_email", "listed", "expected"),
    [
        # docs/design.md, "Suppression list": resume when the profile's address changes or
        # the entry is removed.
        ("old@example.com", {OLD}, ResumeDecision(ResumeAction.STAY)),
        ("Old@Example.com", {OLD}, ResumeDecision(ResumeAction.STAY)),
        ("new@example.com", {OLD}, ResumeDecision(ResumeAction.RESUME)),
        ("old@example.com", set(), ResumeDecision(ResumeAction.RESUME)),
        (None, set(), ResumeDecision(ResumeAction.RESUME)),  # removed: whatever the profile
        (None, {OLD}, ResumeDecision(ResumeAction.STAY)),  # profile unknown: wait
        ("New@example.com", {OLD, NEW}, ResumeDecision(ResumeAction.REPOINT, NEW)),
        ("  ", {OLD}, ResumeDecision(ResumeAction.STAY)),
    ],
)
def test_resume_decision(profile_email, listed, expected) -> None:
    assert decide_resume(OLD, profile_email, listed) == expected
