"""``wf deployments upgrade``: move an old deployment's unfinished runs onto the code here.

Each unfinished run pinned to ``FROM`` is replayed against the current code exactly as ``wf
check --replay`` does (``wf.engine._replay_check``: nothing executed, nothing written). Those
that replay cleanly are re-pinned to ``TO`` under their lease (a run being driven right now is
left alone and said so; one driven on since its check is checked again under the lease); the
others stay pinned to ``FROM``, listed with their divergence, for a worker of ``FROM`` to
finish.
"""

from __future__ import annotations

import dataclasses
from typing import TYPE_CHECKING, Any

from wf._exceptions import RunNotFound
from wf.admin._replay import report_json
from wf.engine._deployments import SCAN_LIMIT as SCAN_LIMIT  # `wf deployments` says it
from wf.engine._deployments import (
    UNFINISHED,
    DeploymentSummary,
    all_runs,
    summarize,
)
from wf.engine._deployments import check_deployment as check_id
from wf.engine._deployments import waiting_elsewhere as waiting_elsewhere  # `wf worker` says it
from wf.store import Fault, Store
from wf.store._faults import collect_faults

if TYPE_CHECKING:
    # The replay check imports the engine's driver: only an upgrade needs it, and `wf.admin`
    # (which every command's error line imports) must stay light.
    from wf.engine._replay_check import ReplayReport


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
    from wf.engine._replay_check import check_runs

    for report in await check_runs(store, sorted(runs)):
        if report.status != "ok":
            done.kept.append(report)
            continue
        if dry_run:
            done.moved.append(report.run_id)
            continue
        found = await _repin(store, report, source, target)
        if found is True:
            done.moved.append(report.run_id)
        elif found is False:
            done.busy.append(report.run_id)
        else:
            done.kept.append(found)
    return done


async def _repin(
    store: Store, checked: ReplayReport, source: str, target: str
) -> bool | ReplayReport:
    """Re-pin the run under its lease: True if moved, False if another process drives it now
    (or it moved on meanwhile), or the report of a check it no longer passes.

    The check ran before the lease was taken: a worker of ``source`` may have driven the run
    on since (a rolling deploy). Under the lease nobody else appends to its journal, so a
    journal that grew is checked again here, as it is now, before anything moves."""
    run_id = checked.run_id
    try:
        lease = await store.try_acquire(run_id)
    except RunNotFound:
        return False
    if lease is None:
        return False
    try:
        record, journal = await lease.read_run(store)
        if record.deployment != source or record.status.is_terminal:
            return False  # moved on meanwhile
        if len(journal) != checked.events:
            from wf.engine._replay_check import check_run

            again = await check_run(store, run_id)
            if again.status != "ok" or again.events != len(journal):
                return again
        record.deployment = target
        await lease.save(record)
        return True
    finally:
        await lease.release()


async def deployments(store: Store) -> tuple[list[DeploymentSummary], int, bool]:
    """Each deployment with its runs by status, first and last start and live workers, the
    number of live workers that drive every deployment, and whether older runs were left out
    (``wf deployments``)."""
    return await summarize(store)


@dataclasses.dataclass(frozen=True)
class DeploymentPage:
    """``deployments``' answer, and the runs it left out because they cannot be read."""

    deployments: list[DeploymentSummary]
    workers_of_any_deployment: int
    truncated: bool
    """Only the newest ``SCAN_LIMIT`` runs were counted."""
    damaged: list[Fault] = dataclasses.field(default_factory=list)
    """Each run (or worker entry) left out because its record cannot be read (``wf.store.
    Fault``), for the front end to name: ``wf deployments`` says each on stderr."""

    def to_json(self) -> dict[str, Any]:
        """As ``GET /api/v1/deployments`` answers (``wf deployments --json`` adds ``current``)."""
        return {
            "deployments": [summary.to_json() for summary in self.deployments],
            "workers_of_any_deployment": self.workers_of_any_deployment,
            "truncated": self.truncated,
            "damaged": [fault.to_json() for fault in self.damaged],
        }


async def deployment_page(store: Store) -> DeploymentPage:
    """``deployments``, with what it met damaged kept apart for the caller to name (not
    logged as the store's own find, which a server's log alone would hold)."""
    with collect_faults() as damaged:
        found, any_workers, truncated = await summarize(store)
    return DeploymentPage(found, any_workers, truncated, list(damaged))


def check_deployment(value: str) -> str:
    """A deployment id as given on a command line or in a request, or a ``wf.UsageError``
    (the rule of ``[tool.wf] deployment``: not ``latest``, not ``*``)."""
    return check_id(value)
