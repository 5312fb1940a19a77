"""``wf deployments upgrade``: move an old deployment's unfinished runs onto the code here.

Each unfinished run pinned to ``FROM`` is replayed against the current code exactly as ``wf
check --replay`` does (``wf.engine._replay_check``: nothing executed, nothing written). Those
that replay cleanly are re-pinned to ``TO`` under their lease (a run being driven right now is
left alone and said so; one driven on since its check is checked again under the lease); the
others stay pinned to ``FROM``, listed with their divergence, for a worker of ``FROM`` to
finish. Runs move by family (the unfinished runs under one root): a child never finishes on
other code than its parent's. A dry run judges each family exactly so, its leases taken and
given back (never one a worker holds), and re-pins nothing.
"""

from __future__ import annotations

import dataclasses
from typing import TYPE_CHECKING, Any

from wf._exceptions import RunNotFound, StoreError
from wf.admin._replay import report_json
from wf.admin._words import visible
from wf.engine._deployments import (
    ANY,
    UNFINISHED,
    DeploymentSummary,
    all_runs,
    live_workers,
    summarize,
)
from wf.engine._deployments import SCAN_LIMIT as SCAN_LIMIT  # `wf deployments` says it
from wf.engine._deployments import check_deployment as check_id
from wf.engine._deployments import waiting_elsewhere as waiting_elsewhere  # `wf worker` says it
from wf.store import Fault, Lease, RunRecord, Store
from wf.store._base import Pages
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
    warning: str | None = None
    """Set when the runs moved (or that would) have no live worker to drive them: none of
    ``target`` and none of every deployment serves now, so they wait until one starts."""

    def to_json(self) -> dict[str, Any]:
        """As ``wf deployments upgrade --json`` prints it."""
        return {
            "from": self.source,
            "to": self.target,
            "dry_run": self.dry_run,
            "moved": self.moved,
            "busy": self.busy,
            "kept": [report_json(r) for r in self.kept],
            "warning": self.warning,
        }


async def upgrade(store: Store, source: str, target: str, *, dry_run: bool = False) -> Upgrade:
    """Replay ``source``'s unfinished runs here and re-pin those that replay to ``target``.

    Runs move by family: the unfinished runs of ``source`` under one root (a parent and its
    children, whose results the parent's code reads) move together or not at all. When one of
    them stays (it diverges, cannot be replayed here, or is being driven), the others stay
    too, each kept with the reason naming that member: a child finished by other code than
    its parent's would hand the parent a result of another shape."""
    done = Upgrade(source, target, dry_run)
    records = [r for r in await all_runs(store, UNFINISHED) if r.deployment == source]
    from wf.engine import _replay_check

    checked = await _replay_check.check_runs(store, sorted(r.id for r in records))
    reports = {report.run_id: report for report in checked}
    families: dict[str, list[ReplayReport]] = {}
    for record in records:
        families.setdefault(record.root_id or record.id, []).append(reports[record.id])
    for root in sorted(families):
        family = sorted(families[root], key=lambda report: report.run_id)
        stuck = next((report for report in family if report.status != "ok"), None)
        if stuck is not None:
            done.kept.append(stuck)
            _keep_family(done, family, stuck.run_id, _why(stuck))
        else:
            await _move_family(store, done, family, source, target, dry_run=dry_run)
    done.moved.sort()
    done.busy.sort()
    done.kept.sort(key=lambda report: report.run_id)
    if done.moved:
        # Checked after the move: a run re-pinned to a deployment nobody serves waits, silently.
        workers = await live_workers(store, [target])
        if not workers.get(target) and not workers.get(ANY):
            runs = "run(s) it would move wait" if dry_run else "moved run(s) wait"
            done.warning = (
                f"no live worker of deployment {visible(target)}: the {len(done.moved)} {runs} "
                "until one starts"
            )
    return done


def _why(report: ReplayReport) -> str:
    """Why a member keeps its family, after its id: ``run X diverges``."""
    return "diverges" if report.status == "diverged" else "cannot be replayed here"


def _keep_family(done: Upgrade, family: list[ReplayReport], member: str, why: str) -> None:
    """Keep every run of ``family`` but ``member`` (reported on its own) on the old
    deployment, saying which member keeps it and why."""
    from wf.engine._replay_check import ReplayReport

    for report in family:
        if report.run_id != member:
            done.kept.append(
                ReplayReport(
                    report.run_id,
                    report.workflow,
                    "family",
                    report.ops_recorded,
                    report.ops_replayed,
                    message=f"kept with its family: run {member} {why}",
                    events=report.events,
                )
            )


async def _move_family(
    store: Store,
    done: Upgrade,
    family: list[ReplayReport],
    source: str,
    target: str,
    *,
    dry_run: bool,
) -> None:
    """Re-pin every run of ``family`` (each checked: it replays) under its lease, or none;
    ``dry_run``: judge the family exactly so, then let go of the leases, re-pinning nothing
    (a dry run that did not look at the leases would call a run a worker drives right now
    movable, and the real upgrade would then say it busy).

    Every member's lease is taken first, and every member judged under it, before anything
    moves: while the upgrade holds them all no driver goes on with any member, so none can be
    driven (or start a child) between another's check and its move. The check ran before the
    leases were taken: a worker of ``source`` may have driven a member on since (a rolling
    deploy), so a journal that grew is checked again, as it is now; a child started since the
    check keeps the family (it was never checked). What remains is a failure between the
    re-pins themselves (the store lost, the upgrade killed): the members re-pinned before it
    are on ``target``, the others on ``source``, said as such; the upgrade run again moves the
    rest when they still replay."""
    from wf.engine._replay_check import ReplayReport, check_run

    leases: dict[str, Lease] = {}
    try:
        for report in family:
            try:
                lease = await store.try_acquire(report.run_id)
            except RunNotFound:
                lease = None  # deleted meanwhile: moved on
            if lease is None:
                done.busy.append(report.run_id)
                _keep_family(done, family, report.run_id, "is being driven")
                return
            leases[report.run_id] = lease
        records: list[RunRecord] = []
        for report in family:
            record, journal = await leases[report.run_id].read_run(store)
            if record.deployment != source or record.status.is_terminal:
                done.busy.append(report.run_id)  # moved on meanwhile: look again
                _keep_family(done, family, report.run_id, "moved on since it was checked")
                return
            if len(journal) != report.events:
                again = await check_run(store, report.run_id)
                if again.status != "ok" or again.events != len(journal):
                    done.kept.append(again)
                    _keep_family(done, family, report.run_id, _why(again))
                    return
            records.append(record)
        members = {report.run_id for report in family}
        for record in records:
            for child in await _children(store, record.id):
                if child.deployment == source and child.id not in members:
                    why = "was started since the check (run the upgrade again)"
                    _keep_family(done, family, child.id, why)
                    return
        if dry_run:
            done.moved += [record.id for record in records]
            return
        moved: list[str] = []
        for record in records:
            record.deployment = target
            try:
                await leases[record.id].save(record)
            except StoreError as exc:
                split = f"; {', '.join(moved)} moved to {target} already" if moved else ""
                done.kept.append(
                    ReplayReport(
                        record.id,
                        record.workflow,
                        "error",
                        0,
                        0,
                        message=f"could not be re-pinned under its lease ({exc}){split}: run "
                        "the upgrade again",
                    )
                )
                rest = [r for r in family if r.run_id not in moved]
                _keep_family(done, rest, record.id, "could not be re-pinned")
                done.moved += moved
                return
            moved.append(record.id)
        done.moved += moved
    finally:
        for lease in leases.values():
            await lease.release()


async def _children(store: Store, run_id: str) -> list[RunRecord]:
    """The unfinished children of ``run_id``, page by page."""
    out: list[RunRecord] = []
    pages = Pages()
    while True:
        page = await store.list_runs(
            statuses=UNFINISHED, parent_id=run_id, limit=500, before=pages.before
        )
        if not pages.take(page):
            return out
        out += page
        if len(page) < 500:
            return out


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


def check_deployment(value: str, *, new: bool = True) -> str:
    """A deployment id as given on a command line or in a request, or a ``wf.UsageError``
    (the rule of ``[tool.wf] deployment``: not ``latest``, not ``*``, no whitespace at either
    end unless ``new`` is false: an id runs are pinned to already, such as upgrade's FROM)."""
    return check_id(value, new=new)
