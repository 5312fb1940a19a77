"""Format 7: the tag index (``by-tag/``: runs by named queue, group and deployment) of an
older store, built in place.

Format 7 keeps ``by-tag/`` as runs are created and re-pinned; a format-6 wf would not (its new
runs would be missing from filtered listings), so the format number moves and it refuses the
store. The step reads every run's record once; it is idempotent (a crash part-way repeats it:
entries are made if absent) and runs once, under ``migrate.lock``.
"""

from __future__ import annotations

import os
from typing import Any

from wf._exceptions import RunNotFound, StoreCorrupted
from wf.store.local import _records, _upgrade
from wf.store.local._index import Index, Tag, record_tags


def tag_index(root: str) -> None:
    """Build ``by-tag/`` from every run's record."""
    Index(root).build_tags(lambda run_id: tags_of(root, run_id))


def tags_of(root: str, run_id: str) -> list[Tag] | None:
    """The tags of the run's record (``record_tags``); None for a run that is not there (or
    whose record cannot be read: ``wf store verify`` names it)."""
    _upgrade.tick()
    try:
        data = _records.read_raw(os.path.join(root, "runs", run_id), run_id)
    except (RunNotFound, StoreCorrupted, FileNotFoundError, NotADirectoryError):
        return None
    return tags_in(data)


def tags_in(data: dict[str, Any]) -> list[Tag]:
    """The tags of a record as stored (``record_tags`` of its fields)."""
    fields = (data.get(name) for name in ("queue", "group", "deployment"))
    return record_tags(*(value if isinstance(value, str) else None for value in fields))
