"""Deployments across processes: real ``wf run`` / ``wf worker`` / ``wf deployments``
subprocesses of two code versions (two project copies, ``v1/`` and ``v2/``) sharing one store,
on the local store and on PostgreSQL (issue #36).

* runs started under v1, under v2 and unpinned: a v2 ``--until-idle`` worker drives the v2 and
  unpinned ones (on v2's code) and exits with the v1 runs pending; a v1 worker then drives
  those on v1's code;
* ``wf deployments upgrade v1 --to v2`` re-pins the suspended v1 runs that replay on v2's code
  and leaves the one that diverges, which a v1 worker then finishes while the v2 worker
  finishes the others;
* a worker without an id drives every run, as before deployments;
* serving workers are listed per deployment while they live (``wf deployments``), and a run
  pinned to a deployment none of them serves says so in ``wf inspect``.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

from tests.reliability.test_queue_procs import Target, target  # noqa: F401 - the fixture

FLOWS = """
import wf

VERSION = "{version}"


@wf.step
async def tag(x: str) -> str:
    return VERSION + ":" + x


@wf.step
async def one(x: str) -> str:
    return "one:" + x


@wf.step
async def renamed(x: str) -> str:
    return "renamed:" + x


@wf.step
async def two(x: str) -> str:
    return VERSION + ":two:" + x


@wf.workflow
async def quick(x: str) -> str:
    return await tag(x)


@wf.workflow
async def staged(x: str) -> str:
    {first}
    await wf.create_hook(dict, token="go-" + x).next()
    return first + "|" + await two(x)
"""

V1_FIRST = "first = await one(x)"
V2_FIRST = 'first = await (renamed(x) if x == "odd" else one(x))'


def project(root: Path, version: str, first: str) -> Path:
    where = root / version
    where.mkdir()
    (where / "flows.py").write_text(FLOWS.format(version=version, first=first))
    return where


def wf_json(shared: Target, cwd: Path, deployment: str | None, *args: str) -> Any:
    """The JSON ``wf ARGS`` prints on stdout (stderr may carry warnings, e.g. Redis's)."""
    env = dict(shared.env)
    if deployment is not None:
        env["WF_DEPLOYMENT"] = deployment
    done = subprocess.run(
        [sys.executable, "-m", "wf", *args], cwd=cwd, env=env, capture_output=True, timeout=120
    )
    assert done.returncode in (0, 1), done.stderr.decode()
    return json.loads(done.stdout)


def wf_cli(shared: Target, cwd: Path, deployment: str | None, *args: str) -> str:
    """``wf ARGS`` in ``cwd`` on the shared store, as a process of ``deployment``."""
    env = dict(shared.env)
    if deployment is not None:
        env["WF_DEPLOYMENT"] = deployment
    done = subprocess.run(
        [sys.executable, "-m", "wf", *args],
        cwd=cwd,
        env=env,
        capture_output=True,
        timeout=120,
    )
    assert done.returncode in (0, 1), done.stderr.decode()
    return done.stdout.decode() + done.stderr.decode()


def start(shared: Target, cwd: Path, deployment: str | None, flow: str, x: str) -> str:
    """Queue a run of ``flows:FLOW`` with input ``x``; its id."""
    out = wf_cli(shared, cwd, deployment, "run", f"flows:{flow}", "--input", json.dumps(x), "-d")
    return out.split()[0]


def runs_of(shared: Target, cwd: Path) -> dict[str, dict[str, Any]]:
    """Every run of the store by id, as ``wf runs --json`` prints them."""
    env = dict(shared.env)
    done = subprocess.run(
        [sys.executable, "-m", "wf", "runs", "--json", "--limit", "200"],
        cwd=cwd,
        env=env,
        capture_output=True,
        timeout=120,
        check=True,
    )
    return {r["id"]: r for r in json.loads(done.stdout)}


def test_workers_drive_their_deployment_and_upgrade_moves_what_replays(
    target: Target,  # noqa: F811 - the fixture
) -> None:
    root = target.root
    v1 = project(root, "v1", V1_FIRST)
    v2 = project(root, "v2", V2_FIRST)
    if target.kind == "local":
        target.env["WF_DIR"] = str(root / ".workflows")  # one store for both projects
    quick1 = start(target, v1, "v1", "quick", "a")
    quick2 = start(target, v2, "v2", "quick", "b")
    loose = start(target, v2, None, "quick", "c")

    said = wf_cli(target, v2, "v2", "worker", "--until-idle", "--poll", "0.2")
    assert "pinned to deployment v1" in said
    runs = runs_of(target, v2)
    assert runs[quick2]["status"] == "completed" and runs[quick2]["output"] == "v2:b"
    assert runs[loose]["status"] == "completed" and runs[loose]["output"] == "v2:c"
    assert runs[quick1]["status"] == "pending"  # not v2's to drive
    assert runs[quick1]["deployment"] == "v1" and runs[loose]["deployment"] is None

    wf_cli(target, v1, "v1", "worker", "--until-idle", "--poll", "0.2")
    runs = runs_of(target, v1)
    assert runs[quick1]["status"] == "completed" and runs[quick1]["output"] == "v1:a"

    # Runs of v1 that suspended half-way: two replay on v2's code, "odd" diverges there.
    staged = {x: start(target, v1, "v1", "staged", x) for x in ("p", "q", "odd")}
    wf_cli(target, v1, "v1", "worker", "--until-idle", "--poll", "0.2")
    assert {runs_of(target, v1)[r]["status"] for r in staged.values()} == {"suspended"}

    listed = wf_json(target, v2, "v2", "deployments", "--json")
    by_id = {d["deployment"]: d for d in listed["deployments"]}
    assert by_id["v1"]["runs"] == {"completed": 1, "suspended": 3}
    assert by_id["v2"]["runs"] == {"completed": 1}

    upgrade = ("deployments", "upgrade", "v1", "--json")
    dry = wf_json(target, v2, "v2", *upgrade, "--dry-run")
    assert sorted(dry["moved"]) == sorted([staged["p"], staged["q"]])
    assert runs_of(target, v2)[staged["p"]]["deployment"] == "v1"  # a dry run moves nothing
    done = wf_json(target, v2, "v2", *upgrade)
    assert sorted(done["moved"]) == sorted([staged["p"], staged["q"]])
    [kept] = done["kept"]
    assert kept["run_id"] == staged["odd"] and kept["status"] == "diverged"
    assert "one" in kept["divergence"]["recorded"] and "renamed" in kept["divergence"]["current"]
    runs = runs_of(target, v2)
    assert runs[staged["p"]]["deployment"] == "v2" and runs[staged["odd"]]["deployment"] == "v1"

    for x in staged:
        wf_cli(target, v2, None, "hook", "resume", "go-" + x, "--data", "{}", "--no-wait")
    wf_cli(target, v2, "v2", "worker", "--until-idle", "--poll", "0.2")
    runs = runs_of(target, v2)
    assert runs[staged["p"]]["output"] == "one:p|v2:two:p"
    assert runs[staged["q"]]["output"] == "one:q|v2:two:q"
    assert runs[staged["odd"]]["status"] != "completed"  # v1's to finish
    wf_cli(target, v1, "v1", "worker", "--until-idle", "--poll", "0.2")
    assert runs_of(target, v1)[staged["odd"]]["output"] == "one:odd|v1:two:odd"


def test_worker_says_nothing_of_others_without_an_id(target: Target) -> None:  # noqa: F811
    v1 = project(target.root, "v1", V1_FIRST)
    run = start(target, v1, "v1", "quick", "a")
    said = wf_cli(target, v1, None, "worker", "--until-idle", "--poll", "0.2")
    assert "pinned to deployment" not in said
    assert runs_of(target, v1)[run]["output"] == "v1:a"  # no id: every run, as before


def test_live_workers_of_each_deployment_are_listed(target: Target) -> None:  # noqa: F811
    """Two serving workers of v1 and one of every deployment register while they live; a
    run of v2 waits for a worker of v2, and says so."""
    v1 = project(target.root, "v1", V1_FIRST)
    start(target, v1, "v1", "quick", "a")
    waiting = start(target, v1, "v2", "quick", "b")
    env = dict(target.env)
    workers = []
    try:
        for deployment, extra in (("v1", ()), ("v1", ()), ("v1", ("--any-deployment",))):
            if extra:  # before a worker of every deployment starts: v2's run is not served
                shown = wf_cli(target, v1, None, "inspect", waiting)
                assert "waiting for a worker of deployment v2" in shown
            worker = subprocess.Popen(
                [sys.executable, "-m", "wf", "worker", "--poll", "0.2", *extra],
                cwd=v1,
                env={**env, "WF_DEPLOYMENT": deployment},
                stdout=subprocess.DEVNULL,
                stderr=subprocess.PIPE,
                text=True,
            )
            workers.append(worker)
            assert worker.stderr is not None
            while "worker started" not in worker.stderr.readline():
                assert worker.poll() is None, "the worker exited"
        listed = wf_json(target, v1, "v1", "deployments", "--json")
        assert listed["workers_of_any_deployment"] == 1
        by_id = {d["deployment"]: d["workers"] for d in listed["deployments"]}
        assert by_id["v1"] == 2
    finally:
        for worker in workers:
            worker.terminate()
            worker.communicate(timeout=30)
    listed = wf_json(target, v1, "v1", "deployments", "--json")
    assert listed["workers_of_any_deployment"] == 0
    assert all(d["workers"] == 0 for d in listed["deployments"])
