"""``wf deployments upgrade``: move an old deployment's unfinished runs onto the code here.

Each unfinished run pinned to ``FROM`` is replayed against the current code exactly as ``wf
check --replay`` does (``wf.engine._replay_check``: nothing executed, nothing written). Those
that replay cleanly are re-pinned to ``TO`` under their lease (a run being driven right now is
left alone and said so); the others stay pinned to ``FROM``, listed with their divergence, for
a worker of ``FROM`` to finish.
"""

from __future__ import annotations

import dataclasses
from typing import Any

from wf._exceptions import RunNotFound
from wf.admin._replay import report_json
from wf.engine._deployments import (
    UNFINISHED,
    DeploymentSummary,
    all_runs,
    summarize,
)
from wf.engine._deployments import waiting_elsewhere as waiting_elsewhere  # `wf worker` says it
from wf.engine._replay_check import ReplayReport, check_runs
from wf.store import Store
from wf.store._limits import check_name


@dataclasses.dataclass
class Upgrade:
    """What an upgrade did (or, dry, would do) to each unfinished run of ``source``."""

    source: str
    target: str
    dry_run: bool
    moved: list[str] = dataclasses.field(default_factory=list)
    """Runs re-pinned to ``target`` (dry: that would be)."""
    kept: list[ReplayReport] = dataclasses.field(default_factory=list)
    """Runs that stay pinned to ``source``: they diverge, or cannot be replayed here."""
    busy: list[str] = dataclasses.field(default_factory=list)
    """Runs that replay but were being driven: left pinned (run the upgrade again later)."""

    def to_json(self) -> dict[str, Any]:
        """As ``wf deployments upgrade --json`` prints it."""
        return {
            "from": self.source,
            "to": self.target,
            "dry_run": self.dry_run,
            "moved": self.moved,
            "busy": self.busy,
            "kept": [report_json(r) for r in self.kept],
        }


async def upgrade(store: Store, source: str, target: str, *, dry_run: bool = False) -> Upgrade:
    """Replay ``source``'s unfinished runs here and re-pin those that replay to ``target``."""
    done = Upgrade(source, target, dry_run)
    runs = [r.id for r in await all_runs(store, UNFINISHED) if r.deployment == source]
    for report in await check_runs(store, sorted(runs)):
        if report.status != "ok":
            done.kept.append(report)
        elif dry_run or await _repin(store, report.run_id, source, target):
            done.moved.append(report.run_id)
        else:
            done.busy.append(report.run_id)
    return done


async def _repin(store: Store, run_id: str, source: str, target: str) -> bool:
    """Re-pin the run under its lease; False if another process drives it now."""
    try:
        lease = await store.try_acquire(run_id)
    except RunNotFound:
        return False
    if lease is None:
        return False
    try:
        record, _journal = await lease.read_run(store)
        if record.deployment != source or record.status.is_terminal:
            return False  # moved on meanwhile
        record.deployment = target
        await lease.save(record)
        return True
    finally:
        await lease.release()


async def deployments(store: Store) -> tuple[list[DeploymentSummary], int]:
    """Each deployment with its runs by status, first and last start and live workers, and
    the number of live workers that drive every deployment (``wf deployments``)."""
    return await summarize(store)


def check_deployment(value: str) -> str:
    """A deployment id as given on a command line or in a request, or a ``wf.UsageError``."""
    return check_name("deployment", value)
