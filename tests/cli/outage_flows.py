"""A workflow whose store fails for a while under its drive, for ``wf run``'s ride-out.

Imported by ``wf run`` (in its process), this module makes the local store's journal appends
that record a step's end fail with ``wf.StoreUnavailable`` ``WF_TEST_CUTS`` times, and the
record reads that follow each cut fail ``WF_TEST_DOWN_READS`` times: a PostgreSQL restart as
the drive sees it.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from typing import Any

import wf
from wf.store.local._lease import LocalLease
from wf.store.local._store import LocalStore

_cuts = [int(os.environ.get("WF_TEST_CUTS", "0"))]
_down = [0]
_real_append = LocalLease.append
_real_get_run = LocalStore.get_run


async def _append(self: LocalLease, events: Sequence[Any]) -> None:
    if _cuts[0] > 0 and any(e.get("type") == "step_completed" for e in events):
        _cuts[0] -= 1
        _down[0] = int(os.environ.get("WF_TEST_DOWN_READS", "0"))
        raise wf.StoreUnavailable("PostgreSQL failed to append to the journal: the test cut it")
    await _real_append(self, events)


async def _get_run(self: LocalStore, run_id: str) -> Any:
    if _down[0] > 0:
        _down[0] -= 1
        raise wf.StoreUnavailable(
            "cannot connect to PostgreSQL: the database system is starting up"
        )
    return await _real_get_run(self, run_id)


LocalLease.append = _append  # type: ignore[method-assign]
LocalLease.append_pending = lambda self, events: False  # type: ignore[method-assign]
LocalStore.get_run = _get_run  # type: ignore[method-assign]


@wf.step
def add(x: int, i: int) -> int:
    return x + i


@wf.workflow
async def steps(x: int) -> int:
    for i in range(3):
        x = await add(x, i)
    return x
