"""``wf inspect``'s one line (``why``) for a run that is due, or whose driver is gone, or whose
awaited message has arrived: the next worker takes it, unless it is pinned to a deployment no
live worker serves, which it then waits for."""

from __future__ import annotations

import time
from typing import Any

import pytest

from wf import admin
from wf.engine._deployments import WORKER_PLACES
from wf.store import RunRecord, RunStatus
from wf.store._ids import new_run_id
from wf.store.memory import MemoryStore


async def _run(store: MemoryStore, status: RunStatus, deployment: str | None, **fields: Any) -> str:
    record = RunRecord(
        id=new_run_id(), workflow="t:flow", status=status, deployment=deployment, **fields
    )
    await store.create_run(record)
    return record.id


async def _why(store: MemoryStore, run_id: str) -> str:
    detail = await admin.run_detail(store, run_id, probe=admin.LivenessProbe(store))
    return str(admin.detail_json(detail)["why"])


HOOK = [{"kind": "hook", "target": "k:1", "until": None}]


@pytest.mark.parametrize(
    ("deployment", "served", "ends"),
    [
        (None, False, "a message arrived, the next worker takes it"),
        ("v1", True, "a message arrived, the next worker takes it"),
        ("v1", False, "a message arrived, waiting for a worker of deployment v1"),
    ],
)
async def test_a_suspended_run_whose_message_arrived_says_who_takes_it(
    deployment: str | None, served: bool, ends: str
) -> None:
    store = MemoryStore()
    if served:
        assert await store.try_slot("deployment:v1", WORKER_PLACES) is not None
    run_id = await _run(store, RunStatus.SUSPENDED, deployment, waiting_for=HOOK)
    # Until a message arrives, the line says that none takes it meanwhile, when none serves v1.
    meanwhile = "" if served or deployment is None else "; waiting for a worker of deployment v1"
    absent = f"{meanwhile}: no live worker serves it" if meanwhile else ""
    assert await _why(store, run_id) == (
        f"suspended: hook 'k:1'; wakes when a message arrives{absent}"
    )
    await store.post(run_id, "hook", {"token": "k:1", "data": {}})
    assert await _why(store, run_id) == f"suspended: hook 'k:1'; {ends}"


async def test_a_due_or_orphaned_run_pinned_to_an_absent_deployment_waits_for_its_worker() -> None:
    store = MemoryStore()
    past = time.time() - 5
    sleeping = [{"kind": "sleep", "target": None, "until": past}]
    due = await _run(store, RunStatus.SUSPENDED, "v1", waiting_for=sleeping, wake_at=past)
    assert (await _why(store, due)).endswith("; due now, waiting for a worker of deployment v1")
    orphan = await _run(store, RunStatus.RUNNING, "v1")
    assert await _why(store, orphan) == (
        "running, but its driver process is gone: waiting for a worker of deployment v1 to "
        "recover it (0 operation(s) done are not repeated)"
    )
    detail = await admin.run_detail(store, orphan, probe=admin.LivenessProbe(store))
    reasons = admin.explain(detail).reasons
    assert [(r.kind, r.name) for r in reasons][-1] == ("unserved", "v1")
    # A worker of every deployment serves it: the next worker it is.
    assert await store.try_slot("deployment:*", WORKER_PLACES) is not None
    assert (await _why(store, due)).endswith("; due now, the next worker resumes it")
    assert "the next worker recovers it" in await _why(store, orphan)


async def test_a_schedule_whose_last_run_waits_for_a_gone_deployment_says_so() -> None:
    """After a deploy the run a v1 worker fired stays pinned to v1: with v1's workers gone, it
    waits for one, and the schedule skips every fire meanwhile. The listing says why."""
    from wf.store import Schedule

    store = MemoryStore()
    run_id = await _run(store, RunStatus.PENDING, "v1")
    made = Schedule("s", "t:flow", "* * * * *", last_run_id=run_id)
    await store.save_schedule(made)
    [row] = await admin.list_schedules(store)
    assert (row["last_run_status"], row["last_run_unserved"]) == ("pending", "v1")
    assert await store.try_slot("deployment:v1", WORKER_PLACES) is not None
    [row] = await admin.list_schedules(store)
    assert row["last_run_unserved"] is None


async def test_every_line_of_a_run_pinned_to_an_absent_deployment_says_it_waits_for_one() -> None:
    """A sleeping, a hook-waiting and a running run pinned to a deployment no live worker serves:
    the web UI and the TUI say so (the ``unserved`` reason), and so does ``wf inspect``'s line."""
    store = MemoryStore()
    later = time.time() + 3600
    sleeping = [{"kind": "sleep", "target": None, "until": later}]
    asleep = await _run(store, RunStatus.SUSPENDED, "v1", waiting_for=sleeping, wake_at=later)
    hooked = await _run(store, RunStatus.SUSPENDED, "v1", waiting_for=HOOK)
    absent = "; waiting for a worker of deployment v1: no live worker serves it"
    assert (await _why(store, asleep)).endswith(absent)
    assert await _why(store, hooked) == (
        f"suspended: hook 'k:1'; wakes when a message arrives{absent}"
    )
    # Served: the lines say nothing of it.
    assert await store.try_slot("deployment:v1", WORKER_PLACES) is not None
    assert "deployment" not in await _why(store, asleep)
    assert await _why(store, hooked) == "suspended: hook 'k:1'; wakes when a message arrives"
