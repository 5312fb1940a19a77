"""``wf worker`` settles its process's heap after start-up (``wf.cli._heap``), and only a
process the ``wf`` command owns: a caller of the Typer app keeps its collector as it is."""

from __future__ import annotations

import gc
import json

from tests.cli.conftest import Project

COLLECTOR = "tests.cli.flows:collector"


def _enqueue(project: Project) -> str:
    result = project.cli("run", COLLECTOR, "--detach")
    assert result.exit_code == 0, result.stderr
    return str(result.stdout.strip().split()[-1])


def _output(project: Project, run_id: str) -> dict[str, object]:
    detail = json.loads(project.cli("inspect", run_id, "--json").stdout)
    assert detail["run"]["status"] == "completed", detail["run"]
    output = detail["run"]["output"]
    return dict(output if isinstance(output, dict) else json.loads(output))


def test_a_wf_worker_process_drives_runs_with_start_up_frozen(project: Project) -> None:
    run_id = _enqueue(project)
    worker = project.wf("worker", "--until-idle", timeout=60)
    assert worker.returncode == 0, worker.stderr
    state = _output(project, run_id)
    assert isinstance(state["frozen"], int) and state["frozen"] > 10_000  # modules and all
    assert state["threshold"] == [10_000, *list(gc.get_threshold())[1:]]


def test_the_app_called_in_process_leaves_the_callers_collector_alone(project: Project) -> None:
    before = gc.get_freeze_count(), gc.get_threshold()
    run_id = _enqueue(project)
    assert project.cli("worker", "--until-idle").exit_code == 0
    assert (gc.get_freeze_count(), gc.get_threshold()) == before
    assert _output(project, run_id)["frozen"] == before[0]
