"""Did-you-mean for keyword arguments a wf declaration does not take (``retries=3``)."""

from __future__ import annotations

import difflib
from collections.abc import Iterable, Mapping
from typing import Any

from wf._exceptions import UsageError


def refuse_unknown_keywords(what: str, given: Mapping[str, Any], known: Iterable[str]) -> None:
    """Raise ``wf.UsageError`` naming the first unknown keyword of ``given``, with the closest
    known one (``max_retries`` for ``retries``) or the list of known ones."""
    if not given:
        return
    choices = sorted(known)
    word = sorted(given)[0]
    close = difflib.get_close_matches(word, choices, n=1, cutoff=0.5)
    if not close:
        # ``retries`` is a part of ``max_retries``: difflib's ratio alone may miss it.
        close = [c for c in choices if word in c or c in word][:1]
    hint = f"did you mean {close[0]}=?" if close else "it takes " + ", ".join(choices)
    raise UsageError(f"{what} got an unexpected keyword argument {word!r}: {hint}")
