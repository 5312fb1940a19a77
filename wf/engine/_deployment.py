"""Which code a run started on: a short hash of its workflow's module source."""

from __future__ import annotations

import hashlib
import inspect
import os
from typing import Any

_cache: dict[tuple[str, float], str] = {}


def deployment_of(fn: Any) -> str | None:
    """A 12-hex-digit hash of the source file defining ``fn`` (None if it has no file)."""
    try:
        path = inspect.getsourcefile(fn)
    except TypeError:
        return None
    if not path or not os.path.exists(path):
        return None
    key = (path, os.stat(path).st_mtime)
    found = _cache.get(key)
    if found is None:
        with open(path, "rb") as source:
            found = hashlib.sha256(source.read()).hexdigest()[:12]
        _cache[key] = found
    return found
