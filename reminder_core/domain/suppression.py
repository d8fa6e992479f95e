"""The suppression list's rules (docs/design.md, "Suppression list"), as pure decisions:
what a bounce or a complaint does to a delivery, an address and a reminder, and when a
reminder paused by a suppression may resume. The statements that carry them out are in
`reminder_core.suppression`."""

from __future__ import annotations

from collections.abc import Container
from dataclasses import dataclass
from enum import StrEnum

from reminder_core.domain.states import DeliveryStatus


class FeedbackKind(StrEnum):
    """What a provider said about one sent email; the values of `webhooks.events.EventKind`
    (a test keeps the two equal), stored in `webhook_events.kind`."""

    HARD_BOUNCE = "hard_bounce"
    SOFT_BOUNCE = "soft_bounce"
    COMPLAINT = "complaint"


class SuppressionReason(StrEnum):
    """Why an address is on the suppression list (`suppressions.reason`)."""

    BOUNCE = "bounce"
    COMPLAINT = "complaint"


class ApplyOutcome(StrEnum):
    """What applying one provider event did (`webhook_events.outcome`, except DUPLICATE).

    DUPLICATE: the provider event id was seen before; nothing changed, nothing stored.
    UNMATCHED: no delivery of ours carries that provider message id (yet): the event is
        stored only; the maintenance workload tries to match it again for a while
        (`WEBHOOK_REMATCH_WINDOW_S`), since a webhook may beat the sender's commit.
    RECORDED: a soft bounce of a known delivery: stored and linked to the delivery, which
        keeps its status (the provider may still deliver it; "recorded only", issue 6).
    SUPPRESSED: a hard bounce or complaint of a known delivery: the delivery is `bounced`
        or `complained`, the address is on the suppression list, and the user's live
        reminders are paused.
    """

    DUPLICATE = "duplicate"
    UNMATCHED = "unmatched"
    RECORDED = "recorded"
    SUPPRESSED = "suppressed"


@dataclass(frozen=True, slots=True)
class FeedbackDecision:
    """What one event does.

    Attributes:
        outcome: see ApplyOutcome (never DUPLICATE: that is decided by the store).
        delivery_status: the delivery's new status (from `sent` only), None: unchanged.
        suppress: the suppression reason to record for the address, None: no entry.
    """

    outcome: ApplyOutcome
    delivery_status: DeliveryStatus | None
    suppress: SuppressionReason | None


def decide_feedback(kind: FeedbackKind, *, delivery_found: bool) -> FeedbackDecision:
    """The effect of a provider event of `kind` (docs/design.md, "Suppression list";
    issue 6).

    A hard bounce (the address does not exist or refuses mail for good) or a complaint
    (marked as spam) suppresses the address; a soft bounce (mailbox full, a temporary
    refusal: SES `Transient`) is recorded only and leaves the delivery `sent`. An event
    about a message we do not know changes nothing but its own row.
    """
    if not delivery_found:
        return FeedbackDecision(ApplyOutcome.UNMATCHED, None, None)
    if kind is FeedbackKind.HARD_BOUNCE:
        return FeedbackDecision(
            ApplyOutcome.SUPPRESSED, DeliveryStatus.BOUNCED, SuppressionReason.BOUNCE
        )
    if kind is FeedbackKind.COMPLAINT:
        return FeedbackDecision(
            ApplyOutcome.SUPPRESSED, DeliveryStatus.COMPLAINED, SuppressionReason.COMPLAINT
        )
    return FeedbackDecision(ApplyOutcome.RECORDED, None, None)


def normalize_address(address: str) -> str:
    """The form an address takes on the suppression list: surrounding white space removed,
    case-folded (`str.casefold`), so `Alice@Example.COM ` and `alice@example.com` are one
    entry. Every lookup goes through this function, never through SQL `lower()`.

    Raises:
        ValueError: the address is empty.
    """
    folded = address.strip().casefold()
    if not folded:
        raise ValueError("empty email address")
    return folded


def pause_reason(reason: SuppressionReason | str) -> str:
    """The `paused_reason` shown to the user for a reminder paused by a suppression."""
    what = "a hard bounce" if reason == SuppressionReason.BOUNCE else "a spam complaint"
    return (
        f"paused: the recipient address is on the suppression list after {what}; it resumes "
        "when the profile's address changes or the entry is removed"
    )


class ResumeAction(StrEnum):
    """What to do with a reminder paused by a suppression, on a recheck."""

    STAY = "stay"  # still suppressed (or nothing to compare with): keep it paused
    RESUME = "resume"  # the address changed to a clean one, or the entry was removed
    REPOINT = "repoint"  # the address changed, but to another suppressed address


@dataclass(frozen=True, slots=True)
class ResumeDecision:
    """action, and for REPOINT the (normalized) suppressed address it now waits on."""

    action: ResumeAction
    address: str | None = None


def decide_resume(
    suppressed_address: str,
    profile_email: str | None,
    suppressed: Container[str],
) -> ResumeDecision:
    """Whether a reminder paused because `suppressed_address` was suppressed may resume.

    Args:
        suppressed_address: normalized; what the reminder was paused for.
        profile_email: the user's current address (None: no profile, or not known now).
        suppressed: normalized addresses on the suppression list now (at least the two
            concerned).

    The entry's removal resumes it whatever the profile says; otherwise a profile address
    that changed to one not suppressed resumes it (docs/design.md, "Suppression list").
    """
    if suppressed_address not in suppressed:
        return ResumeDecision(ResumeAction.RESUME)
    if profile_email is None:
        return ResumeDecision(ResumeAction.STAY)
    try:
        current = normalize_address(profile_email)
    except ValueError:
        return ResumeDecision(ResumeAction.STAY)
    if current == suppressed_address:
        return ResumeDecision(ResumeAction.STAY)
    if current in suppressed:
        return ResumeDecision(ResumeAction.REPOINT, current)
    return ResumeDecision(ResumeAction.RESUME)
