"""Run ids: their Crockford base32 encoding and their form."""

from __future__ import annotations

import os
import random

import pytest

from wf.store._ids import _ALPHABET, _b32, new_run_id


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


def test_a_forked_child_never_makes_its_parent_s_ids() -> None:
    """Under a clock that does not move on between the fork and the ids (the same millisecond,
    a mock clock, a clock stepped back), the child must not count up from the parent's last id:
    a store trusts the ids wf makes to be new (it does not look for them)."""
    at = 1_800_000_000.0
    new_run_id(at)
    read, write = os.pipe()
    pid = os.fork()
    if pid == 0:  # pragma: no cover - the child
        os.write(write, " ".join(new_run_id(at) for _ in range(3)).encode())
        os._exit(0)
    os.close(write)
    mine = {new_run_id(at) for _ in range(3)}
    with os.fdopen(read, "rb") as pipe:
        theirs = set(pipe.read().decode().split())
    assert os.waitpid(pid, 0)[1] == 0
    assert len(theirs) == 3
    assert not mine & theirs
