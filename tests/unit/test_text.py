"""reminder_core.text: provider text made storable in PostgreSQL.

Rules from their sources: PostgreSQL text holds no U+0000 (PostgreSQL docs, "Character
Types") and, in UTF-8 (RFC 3629 §3), no lone surrogate (U+D800..U+DFFF); each such
character becomes U+FFFD (Unicode §23.8), one for one. A message id is a key of a btree
index limited to about 2.7 kB per entry: at most 512 characters, 2,048 bytes of UTF-8.
(`storable` on any text: tests/unit/test_webhooks_fuzz.py.)
"""

from __future__ import annotations

import hashlib
import string

from hypothesis import given, settings
from hypothesis import strategies as st

from reminder_core.text import (
    MAX_ERROR,
    MAX_MESSAGE_ID,
    escaped,
    storable,
    storable_error,
    storable_message_id,
)

FFFD = "\ufffd"
texts = st.text(st.characters(codec=None, min_codepoint=0, max_codepoint=0x10FFFF), max_size=600)
checked = settings(derandomize=True, max_examples=300, deadline=None)


def test_nul_and_lone_surrogates_become_replacement_characters() -> None:
    assert storable("abc\x00def") == "abc" + FFFD + "def"
    assert storable("\ud800x") == FFFD + "x"
    # Two surrogate code points in a Python str are two lone surrogates, not a pair.
    assert storable("\ud83d\ude00") == FFFD + FFFD
    assert storable("caf\u00e9 \U0001f600") == "caf\u00e9 \U0001f600"  # real text is kept


def test_storable_text_is_returned_as_it_is() -> None:
    value = "0100018c-real-ses-id@email.amazonses.com"
    assert storable(value) is value


def sha256(text: str) -> str:
    return hashlib.sha256(text.encode("utf-8", "surrogatepass")).hexdigest()


def test_a_message_id_postgresql_can_hold_is_kept_as_it_is() -> None:
    for value in ("4ef9a417-02e9-4d39-ad75-9611e0fcc33c", "caf\u00e9", "m" * 512):
        assert storable_message_id(value) is value


def test_other_message_ids_keep_a_prefix_and_the_digest_of_the_whole_id() -> None:
    assert MAX_MESSAGE_ID == 512
    assert storable_message_id("a\x00b") == "a" + FFFD + "b~sha256:" + sha256("a\x00b")
    # Ids that a cut or a replacement alone would make one stay two.
    assert storable_message_id("x\x00y") != storable_message_id("x\ud800y")
    assert storable_message_id("c" * 512 + "1") != storable_message_id("c" * 512 + "2")
    # An id holding the mark elsewhere is not kept as it is: it could be another's form.
    marked = "x~sha256:" + "0" * 32 + "-tail"
    assert storable_message_id(marked) == marked + "~sha256:" + sha256(marked)
    # The digest form itself is kept: the rule may be applied twice (the webhooks do),
    # a short id's form included (helper-50's trial: "k~sha256:<32 hex>" was hashed
    # again at the second pass, and its bounce was not matched).
    short = "k~sha256:" + "ab" * 16
    for value in ("c" * 600, "x\x00y-" + "0f" * 16, short, "\ud800", "\U0001f600" * 600):
        once = storable_message_id(value)
        assert storable_message_id(once) == once, value
    assert storable_message_id(short) == short + "~sha256:" + sha256(short)
    four_byte = "\U0001f600" * 2000
    kept = storable_message_id(four_byte)
    assert kept == "\U0001f600" * 440 + "~sha256:" + sha256(four_byte)
    assert len(kept) == 512
    assert len(kept.encode("utf-8")) == 1832  # < 2,704, PostgreSQL's btree entry limit


def test_error_text_is_cut_to_max_error() -> None:
    assert storable_error("x" * 5000) == "x" * MAX_ERROR


def test_escaped_is_printable_ascii() -> None:
    assert escaped("id\u00e9-1", 100) == "id\\xe9-1"
    assert escaped("a\x00b\ud800", 100) == "a\\x00b\\ud800"
    assert escaped("\U0001f600" * 10, 12) == "\\U0001f600\\U"  # cut at 12 characters


@checked
@given(texts, st.integers(min_value=0, max_value=700))
def test_escaped_text_is_always_printable_ascii_within_its_limit(text: str, limit: int) -> None:
    out = escaped(text, limit)
    assert len(out) <= limit
    assert all(c in string.printable and c not in "\r\n\t\x0b\x0c" for c in out)
