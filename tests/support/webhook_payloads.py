"""Provider payloads as documented, with example.com addresses: shared by the webhook
unit and API tests. Each names its source."""

from __future__ import annotations

from typing import Any

# SES Developer Guide, "Amazon SNS notification examples for Amazon SES".
SES_BOUNCE: dict[str, Any] = {
    "notificationType": "Bounce",
    "bounce": {
        "bounceType": "Permanent",
        "reportingMTA": "dns; email.example.com",
        "bouncedRecipients": [
            {
                "emailAddress": "jane@example.com",
                "status": "5.1.1",
                "action": "failed",
                "diagnosticCode": "smtp; 550 5.1.1 <jane@example.com>... User",
            }
        ],
        "bounceSubType": "General",
        "timestamp": "2016-01-27T14:59:38.237Z",
        "feedbackId": "00000138111222aa-33322211-cccc-cccc-cccc-ddddaaaa068a-000000",
        "remoteMtaIp": "127.0.2.0",
    },
    "mail": {
        "timestamp": "2016-01-27T14:59:38.237Z",
        "source": "john@example.com",
        "sourceArn": "arn:aws:ses:us-east-1:888888888888:identity/example.com",
        "sourceIp": "127.0.3.0",
        "sendingAccountId": "123456789012",
        "messageId": "00000138111222aa-33322211-cccc-cccc-cccc-ddddaaaa0680-000000",
        "destination": ["jane@example.com", "mary@example.com", "richard@example.com"],
    },
}
SES_COMPLAINT: dict[str, Any] = {
    "notificationType": "Complaint",
    "complaint": {
        "userAgent": "AnyCompany Feedback Loop (V0.01)",
        "complainedRecipients": [{"emailAddress": "richard@example.com"}],
        "complaintFeedbackType": "abuse",
        "arrivalDate": "2016-01-27T14:59:38.237Z",
        "timestamp": "2016-01-27T14:59:38.237Z",
        "feedbackId": "000001378603177f-18c07c78-fa81-4a58-9dd1-fedc3cb8f49a-000000",
    },
    "mail": {
        "timestamp": "2016-01-27T14:59:38.237Z",
        "messageId": "000001378603177f-7a5433e7-8edb-42ae-af10-f0181f34d6ee-000000",
        "source": "john@example.com",
        "destination": ["jane@example.com", "mary@example.com", "richard@example.com"],
    },
}

# Resend docs, "email.bounced" (addresses on example.com).
RESEND_BOUNCED: dict[str, Any] = {
    "type": "email.bounced",
    "created_at": "2024-11-22T23:41:12.126Z",
    "data": {
        "broadcast_id": "8b146471-e88e-4322-86af-016cd36fd216",
        "created_at": "2024-11-22T23:41:11.894719+00:00",
        "email_id": "56761188-7520-42d8-8898-ff6fc54ce618",
        "from": "Acme <onboarding@example.com>",
        "to": ["delivered@example.com"],
        "subject": "Sending this example",
        "bounce": {
            "message": (
                "The recipient's email address is on the suppression list because it has a"
                " recent history of producing hard bounces."
            ),
            "subType": "Suppressed",
            "type": "Permanent",
        },
        "tags": {"category": "confirm_email"},
    },
}
# Resend docs, "email.complained".
RESEND_COMPLAINED: dict[str, Any] = {
    "type": "email.complained",
    "created_at": "2024-02-22T23:41:12.126Z",
    "data": {
        "created_at": "2024-02-22T23:41:11.894719+00:00",
        "email_id": "56761188-7520-42d8-8898-ff6fc54ce618",
        "from": "Acme <onboarding@example.com>",
        "to": ["delivered@example.com"],
        "subject": "Sending this example",
    },
}

# Postmark docs, "Bounce webhook".
POSTMARK_BOUNCE: dict[str, Any] = {
    "RecordType": "Bounce",
    "MessageStream": "outbound",
    "ID": 4323372036854775807,
    "Type": "HardBounce",
    "TypeCode": 1,
    "Name": "Hard bounce",
    "Tag": "Test",
    "MessageID": "883953f4-6105-42a2-a16a-77a8eac79483",
    "Metadata": {"a_key": "a_value", "b_key": "b_value"},
    "ServerID": 23,
    "Description": (
        "The server was unable to deliver your message (ex: unknown user, mailbox not found)."
    ),
    "Details": "Test bounce details",
    "Email": "john@example.com",
    "From": "sender@example.com",
    "BouncedAt": "2019-11-05T16:33:54.9070259Z",
    "DumpAvailable": True,
    "Inactive": True,
    "CanActivate": True,
    "Subject": "Test subject",
    "Content": "<Full dump of bounce>",
}
# Postmark docs, "Spam complaint webhook".
POSTMARK_COMPLAINT: dict[str, Any] = {
    **POSTMARK_BOUNCE,
    "RecordType": "SpamComplaint",
    "ID": 42,
    "Type": "SpamComplaint",
    "TypeCode": 512,
    "Name": "Spam complaint",
    "MessageID": "00000000-0000-0000-0000-000000000000",
    "Description": "The subscriber explicitly marked this message as spam.",
    "Details": "Test spam complaint details",
    "CanActivate": False,
}

# SES Developer Guide, "Examples of event data that Amazon SES publishes to Amazon SNS",
# Send record (event publishing through a configuration set: `mail.tags`, each a list).
# The example's custom tag is replaced by the one our sender sets (`idempotency_key`,
# sender/providers/ses.py); its value is filled in by each test.
SES_SEND: dict[str, Any] = {
    "eventType": "Send",
    "mail": {
        "timestamp": "2016-10-14T05:02:16.645Z",
        "source": "sender@example.com",
        "sourceArn": "arn:aws:ses:us-east-1:123456789012:identity/sender@example.com",
        "sendingAccountId": "123456789012",
        "messageId": "EXAMPLE7c191be45-e9aedb9a-02f9-4d12-a87d-dd0099a07f8a-000000",
        "destination": ["recipient@example.com"],
        "headersTruncated": False,
        "headers": [
            {"name": "From", "value": "sender@example.com"},
            {"name": "To", "value": "recipient@example.com"},
            {"name": "Subject", "value": "Message sent from Amazon SES"},
        ],
        "commonHeaders": {
            "from": ["sender@example.com"],
            "to": ["recipient@example.com"],
            "messageId": "EXAMPLE7c191be45-e9aedb9a-02f9-4d12-a87d-dd0099a07f8a-000000",
            "subject": "Message sent from Amazon SES",
        },
        "tags": {
            "ses:configuration-set": ["ConfigSet"],
            "ses:source-ip": ["192.0.2.0"],
            "ses:from-domain": ["example.com"],
            "ses:caller-identity": ["ses_user"],
            "idempotency_key": ["<key>"],
        },
    },
    "send": {},
}
# The same guide's "Amazon SNS notification examples": a Delivery notification of an
# identity's feedback (no tags: "If using feedback notifications directly on the
# identity, SES does not publish tags"), with the original headers included, among them
# the X-Entity-Ref-ID header our sender sets; its value is filled in by each test.
SES_DELIVERY_NOTIFICATION: dict[str, Any] = {
    "notificationType": "Delivery",
    "mail": {
        "timestamp": "2016-01-27T14:59:38.237Z",
        "messageId": "0000014644fe5ef6-9a483358-9170-4cb4-a269-f5dcdf415321-000000",
        "source": "john@example.com",
        "sourceArn": "arn:aws:ses:us-east-1:888888888888:identity/example.com",
        "sourceIp": "127.0.3.0",
        "sendingAccountId": "123456789012",
        "destination": ["jane@example.com"],
        "headersTruncated": False,
        "headers": [
            {"name": "From", "value": '"John Doe" <john@example.com>'},
            {"name": "To", "value": '"Jane Doe" <jane@example.com>'},
            {"name": "X-Entity-Ref-ID", "value": "<key>"},
        ],
    },
    "delivery": {
        "timestamp": "2016-01-27T14:59:38.237Z",
        "recipients": ["jane@example.com"],
        "processingTimeMillis": 546,
        "reportingMTA": "a8-70.smtp-out.amazonses.com",
        "smtpResponse": "250 ok:  Message 64111812 accepted",
        "remoteMtaIp": "127.0.2.0",
    },
}
# Resend docs, "email.sent" (current page: `tags` as an object name -> value; the
# example's `category` tag replaced by ours, filled in by each test).
RESEND_SENT: dict[str, Any] = {
    "type": "email.sent",
    "created_at": "2024-02-22T23:41:12.126Z",
    "data": {
        "broadcast_id": "8b146471-e88e-4322-86af-016cd36fd216",
        "created_at": "2024-02-22T23:41:11.894719+00:00",
        "email_id": "56761188-7520-42d8-8898-ff6fc54ce618",
        "from": "Acme <onboarding@example.com>",
        "to": ["delivered@example.com"],
        "subject": "Sending this example",
        "template_id": "43f68331-0622-4e15-8202-246a0388854b",
        "tags": {"idempotency_key": "<key>"},
    },
}
