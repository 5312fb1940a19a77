"""Run ids: their Crockford base32 encoding and their form."""

from __future__ import annotations

import random

import pytest

from wf.store._ids import _ALPHABET, _b32


def _plain(value: int, length: int) -> str:
    """The straightforward encoding: five bits a character, the lowest last."""
    chars = []
    for _ in range(length):
        chars.append(_ALPHABET[value & 31])
        value >>= 5
    return "".join(reversed(chars))


@pytest.mark.parametrize("length", [0, 1, 2, 3, 5, 10, 11, 16])
def test_the_encoding_is_five_bits_a_character_at_any_length(length: int) -> None:
    rng = random.Random(length)
    values = [0, 1, 2 ** (5 * length) - 1, 2 ** (5 * length) + 7, 12345, 2**200 - 1]
    values += [rng.getrandbits(5 * length + rng.randint(0, 10)) for _ in range(2000)]
    for value in values:
        assert _b32(value, length) == _plain(value, length), (value, length)
