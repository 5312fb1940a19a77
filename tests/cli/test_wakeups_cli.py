"""The stuck-run regressions of issue #12 through the command line, across processes.

The workflows live here so that subprocesses import them as ``tests.cli.test_wakeups_cli:NAME``.
"""

from __future__ import annotations

import json
import signal
import time
from typing import Any

import wf
from tests.cli.conftest import Project

HERE = "tests.cli.test_wakeups_cli"


@wf.workflow
async def instant(x: int) -> int:
    return x + 1


@wf.workflow
async def parent(x: int) -> int:
    return await (await wf.start(instant, x)).result()


@wf.step
def bump(x: int) -> int:
    return x + 1


@wf.workflow
async def one_step(x: int) -> int:
    return await bump(x)


@wf.workflow
async def fan_out(x: int) -> list[int]:
    import asyncio

    children = [await wf.start(one_step, x * 10 + i) for i in range(4)]
    return list(await asyncio.gather(*(c.result() for c in children)))


@wf.workflow
async def approval(seconds: float) -> list[Any]:
    hook = wf.create_hook(str, token="approve")
    return list(await wf.select(hook.next(), wf.sleep(seconds)))


@wf.workflow
async def napper() -> str:
    await wf.sleep(3600)
    return "late"


@wf.workflow
async def disposer() -> str:
    hook = wf.create_hook(str, token="once")
    first = await hook.next()
    hook.dispose()
    await wf.sleep(1)
    return first


def run_ids(project: Project) -> dict[str, str]:
    return {r["id"]: r["status"] for r in project.runs()}


def test_wf_run_of_a_parent_awaiting_an_instant_child_returns(project: Project) -> None:
    for n in range(3):
        done = project.wf("run", f"{HERE}:parent", "--input", str(n), timeout=30)
        assert done.returncode == 0, done.stderr
        assert json.loads(done.stdout) == n + 1


def test_detached_parents_with_children_all_complete_under_one_worker(project: Project) -> None:
    for n in range(8):
        assert project.cli("run", f"{HERE}:fan_out", "--input", str(n), "--detach").exit_code == 0
    worker = project.wf("worker", "--until-idle", "--poll", "0.2", timeout=90)
    assert worker.returncode == 0, worker.stderr
    assert set(run_ids(project).values()) == {"completed"}


def test_select_of_a_hook_and_a_timer_times_out_across_suspensions(project: Project) -> None:
    done = project.wf(
        "run", f"{HERE}:approval", "--input", "1.5", timeout=30, WF_SUSPEND_AFTER="0.5"
    )
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout) == [1, None]


def test_a_disposed_hook_replays_after_a_suspension(project: Project) -> None:
    started = project.cli("run", f"{HERE}:disposer", "--detach", "--json")
    run_id = json.loads(started.stdout)["run_id"]
    worker = project.spawn("worker", "--poll", "0.2", WF_SUSPEND_AFTER="0")
    try:
        project.wait_for(lambda: project.status(run_id) == "suspended")
        assert project.cli("hook", "resume", "once", "--data", '"x"').exit_code == 0
        project.wait_for(lambda: project.status(run_id) in ("completed", "failed"))
        assert project.status(run_id) == "completed"
    finally:
        worker.send_signal(signal.SIGTERM)
        worker.communicate(timeout=30)


def test_an_idle_worker_waiting_for_a_timer_still_hears_the_store(project: Project) -> None:
    sleeping = json.loads(project.cli("run", f"{HERE}:napper", "--detach", "--json").stdout)[
        "run_id"
    ]
    worker = project.spawn("worker", "--until-idle", "--poll", "0.2")
    try:
        project.wait_for(lambda: project.status(sleeping) == "suspended")
        # A new run is driven while the worker waits for the one-hour timer...
        new = json.loads(
            project.cli("run", f"{HERE}:instant", "--input", "1", "--detach", "--json").stdout
        )["run_id"]
        project.wait_for(lambda: project.status(new) == "completed", timeout=10)
        # ...and once the run whose timer it waited for is cancelled, it has nothing left.
        assert project.cli("cancel", sleeping).exit_code == 0
        worker.communicate(timeout=10)
        assert worker.returncode == 0
    finally:
        if worker.poll() is None:
            worker.kill()
            worker.communicate()


def test_an_idle_worker_waiting_for_a_timer_stops_at_once_on_sigterm(project: Project) -> None:
    sleeping = json.loads(project.cli("run", f"{HERE}:napper", "--detach", "--json").stdout)[
        "run_id"
    ]
    worker = project.spawn("worker", "--until-idle", "--poll", "5")
    try:
        project.wait_for(lambda: project.status(sleeping) == "suspended")
        time.sleep(0.3)
        began = time.monotonic()
        worker.send_signal(signal.SIGTERM)
        worker.communicate(timeout=10)
        assert time.monotonic() - began < 1.5
    finally:
        if worker.poll() is None:
            worker.kill()
            worker.communicate()
