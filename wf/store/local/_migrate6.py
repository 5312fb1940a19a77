"""Format 6: run counts (``counts/``) and the status and workflow indexes (``by-status/``,
``by-workflow/``) of an older store, built in place.

Format 6 keeps both as runs change; a format-5 wf would not (its runs would be missing from
``by-status/`` and its changes from the counts), so the format number moves and it refuses
the store. The step reads every run's record once (for the counts) and every index name once
(for the indexes); it is idempotent (a crash part-way repeats it: counts are set to what the
scan finds, index entries made if absent) and runs once, under ``migrate.lock``.
"""

from __future__ import annotations

from wf.store.local._counts import Counters
from wf.store.local._index import Index
from wf.store.local._upkeep import Tombstones, count_runs


def index_and_count(root: str) -> None:
    """Build ``by-status/`` and ``by-workflow/``, and set ``counts/`` from a scan."""
    Index(root).build_secondary()
    counters = Counters(root)
    try:
        counters.set_to({**count_runs(root), "tombstones": Tombstones(root).count()})
        counters.mark_ready()
    finally:
        counters.close()
