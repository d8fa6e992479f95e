"""JWT_SECRET length (operations trial: a 3-byte secret was accepted with only a
warning). RFC 7518 §3.2: "A key of the same size as the hash output (for instance, 256
bits for "HS256") or larger MUST be used with this algorithm"."""

from __future__ import annotations

import pytest
from pydantic import ValidationError

from reminder_core.settings import Settings


@pytest.mark.parametrize(("algorithm", "size"), [("HS256", 32), ("HS384", 48), ("HS512", 64)])
def test_a_key_shorter_than_the_hash_output_is_refused(algorithm: str, size: int) -> None:
    with pytest.raises(ValidationError, match="JWT_SECRET must be at least"):
        Settings(jwt_secret="k" * (size - 1), jwt_algorithm=algorithm)
    assert Settings(jwt_secret="k" * size, jwt_algorithm=algorithm).jwt_secret == "k" * size


def test_multibyte_characters_count_as_their_utf8_bytes() -> None:
    Settings(jwt_secret="é" * 16)  # 32 bytes in UTF-8: enough for HS256
    with pytest.raises(ValidationError):
        Settings(jwt_secret="é" * 15 + "x")  # 31 bytes
