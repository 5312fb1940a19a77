"""Run ids: ``wrun_`` + 26 Crockford base32 characters (48-bit ms time + 80 random bits).

Ids sort by creation time, so "newest first" is a reverse sort of names, and they are validated
before ever being used as a path component.
"""

from __future__ import annotations

import os
import re
import threading
import time

from wf._exceptions import UsageError

_ALPHABET = "0123456789ABCDEFGHJKMNPQRSTVWXYZ"
_PREFIX = "wrun_"
_ID_RE = re.compile(r"wrun_[0-9A-HJKMNP-TV-Z]{26}")
# Caller-chosen ids (``wf run --id``) are accepted when they are safe as a file name.
MAX_ID_LENGTH = 128
_CUSTOM_RE = re.compile(rf"[A-Za-z0-9][A-Za-z0-9_.\-]{{0,{MAX_ID_LENGTH - 1}}}")
# fullmatch, not ``$``: ``$`` also matches before a final newline, which no id may end with.

_lock = threading.Lock()
_last_ms = -1
_last_rand = 0
_entropy = b""
"""Random bytes fetched ahead (one ``os.urandom`` call for many ids); dropped in a forked
child, which must never make the ids its parent makes."""


def _drop_entropy() -> None:
    # And the last id: counting up from the parent's in the same millisecond (or under a
    # clock that did not move on) would make the parent's next ids.
    global _entropy, _last_ms, _last_rand
    _entropy = b""
    _last_ms, _last_rand = -1, 0


os.register_at_fork(after_in_child=_drop_entropy)


_PAIRS = [high + low for high in _ALPHABET for low in _ALPHABET]
"""Every two characters, by the ten bits they stand for."""


def _b32(value: int, length: int) -> str:
    """The low ``5 * length`` bits of ``value``, two characters at a time (an odd length's
    first character alone)."""
    odd = length % 2
    pairs = "".join(
        [_PAIRS[(value >> shift) & 1023] for shift in range(5 * (length - odd) - 10, -1, -10)]
    )
    return _ALPHABET[(value >> (5 * length - 5)) & 31] + pairs if odd else pairs


def new_run_id(now: float | None = None) -> str:
    """A fresh run id; ids made in one process are strictly increasing (monotonic ULID)."""
    global _last_ms, _last_rand, _entropy
    ms = int((time.time() if now is None else now) * 1000)
    with _lock:
        if ms <= _last_ms:
            ms = _last_ms
            rand = _last_rand + 1
        else:
            if not _entropy:
                _entropy = os.urandom(640)
            rand = int.from_bytes(_entropy[:10], "big") >> 1  # room to count up
            _entropy = _entropy[10:]
        _last_ms, _last_rand = ms, rand
    return _PREFIX + _b32(ms, 10) + _b32(rand, 16)


def has_generated_form(run_id: str) -> bool:
    """Whether ``run_id`` has the form ``new_run_id`` gives (``wrun_`` and 26 characters)."""
    return _ID_RE.fullmatch(run_id) is not None


def validate_run_id(run_id: str) -> str:
    """Return ``run_id`` if it is a well-formed id, else raise ``UsageError``.

    Generated ids match the ULID form; ids chosen by the caller may use letters, digits, ``_``,
    ``.`` and ``-`` (not starting with a dot), so that an id can never escape the store directory.
    """
    valid = isinstance(run_id, str) and (_ID_RE.fullmatch(run_id) or _CUSTOM_RE.fullmatch(run_id))
    if valid and run_id not in {".", ".."}:
        return run_id
    if run_id == "":
        raise UsageError("invalid run id '': an id cannot be empty")
    if isinstance(run_id, str) and len(run_id) > MAX_ID_LENGTH:
        # Not echoed whole: an error is one line, whatever an argument holds.
        raise UsageError(
            f"invalid run id: it is {len(run_id)} characters long; at most {MAX_ID_LENGTH}"
            " are allowed"
        )
    from wf.store._limits import shown

    raise UsageError(
        f"invalid run id {shown(run_id, MAX_ID_LENGTH + 16)}: use letters, digits, '_', '.', '-'"
        f" (max {MAX_ID_LENGTH})"
    )
