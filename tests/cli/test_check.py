"""``wf check``: wired to the analyzer with its exit codes."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.cli.conftest import REPO, Project

BAD = """\
import time

import wf


@wf.workflow
async def flow() -> None:
    time.sleep(1)
"""


def test_clean_code_exits_0(project: Project) -> None:
    result = project.cli("check", str(REPO / "examples"))
    assert result.exit_code == 0, result.stdout
    assert "All checks passed" in result.stdout


def test_findings_exit_1_as_text_and_json(project: Project) -> None:
    Path("bad.py").write_text(BAD)
    result = project.cli("check", "bad.py")
    assert result.exit_code == 1
    assert "WF302" in result.stdout
    as_json = project.cli("check", "--json")
    assert as_json.exit_code == 1
    assert json.loads(as_json.stdout)["summary"]["findings"] == 1
    assert project.cli("check", "bad.py", "--ignore", "WF302").exit_code == 0


def test_usage_errors_exit_2(project: Project) -> None:
    missing = project.cli("check", "nowhere")
    assert missing.exit_code == 2
    assert missing.stderr.startswith("error: nowhere")
    unknown = project.cli("check", "--select", "WF9")
    assert unknown.exit_code == 2
    assert "unknown rule selector" in unknown.stderr


def test_wf_check_rules_from_the_environment(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """[tool.wf.check] < WF_CHECK_* < the command line, as for every setting."""
    from typer.testing import CliRunner

    from wf.cli._app import build_app

    monkeypatch.chdir(tmp_path)
    (tmp_path / "flows.py").write_text(
        "import time\nimport wf\n\n\n@wf.workflow\nasync def f() -> float:\n"
        "    return time.time()\n"
    )
    runner = CliRunner()
    assert runner.invoke(build_app(), ["check"]).exit_code == 1
    monkeypatch.setenv("WF_CHECK_IGNORE", "WF101")
    assert runner.invoke(build_app(), ["check"]).exit_code == 0
    # The command line's --ignore replaces the variable's (and adds to the table's).
    assert runner.invoke(build_app(), ["check", "--ignore", "WF2"]).exit_code == 1
