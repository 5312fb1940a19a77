"""Deployments: which code a run is pinned to, who drives it, and what waits for whom.

A run started while the process has a deployment id (``[tool.wf] deployment``) is pinned to
it (``RunRecord.deployment``); a child keeps its parent's pin unless started with
``with_options(deployment="latest")``. A worker with an id drives runs pinned to it and
unpinned runs (``pins_of``); one without an id, or ``--any-deployment``, drives every run.

A live worker holds one place of a store-wide slot named after its deployment
(``worker_slot``) while it serves: the store frees the place when the process dies, so
``live_workers`` counts the workers alive now on every store, without a heartbeat.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable
from typing import Any

from wf.store import RunRecord, RunStatus, Store
from wf.store._base import Pages, Pins

ANY = "*"
"""The slot name of workers that drive runs of every deployment."""

RESERVED = {
    "latest": "which with_options(deployment=) means: the id of the process driving the parent",
    ANY: "the name of the workers of every deployment",
}
"""Names no deployment can have, and why."""

WORKER_PLACES = 64
"""Workers of one deployment counted (and registered) at most: more are served, not counted."""

UNFINISHED = (RunStatus.PENDING, RunStatus.RUNNING, RunStatus.SUSPENDED)

SCAN_LIMIT = 100_000
"""Runs read at most to sum up deployments (``summarize``)."""


def check_deployment(value: str, *, new: bool = True) -> str:
    """A deployment id (``[tool.wf] deployment``, ``wf deployments upgrade``), or
    ``wf.UsageError``: a name (``check_name``) other than the reserved ones, and (``new``: an
    id runs are pinned to from now on) without whitespace at either end, since ids are
    compared exactly: ``"v1 "`` would be a deployment apart from ``v1``. An id runs are
    already pinned to (``new=False``) is taken as it is."""
    from wf._exceptions import UsageError
    from wf.store._limits import check_name

    if value in RESERVED:
        raise UsageError(f"deployment cannot be {value!r} ({RESERVED[value]})")
    name = check_name("deployment", value)
    if new and name != name.strip():
        raise UsageError(
            f"deployment {name!r} starts or ends with whitespace: ids are compared exactly, "
            f"so it would be a deployment apart from {name.strip()!r}"
        )
    return name


def waiting_for_worker(deployment: str) -> str:
    """What a run pinned to ``deployment`` waits for while no live worker serves it, in the
    words ``wf inspect`` (and every front end) says it."""
    return f"waiting for a worker of deployment {deployment}"


def pins_of(deployment: str | None, *, any_deployment: bool = False) -> Pins | None:
    """The runs a worker of ``deployment`` drives: its own and unpinned ones (None: every run,
    for a worker without an id or with ``--any-deployment``)."""
    if deployment is None or any_deployment:
        return None
    return frozenset({deployment, None})


def worker_slot(pins: Pins | None) -> str:
    """The slot a live worker holds a place of: ``deployment:<id>``, or ``deployment:*``."""
    named = sorted(p for p in pins or () if p is not None)
    return "deployment:" + (named[0] if named else ANY)


async def live_workers(store: Store, deployments: Iterable[str]) -> dict[str, int]:
    """Workers serving now, per deployment id (``*``: workers of every deployment)."""
    found: dict[str, int] = {}
    for deployment in sorted({*deployments, ANY}):
        count = await store.slots_taken("deployment:" + deployment, WORKER_PLACES)
        if count:
            found[deployment] = count
    return found


@dataclasses.dataclass
class DeploymentSummary:
    """One deployment's runs (``wf deployments``): counts by status, first and last start,
    and the workers serving it now."""

    deployment: str | None
    """None: unpinned runs."""
    runs: dict[str, int] = dataclasses.field(default_factory=dict)
    first_start: float | None = None
    last_start: float | None = None
    workers: int = 0

    def count(self, record: RunRecord) -> None:
        status = record.status.value
        self.runs[status] = self.runs.get(status, 0) + 1
        start = record.created_at
        self.first_start = start if self.first_start is None else min(self.first_start, start)
        self.last_start = start if self.last_start is None else max(self.last_start, start)

    @property
    def unfinished(self) -> int:
        return sum(self.runs.get(s.value, 0) for s in UNFINISHED)

    def to_json(self) -> dict[str, Any]:
        """As ``wf deployments --json`` prints it."""
        return dataclasses.asdict(self)


async def summarize(store: Store) -> tuple[list[DeploymentSummary], int, bool]:
    """Every deployment with runs (unpinned runs last, as None), the workers serving every
    deployment at once (``--any-deployment``, or without an id), and whether runs past the
    newest ``SCAN_LIMIT`` were left out."""
    by_id: dict[str | None, DeploymentSummary] = {}
    records = await all_runs(store, limit=SCAN_LIMIT + 1)
    truncated = len(records) > SCAN_LIMIT
    for record in records[:SCAN_LIMIT]:
        found = by_id.get(record.deployment)
        if found is None:
            found = by_id[record.deployment] = DeploymentSummary(record.deployment)
        found.count(record)
    workers = await live_workers(store, [d for d in by_id if d is not None])
    for deployment, count in workers.items():
        if deployment != ANY:
            by_id.setdefault(deployment, DeploymentSummary(deployment)).workers = count
    named = sorted((s for d, s in by_id.items() if d is not None), key=_by_last_start)
    if None in by_id:
        named.append(by_id[None])
    return named, workers.get(ANY, 0), truncated


def _by_last_start(summary: DeploymentSummary) -> tuple[float, str]:
    return (summary.last_start or 0.0, summary.deployment or "")


async def all_runs(
    store: Store, statuses: Iterable[RunStatus] | None = None, limit: int = SCAN_LIMIT
) -> list[RunRecord]:
    """Runs of the store (of these statuses), newest first, page by page."""
    out: list[RunRecord] = []
    pages = Pages()
    wanted = list(statuses) if statuses is not None else None
    while len(out) < limit:
        page = await store.list_runs(statuses=wanted, limit=500, before=pages.before)
        if not pages.take(page):
            break
        out += page
        if len(page) < 500:
            break
    return out[:limit]


async def waiting_elsewhere(store: Store, pins: Pins | None) -> dict[str, int]:
    """Unfinished runs pinned to deployments a worker of ``pins`` does not drive, per id."""
    if pins is None:
        return {}
    found: dict[str, int] = {}
    for record in await all_runs(store, UNFINISHED):
        if record.deployment not in pins and record.deployment is not None:
            found[record.deployment] = found.get(record.deployment, 0) + 1
    return dict(sorted(found.items()))
