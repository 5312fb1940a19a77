"""``wf check``: wired to the analyzer with its exit codes."""

from __future__ import annotations

import json
from pathlib import Path

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
