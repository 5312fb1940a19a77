"""A real crash in the middle of the agent loop: the process driving the run is SIGKILLed, and
a worker finishes the run from the journal — no model request repeated, no tool call whose
completion was recorded run again."""

from __future__ import annotations

import collections
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.cli.conftest import Project


@pytest.fixture
def project(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Project]:
    proj = Project(tmp_path)
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("WF_DIR", str(proj.store_dir))
    monkeypatch.setenv("WF_TEST_LOG", str(proj.log))
    yield proj


def calls(project: Project) -> list[tuple[str, str]]:
    """(call, pid) per model request / tool call, in the order they started."""
    return [(" ".join(line.split()[:-1]), line.split()[-1]) for line in project.lines("calls")]


def step_rows(project: Project, run_id: str) -> list[tuple[str, str]]:
    return [(row["name"], row["status"]) for row in project.gather(run_id)["steps"]]


@pytest.mark.parametrize(
    ("hold", "recorded", "again", "held"),
    [
        # Killed while the third model request streams: two requests and two tool calls done.
        ("hold_3", 4, "model 'twice'", 3),
        # Killed inside the second tool call: its completion was never recorded, so it runs again.
        ("hold_tool_2", 3, "tool add 2 1", 1),
    ],
)
def test_sigkill_mid_loop_then_a_worker_finishes_without_repeating_recorded_steps(
    project: Project, hold: str, recorded: int, again: str, held: int
) -> None:
    (project.log / hold).touch()
    proc = project.spawn("run", "tests.ai.flows:ask", "-i", '"twice"', "--id", "agent-crash")
    # Until the held call has started (it is the ``held``-th of its kind) ...
    # (generous bounds: the process imports Pydantic AI first, which is slow on a busy machine)
    project.wait_for(lambda: [c for c, _ in calls(project)].count(again) == held, timeout=90)
    # ... and what came before it is in the journal.
    project.wait_for(
        lambda: sum(s == "completed" for _, s in step_rows(project, "agent-crash")) == recorded,
        timeout=90,
    )
    proc.kill()
    proc.wait()
    before = calls(project)
    assert project.status("agent-crash") == "running"  # as the dead process left it

    (project.log / hold).unlink()
    worker = project.wf("worker", "--until-idle", "--poll", "0.2", timeout=100)
    assert worker.returncode == 0, worker.stderr

    data = project.gather("agent-crash")
    assert data["run"]["status"] == "completed", data["run"]
    assert data["run"]["output"] == "The result is 3."
    after = calls(project)[len(before) :]
    # The worker made only the call that was cut short, and what followed it.
    assert after[0][0] == again
    assert all(pid != before[0][1] for _, pid in after)
    everything = collections.Counter(c for c, _ in calls(project))
    assert everything["tool add 1 1"] == 1  # recorded: never again
    assert everything["model 'twice'"] == 3 + (again == "model 'twice'")
    assert everything["tool add 2 1"] == 1 + (again == "tool add 2 1")
    names = [name for name, _ in step_rows(project, "agent-crash")]
    assert names == [
        "calc__model.request_stream",
        "calc__function_toolset__<agent>.call_tool:add",
        "calc__model.request_stream",
        "calc__function_toolset__<agent>.call_tool:add",
        "calc__model.request_stream",
    ]
