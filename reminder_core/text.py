"""Text from outside the system made storable in PostgreSQL: what a provider, a remote
mail server or a webhook sends is not ours to refuse, and a value the database refuses
must never block the rows written beside it (docs/design.md, "Sender": "Provider text").
"""

from __future__ import annotations

import hashlib
import re

#: What a PostgreSQL `text` value cannot hold: U+0000 (PostgreSQL docs, "Character
#: Types": "the character with code zero ... cannot be stored") and lone surrogates
#: (U+D800..U+DFFF), which have no UTF-8 form (RFC 3629 §3) although JSON's "\ud800"
#: escape decodes to one (RFC 8259 §8.2).
_UNSTORABLE = re.compile("[\x00\ud800-\udfff]")
#: U+FFFD REPLACEMENT CHARACTER (Unicode §23.8), what a decoder puts for what it cannot read.
REPLACEMENT = "\ufffd"
#: Longest provider message id kept, in characters. The id is a key of the btree index
#: (provider, provider_message_id), whose entries PostgreSQL limits to about a third of a
#: page (2,704 bytes at 8 kB pages, "index row size exceeds btree version 4 maximum"):
#: 512 characters are at most 2,048 bytes of UTF-8. Real ids are far shorter (a UUID at
#: Resend, ~60 characters at SES, an RFC 5322 Message-ID within one 998-octet line).
MAX_MESSAGE_ID = 512
#: Longest error text kept on a delivery row, in characters (a provider's answer quoted
#: in an exception can be a whole HTML error page).
MAX_ERROR = 2000


def storable(text: str) -> str:
    """`text` with each character PostgreSQL text cannot hold (U+0000, a lone surrogate)
    replaced by U+FFFD, one for one (lengths and positions are kept); `text` itself (the
    same object) when it holds none (the common case costs two scans in C, ~0.1 us for a
    short id)."""
    if "\x00" not in text and (text.isascii() or not _UNSTORABLE.search(text)):
        return text
    return _UNSTORABLE.sub(REPLACEMENT, text)


#: Joins the kept prefix of an id that cannot be stored as it is to its digest.
DIGEST_MARK = "~sha256:"
#: Characters of such an id's prefix: its digest form is MAX_MESSAGE_ID characters long.
_ID_PREFIX = MAX_MESSAGE_ID - len(DIGEST_MARK) - 64
_HEX64 = re.compile("[0-9a-f]{64}")


def storable_message_id(message_id: str) -> str:
    """A provider's message id as it is stored and looked up. An id PostgreSQL can hold,
    of at most MAX_MESSAGE_ID characters and without DIGEST_MARK (every real one), is
    kept as it is; any other becomes its first 440 characters made `storable`,
    DIGEST_MARK, and the SHA-256 of the whole id (hex; its UTF-8 bytes, lone surrogates
    passed through): 512 characters, and two ids that differ anywhere stay two (a cut or
    a replacement alone would make "x\x00y" and "x\ud800y", or two ids that share 512
    characters, one). A value already in that form is kept (`is_digest_form`), so the
    rule can be applied twice; an id a provider made in the exact form of another id's
    digest form is the one case where two ids become one. The sender (recording a send)
    and the webhooks (finding the send of an event) both pass ids through this, so the
    two always match."""
    if len(message_id) <= MAX_MESSAGE_ID and storable(message_id) is message_id:
        if DIGEST_MARK not in message_id or is_digest_form(message_id):
            return message_id  # (a digest form's prefix is storable: checked just above)
    digest = hashlib.sha256(message_id.encode("utf-8", "surrogatepass")).hexdigest()
    return storable(message_id[:_ID_PREFIX]) + DIGEST_MARK + digest


def is_digest_form(message_id: str) -> bool:
    """True when `message_id` is what `storable_message_id` makes of an id it cannot
    keep: at most 440 characters PostgreSQL can hold, DIGEST_MARK, 64 lowercase hex
    digits (at most MAX_MESSAGE_ID in all; a short id's form is shorter)."""
    cut = len(message_id) - 64 - len(DIGEST_MARK)
    return (
        0 <= cut <= _ID_PREFIX
        and message_id[cut : cut + len(DIGEST_MARK)] == DIGEST_MARK
        and _HEX64.fullmatch(message_id, cut + len(DIGEST_MARK)) is not None
    )


def storable_error(error: str) -> str:
    """An error text as stored on a delivery row: `storable`, cut to MAX_ERROR
    characters."""
    return storable(error[:MAX_ERROR])


def escaped(text: str, limit: int) -> str:
    """`text` as printable ASCII (Python's `ascii()` escapes: "\\x00", "\\ud800",
    "\\u00e9"), cut to `limit` characters: the last resort for a value the database
    refused even once `storable`, which no text column refuses."""
    return ascii(text)[1:-1][:limit]
