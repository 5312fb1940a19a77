"""Which code a run started on: a short hash of its workflow's module source."""

from __future__ import annotations

import contextlib
import hashlib
import inspect
import os
import weakref
from typing import Any

_cache: dict[tuple[str, float], str] = {}
_by_function: weakref.WeakKeyDictionary[Any, str | None] = weakref.WeakKeyDictionary()
"""Per function object: a run started on code already loaded gets that code's hash without a
stat per start. A reload (``wf dev``) makes new function objects, so they are hashed anew."""


def deployment_of(fn: Any) -> str | None:
    """A 12-hex-digit hash of the source file defining ``fn`` (None if it has no file)."""
    try:
        return _by_function[fn]
    except (KeyError, TypeError):  # TypeError: an object that takes no weak reference
        pass
    found = _hash_source(fn)
    with contextlib.suppress(TypeError):
        _by_function[fn] = found
    return found


def _hash_source(fn: Any) -> str | None:
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
