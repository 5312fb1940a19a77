"""What a workflow module prints while it is imported never lands on a command's stdout.

stdout carries the command's result and nothing else (docs/cli.md): a module that prints a
banner at import (through ``print`` or descriptor 1 itself) must not break ``wf run --json |
jq``, nor the run id ``wf hook resume`` prints, nor any other command that imports user code.
"""

from __future__ import annotations

import json
from pathlib import Path

from tests.cli.conftest import Project

MODULE = """\
import os
import wf

print("banner at import")
os.write(1, b"fd banner at import\\n")


@wf.workflow
async def done() -> int:
    return 1


@wf.workflow
async def waits() -> str:
    return await wf.create_hook(str, token="tok-banner").next()


@wf.workflow
async def fails() -> int:
    raise ValueError("boom")
"""


def _write(project: Project) -> None:
    Path(project.root, "loud.py").write_text(MODULE)


def _quiet_stdout(result: object, expected: str) -> None:
    out: str = result.stdout  # type: ignore[attr-defined]
    err: str = result.stderr  # type: ignore[attr-defined]
    assert "banner" not in out, out
    assert out == expected, out
    assert "banner at import" in err and "fd banner at import" in err, err


def test_wf_run_json_is_json_when_the_module_prints_at_import(project: Project) -> None:
    _write(project)
    result = project.wf("run", "loud.py:done", "--json")
    assert result.returncode == 0, result.stderr
    doc = json.loads(result.stdout)
    assert doc["output"] == 1
    _quiet_stdout(result, result.stdout.split("\n", 1)[0] + "\n")


def test_hook_resume_prints_the_run_id_only(project: Project) -> None:
    _write(project)
    started = project.wf("run", "loud.py:waits", "--id", "r-hook")
    assert started.returncode == 0, started.stderr
    assert started.stdout == "r-hook\n"
    # A fresh process imports the module again to drive the run here.
    result = project.wf("hook", "resume", "tok-banner", "--data", '"yes"')
    assert result.returncode == 0, result.stderr
    _quiet_stdout(result, "r-hook\n")


def test_retry_and_cancel_keep_stdout_for_their_result(project: Project) -> None:
    _write(project)
    failed = project.wf("run", "loud.py:fails", "--id", "r-fail")
    assert failed.returncode == 1
    retried = project.wf("retry", "r-fail", "--json")
    assert retried.returncode == 1, retried.stderr
    assert json.loads(retried.stdout)["status"] == "failed"
    _quiet_stdout(retried, retried.stdout.split("\n", 1)[0] + "\n")
    waiting = project.wf("run", "loud.py:waits", "--id", "r-cancel")
    assert waiting.returncode == 0, waiting.stderr
    cancelled = project.wf("cancel", "r-cancel")  # drives the run here, importing the module
    assert cancelled.returncode == 0, cancelled.stderr
    _quiet_stdout(cancelled, "")


def test_schedule_set_and_replay_check_keep_stdout_for_their_result(project: Project) -> None:
    _write(project)
    scheduled = project.wf("schedule", "set", "s-hourly", "loud.py:done", "--cron", "0 * * * *")
    assert scheduled.returncode == 0, scheduled.stderr
    assert "banner" not in scheduled.stdout, scheduled.stdout
    assert "banner at import" in scheduled.stderr
    assert project.wf("run", "loud.py:done").returncode == 0
    replay = project.wf("check", "--replay", "--json")
    assert replay.returncode == 0, replay.stderr
    assert json.loads(replay.stdout)["summary"]["ok"] == 1
    _quiet_stdout(replay, replay.stdout.split("\n", 1)[0] + "\n")
