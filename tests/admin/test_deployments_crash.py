"""``wf deployments upgrade`` cut short at every write of the local store: the run is driven by
exactly one deployment's code (the one its record names), and listed under that pin."""

from __future__ import annotations

import contextlib
import errno
from pathlib import Path

import wf
import wf.admin._deployments as deployments
from wf import StoreError
from wf.store.local import LocalStore, _fsops
from wf.testing import MockClock, TestEngine

CODE = {"deployment": "v1"}
"""Which release's code this module plays."""
RAN: list[str] = []


@wf.step
def mail(user: str) -> str:
    RAN.append(f"mail on {CODE['deployment']}")
    return "mailed"


@wf.step
def call(user: str) -> str:
    RAN.append(f"call on {CODE['deployment']}")
    return "called"


@wf.workflow
async def onboard(user: str) -> str:
    await wf.sleep(10)
    return await (mail if CODE["deployment"] == "v1" else call)(user)


async def _drain(root: Path, deployment: str, now: float) -> None:
    CODE["deployment"] = deployment
    store = LocalStore(str(root))
    clock = MockClock()
    clock.jump(now - clock.now())
    async with TestEngine(store, clock=clock, deployment=deployment) as engine:
        await wf.Worker(engine, concurrency=2).run(until_idle=True)
    await store.close()


async def _upgrade_cut_at(root: Path, write: int) -> tuple[str, bool, float]:
    """A v1 run asleep, then an upgrade to v2 that fails at its ``write``-th change."""
    CODE["deployment"] = "v1"
    clock = MockClock(autojump=False)
    store = LocalStore(str(root))
    async with TestEngine(store, clock=clock, deployment="v1") as engine:
        engine.suspend_after = 0.0
        run = await wf.start(onboard, "ann", detach=True)
        await run.settle(timeout=10)
    await store.close()
    CODE["deployment"] = "v2"
    store = LocalStore(str(root))
    with _fsops.inject("*", errno.EIO, after=write) as fault, contextlib.suppress(StoreError):
        await deployments.upgrade(store, "v1", "v2")  # as if the process died at that write
    await store.close()
    return run.id, fault.hits > 0, clock.now()


async def test_an_upgrade_cut_short_anywhere_leaves_the_run_to_one_deployment(
    tmp_path: Path,
) -> None:
    write = 0
    while True:
        root = tmp_path / str(write)
        RAN.clear()
        run_id, cut, now = await _upgrade_cut_at(root, write)
        if not cut:
            break  # past the upgrade's last write
        await _drain(root, "v1", now + 20)
        await _drain(root, "v2", now + 20)
        store = LocalStore(str(root))
        record = await store.get_run(run_id)
        listed = [r.id for r in await store.list_runs(deployment=record.deployment)]
        problems = await store.verify()
        await store.close()
        step = "mail" if record.deployment == "v1" else "call"
        assert (record.status, RAN) == (
            wf.RunStatus.COMPLETED,
            [f"{step} on {record.deployment}"],
        ), write
        assert listed == [run_id], write
        assert problems == [], (write, problems)
        write += 1
    assert write > 10  # the sweep went through the whole re-pin
