"""Run trees and composed workflows across processes: ``wf cancel --children``, the links
``wf inspect --json`` shows (parent, children, races, compensations), the fan-out, saga and
parent/child examples, and SIGKILL-then-``wf worker`` recovery of gather, select, timeout, child
and rollback workflows.

Every step here appends ``start <name>`` / ``end <name>`` to a log file that survives the kill,
so a test can count how often each step really ran: a step whose completion was durable before
the kill must have run exactly once.
"""

from __future__ import annotations

import asyncio
import collections
import json
import os
import signal
import time
from typing import Any

import pytest

import wf
from tests.cli.conftest import Project
from tests.cli.flows import append, log_dir

HERE = "tests.cli.test_children_cli"


# -- steps that leave traces -----------------------------------------------------------------


async def _trace(name: str) -> str:
    append("ticks", f"start {name} {os.getpid()}")
    if (log_dir() / f"hold_{name}").exists():
        deadline = time.monotonic() + 30
        while not (log_dir() / f"release_{name}").exists() and time.monotonic() < deadline:
            await asyncio.sleep(0.01)  # the test kills the process while we are here
    append("ticks", f"end {name} {os.getpid()}")
    return name


@wf.step
async def tick(name: str) -> str:
    return await _trace(name)


@wf.step
async def undo(name: str) -> str:
    return await _trace(f"undo-{name}")


@wf.step
async def slow(name: str) -> str:
    append("ticks", f"start {name} {os.getpid()}")
    await asyncio.sleep(20)  # always loses its race (and is cancelled)
    return name


@wf.step
def refuse(name: str) -> None:
    append("ticks", f"start {name} {os.getpid()}")
    raise wf.FatalError(f"{name} refused")


# -- workflows -------------------------------------------------------------------------------


@wf.workflow
async def fan() -> list[str]:
    return list(await asyncio.gather(tick("a"), tick("b"), tick("c")))


@wf.workflow
async def race() -> list[Any]:
    index, winner = await wf.select(tick("fast"), slow("slow"))
    return [index, winner, await tick("after")]


@wf.workflow
async def timed() -> list[str]:
    try:
        async with wf.timeout(0.3):
            await tick("inside")
            await wf.sleep(25)  # shorter than WF_SUSPEND_AFTER: the run stays live, and expires
        outcome = "in time"
    except TimeoutError:
        outcome = "timed out"
    return [outcome, await tick("after")]


@wf.workflow
async def kid() -> list[str]:
    return [await tick("k1"), await tick("k2")]


@wf.workflow
async def guardian() -> list[Any]:
    before = await tick("p-before")
    child: wf.Run[list[str]] = await wf.start(kid)
    return [before, await child.result(), await tick("p-after")]


@wf.workflow
async def saga() -> None:
    await tick("book")
    wf.rollback(undo, "a")
    await tick("hold")
    wf.rollback(undo, "b")
    await refuse("pay")


@wf.workflow
async def leaf(n: int) -> str:
    await wf.sleep(600)
    return f"leaf {n}"


@wf.workflow
async def branch(n: int) -> str:
    child: wf.Run[str] = await wf.start(leaf, n)
    return await child.result()


@wf.workflow
async def tree() -> list[str]:
    branches: list[wf.Run[str]] = [await wf.start(branch, n) for n in range(2)]
    return [await b.result() for b in branches]


# -- helpers ---------------------------------------------------------------------------------


def starts(project: Project) -> collections.Counter[str]:
    return collections.Counter(
        line.split()[1] for line in project.lines("ticks") if line.startswith("start ")
    )


def started(project: Project, name: str) -> bool:
    return starts(project)[name] > 0


def completed_rows(project: Project, run_id: str) -> int:
    """How many of the run's steps have a durable completion in its journal."""
    try:
        rows = project.gather(run_id)["steps"]
    except Exception:
        return 0
    return sum(1 for row in rows if row["kind"] == "step" and row["status"] == "completed")


def kill_and_recover(
    project: Project, target: str, run_id: str, held: str, ready: Any
) -> dict[str, Any]:
    """``wf run TARGET`` until ``ready()``, SIGKILL it while step ``held`` blocks, then let
    ``wf worker --until-idle`` finish the run; returns its ``wf inspect --json`` data."""
    (project.log / f"hold_{held}").touch()
    proc = project.spawn("run", target, "--id", run_id, "-q")
    project.wait_for(lambda: started(project, held) and ready())
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    (project.log / f"release_{held}").touch()
    worker = project.wf("worker", "--until-idle", "--poll", "0.2")
    assert worker.returncode == 0, worker.stderr
    assert "Traceback" not in worker.stderr
    data = project.gather(run_id)
    assert data["run"]["resumes"] >= 1
    return data


# -- SIGKILL, then wf worker -----------------------------------------------------------------


def test_gather_after_sigkill_runs_only_the_unfinished_branch_again(project: Project) -> None:
    data = kill_and_recover(
        project, f"{HERE}:fan", "g", "c", lambda: completed_rows(project, "g") == 2
    )
    assert data["run"]["status"] == "completed"
    assert data["run"]["output"] == ["a", "b", "c"]
    assert starts(project) == {"a": 1, "b": 1, "c": 2}


def test_select_after_sigkill_replays_the_recorded_winner(project: Project) -> None:
    data = kill_and_recover(project, f"{HERE}:race", "s", "after", lambda: True)
    assert data["run"]["status"] == "completed"
    assert data["run"]["output"] == [0, "fast", "after"]
    assert starts(project) == {"fast": 1, "slow": 1, "after": 2}  # the loser never ran again
    [decided] = data["races"]
    assert (decided["op"], decided["winner"]) == (2, 0)  # op 2: its arguments took 0 and 1


def test_timeout_after_sigkill_replays_the_expiry(project: Project) -> None:
    data = kill_and_recover(project, f"{HERE}:timed", "t", "after", lambda: True)
    assert data["run"]["status"] == "completed"
    assert data["run"]["output"] == ["timed out", "after"]
    assert starts(project) == {"inside": 1, "after": 2}


def test_child_run_after_sigkill_of_the_process_driving_parent_and_child(
    project: Project,
) -> None:
    data = kill_and_recover(project, f"{HERE}:guardian", "p", "k2", lambda: True)
    assert data["run"]["status"] == "completed"
    assert data["run"]["output"] == ["p-before", ["k1", "k2"], "p-after"]
    assert starts(project) == {"p-before": 1, "k1": 1, "k2": 2, "p-after": 1}
    [child] = data["children"]
    assert child == {"id": "p.1", "workflow": f"{HERE}:kid", "status": "completed", "op": 1}
    assert project.gather("p.1")["parent"] == {
        "id": "p",
        "workflow": f"{HERE}:guardian",
        "status": "completed",
    }


def test_rollback_after_sigkill_mid_compensation_finishes_compensating(
    project: Project,
) -> None:
    data = kill_and_recover(project, f"{HERE}:saga", "r", "undo-a", lambda: True)
    assert data["run"]["status"] == "failed"
    assert "pay refused" in data["why"]
    # undo-b compensated before the kill and is not repeated; undo-a was interrupted.
    assert starts(project) == {"book": 1, "hold": 1, "pay": 1, "undo-b": 1, "undo-a": 2}
    comp = data["compensations"]
    assert [(r["op"], r["name"]) for r in comp["registered"]] == [(1, "undo"), (3, "undo")]
    assert [(r["name"], r["status"]) for r in comp["ran"]] == [
        ("undo", "completed"),
        ("undo", "completed"),
    ]
    assert [r["op"] for r in comp["ran"]] == [5, 6]
    assert comp["errors"] == []


# -- wf cancel --children --------------------------------------------------------------------


def test_cancel_children_cancels_the_whole_tree(project: Project) -> None:
    waiting = project.spawn("run", f"{HERE}:tree", "--id", "t", WF_SUSPEND_AFTER="0.1")
    ids = {"t", "t.0", "t.1", "t.0.0", "t.1.0"}

    def all_suspended() -> bool:
        runs = {r["id"]: r["status"] for r in project.runs()}
        return set(runs) == ids and all(s == "suspended" for s in runs.values())

    project.wait_for(all_suspended)
    children = project.gather("t")["children"]
    assert sorted((c["id"], c["op"]) for c in children) == [("t.0", 0), ("t.1", 1)]
    assert project.gather("t.0.0")["parent"]["id"] == "t.0"

    result = project.wf("cancel", "t", "--children")
    assert result.returncode == 0, result.stderr
    # A run whose drive the exiting `wf run` left (it exits once its root is cancelled) may be
    # recovered here first, and the recovery says so.
    lines = [line for line in result.stderr.splitlines() if "; driving it again (" not in line]
    assert sorted(lines) == sorted(f"run {rid}: cancelled" for rid in ids)
    assert lines[0] == "run t: cancelled"  # the root first, then its descendants
    assert {r["id"]: r["status"] for r in project.runs()} == dict.fromkeys(ids, "cancelled")
    _, err = waiting.communicate(timeout=30)
    assert waiting.returncode == 1
    assert err.strip().splitlines()[-1] == "error: run t was cancelled"

    again = project.cli("cancel", "t", "--children")
    assert again.exit_code == 0
    assert "run t.1.0 has already ended: cancelled" in again.stderr


def test_cancel_children_without_waiting_leaves_the_tree_to_a_worker(project: Project) -> None:
    proc = project.spawn("run", f"{HERE}:branch", "-i", "7", "--id", "b", WF_SUSPEND_AFTER="0.1")
    project.wait_for(lambda: project.status("b.0") == "suspended" == project.status("b"))
    proc.send_signal(signal.SIGKILL)  # both stay suspended, durably
    proc.wait()

    result = project.cli("cancel", "b", "--children", "--no-wait")
    assert result.exit_code == 0, result.stderr
    assert "cancellation of run b requested" in result.stderr
    assert "cancellation of run b.0 requested" in result.stderr
    assert project.cli("worker", "--until-idle").exit_code == 0
    assert (project.status("b"), project.status("b.0")) == ("cancelled", "cancelled")


def test_cancel_children_of_an_unknown_run_is_exit_2(project: Project) -> None:
    result = project.cli("cancel", "nope", "--children")
    assert result.exit_code == 2
    assert result.stderr.strip() == "error: no run with id 'nope'"


# -- the examples ----------------------------------------------------------------------------


def test_fanout_example(project: Project) -> None:
    result = project.cli(
        "run", "examples.fanout:fanout", "-i", '{"words": ["durable", "fan", "out"]}'
    )
    assert result.exit_code == 0, result.stderr
    assert json.loads(result.stdout) == {
        "lengths": [7, 3, 3],
        "total": 13,
        "loudest": "DURABLE",
        "first": "DURABLE",
    }


@pytest.mark.parametrize("card", ["declined", "ok"])
def test_saga_example_compensates_a_failed_payment(project: Project, card: str) -> None:
    result = project.cli(
        "run",
        "examples.saga:book_trip",
        "-i",
        json.dumps({"trip": "rome", "card": card}),
        "--id",
        "trip",
    )
    data = project.gather("trip")
    comp = data["compensations"]
    assert [r["name"] for r in comp["registered"]] == ["cancel_flight", "cancel_hotel"]
    if card == "ok":
        assert result.exit_code == 0
        assert json.loads(result.stdout) == ["flight:rome", "hotel:rome", "paid:rome"]
        assert comp["ran"] == []
        return
    assert result.exit_code == 1
    assert "card 'declined' declined for rome" in result.stderr
    assert [(r["name"], r["status"]) for r in comp["ran"]] == [
        ("cancel_hotel", "completed"),
        ("cancel_flight", "completed"),
    ]
    inspect = project.cli("inspect", "trip")
    assert "ran cancel_hotel" in inspect.stdout


def test_parent_child_example(project: Project) -> None:
    result = project.cli(
        "run",
        "examples.parent_child:assemble",
        "-i",
        '{"parts": ["wheel", "frame"]}',
        "--id",
        "bike",
    )
    assert result.exit_code == 0, result.stderr
    assert json.loads(result.stdout) == ["wheel built", "frame built"]
    children = project.gather("bike")["children"]
    assert sorted((c["id"], c["status"], c["op"]) for c in children) == [
        ("bike.0", "completed", 0),
        ("bike.1", "completed", 1),
    ]
    assert project.gather("bike.1")["parent"]["id"] == "bike"
    assert project.gather("bike")["parent"] is None
