"""Where a run's code is found again: a workflow of a script run as ``python3 script.py`` is
recorded under the script's module name (not ``__main__``), and a project file whose path is no
module path (``sub dir/ok.py``, ``2bad/f.py``) by its path, so a worker can load either."""

from __future__ import annotations

import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from tests.cli.conftest import Project

FLOW = """\
import wf


@wf.workflow
async def x() -> int:
    return 1
"""

SCRIPT = """\
import asyncio

import wf


@wf.step
def one() -> int:
    return 1


@wf.workflow
async def w() -> int:
    return await one() + 1


async def main() -> None:
    run = await wf.start(w, run_id="ff1", detach=True)  # left for a worker
    print((await run.record()).target)
    await wf.start(w, run_id="ff2", detach=True)


if __name__ == "__main__":
    asyncio.run(main())
"""


def _python(project: Project, script: str, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, script, *args],
        cwd=project.root,
        env=project.env,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )


def _pyproject(root: Path) -> None:
    (root / "pyproject.toml").write_text('[project]\nname = "x"\n\n[tool.wf]\nmodules = []\n')


@pytest.mark.parametrize("path", ["sub dir/ok.py", "2bad/f.py", "sub/my-flows.py"])
def test_a_project_file_of_no_module_path_is_recorded_by_its_path(
    project: Project, path: str
) -> None:
    # Was: recorded as `ok:x` / `f:x`, which no worker could import.
    _pyproject(project.root)
    file = project.root / path
    file.parent.mkdir(parents=True)
    file.write_text(FLOW)
    started = project.wf("run", f"{path}:x", "--detach")
    assert started.returncode == 0, started.stderr
    [run] = project.runs()
    assert run["target"] == f"{file.resolve()}:x"
    worked = project.wf("worker", "--until-idle")
    assert worked.returncode == 0, worked.stderr
    assert [r["status"] for r in project.runs()] == ["completed"]


def test_a_project_file_of_a_module_path_is_still_recorded_by_its_module(
    project: Project,
) -> None:
    _pyproject(project.root)
    (project.root / "sub").mkdir()
    (project.root / "sub" / "ok.py").write_text(FLOW)
    assert project.wf("run", "sub/ok.py:x", "--detach").returncode == 0
    [run] = project.runs()
    assert run["target"] == "sub.ok:x"


def test_a_scripts_workflow_is_recorded_under_the_scripts_module_name(project: Project) -> None:
    # Was: `__main__:w`, which no worker can import: a run the script did not finish could
    # never be resumed (the worker logged an ERROR for it for ever, --until-idle exited 1).
    _pyproject(project.root)
    (project.root / "jobs").mkdir()
    (project.root / "jobs" / "script.py").write_text(SCRIPT)
    ran = _python(project, "jobs/script.py")
    assert ran.returncode == 0, ran.stderr
    assert ran.stdout.strip() == "jobs.script:w"
    assert "only" not in ran.stderr  # no warning: a worker loads it
    assert sorted(r["workflow"] for r in project.runs()) == ["jobs.script:w"] * 2
    worked = project.wf("worker", "--until-idle")
    assert worked.returncode == 0, worked.stderr
    assert [r["status"] for r in project.runs()] == ["completed"] * 2


def test_a_script_no_worker_can_import_warns_once_at_its_first_start(project: Project) -> None:
    _pyproject(project.root)
    (project.root / "my-script.py").write_text(SCRIPT)
    ran = _python(project, "my-script.py")
    assert ran.returncode == 0, ran.stderr
    assert ran.stdout.strip() == "None"
    warned = [line for line in ran.stderr.splitlines() if "__main__:w" in line]
    assert len(warned) == 1, ran.stderr  # two starts, one warning
    assert "my-script.py" in warned[0] and "only" in warned[0]
    assert textwrap.shorten(warned[0], 40)  # one line


RESUMED = """\
import asyncio
import sys

import wf


@wf.step
def part(x: int) -> int:
    return x * 2


@wf.workflow
async def assemble(n: int) -> int:
    return await part(n) + 1


async def main() -> None:
    if sys.argv[1] == "start":
        run = await wf.start(assemble, 3, run_id="nightly-1", detach=True)
        print((await run.record()).workflow)
    else:
        run = await wf.start(assemble, 3, run_id="nightly-1")
        print(await run.result(timeout=30))


if __name__ == "__main__":
    asyncio.run(main())
"""


def test_a_run_recorded_under_main_is_resumed_by_the_script_declaring_it_now(
    project: Project,
) -> None:
    # An older wf recorded a script's workflow as __main__:assemble (here: a file of no module
    # path, which still is); the script, now declaring it as jobs.nightly:assemble, is started
    # again with the same run id. Was: RunAlreadyExists "exists already for workflow
    # '__main__:assemble'".
    _pyproject(project.root)
    (project.root / "old-nightly.py").write_text(RESUMED)
    started = _python(project, "old-nightly.py", "start")
    assert started.returncode == 0, started.stderr
    assert started.stdout.strip() == "__main__:assemble"
    (project.root / "jobs").mkdir()
    (project.root / "old-nightly.py").rename(project.root / "jobs" / "nightly.py")
    resumed = _python(project, "jobs/nightly.py", "resume")
    assert resumed.returncode == 0, resumed.stderr
    assert resumed.stdout.strip() == "7"
    [run] = project.runs()
    assert (run["workflow"], run["status"]) == ("__main__:assemble", "completed")


UNGUARDED = SCRIPT.replace(
    'if __name__ == "__main__":\n    asyncio.run(main())', "asyncio.run(main())"
)


def test_a_script_with_an_unguarded_asyncio_run_keeps_main_and_says_why(
    project: Project,
) -> None:
    # Was: recorded as jobs.unguarded:w, so `wf worker` imported the script, whose bare
    # asyncio.run(main()) started its runs again (two runs more per worker import).
    assert "\nasyncio.run(main())" in UNGUARDED
    _pyproject(project.root)
    (project.root / "jobs").mkdir()
    (project.root / "jobs" / "unguarded.py").write_text(UNGUARDED)
    ran = _python(project, "jobs/unguarded.py")
    assert ran.returncode == 0, ran.stderr
    assert ran.stdout.strip() == "None"  # no target: no worker imports it
    assert sorted(r["workflow"] for r in project.runs()) == ["__main__:w"] * 2
    warned = [line for line in ran.stderr.splitlines() if "__main__:w" in line]
    assert len(warned) == 1 and 'if __name__ == "__main__"' in warned[0], ran.stderr
    project.wf("worker", "--until-idle")
    assert len(project.runs()) == 2  # the worker started no run of its own
