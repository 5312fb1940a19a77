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


@pytest.mark.parametrize(
    "options",
    [
        ["--select", "ALL", "--ignore", "ALL"],
        ["--ignore", "ALL"],
        ["--select", "WF1", "--ignore", "WF1"],
        ["--ignore", "WF1,WF2,WF3,WF4,WF5"],
    ],
)
def test_options_that_turn_every_rule_off_exit_2_as_an_empty_select_does(
    project: Project, options: list[str]
) -> None:
    # Was: "All checks passed" and exit 0 with no rule on, as `--select ""` was before it.
    Path("bad.py").write_text(BAD)
    result = project.cli("check", "bad.py", *options)
    assert result.exit_code == 2, result.stdout
    assert result.stdout == ""
    [line] = result.stderr.splitlines()
    assert line.startswith("error: select ") and "selects no rule" in line
    empty = project.cli("check", "bad.py", "--select", "")
    assert empty.exit_code == 2 and "selects no rule" in empty.stderr
    # One rule left on is a selection: WF101 is more specific than the ignored WF1.
    assert project.cli("check", "bad.py", "--select", "WF101", "--ignore", "WF1").exit_code == 0


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


def test_excluded_files_from_the_table_or_the_environment(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """check.exclude in [tool.wf] and WF_CHECK_EXCLUDE both work, for wf check and wf dev."""
    from typer.testing import CliRunner

    from wf.cli._app import build_app
    from wf.dev._checking import Checker

    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("WF_CHECK_EXCLUDE", raising=False)
    bad = (
        "import time\nimport wf\n\n\n@wf.workflow\nasync def f() -> float:\n"
        "    return time.time()\n"
    )
    (tmp_path / "legacy").mkdir()
    (tmp_path / "legacy" / "old.py").write_text(bad)
    (tmp_path / "scratch.py").write_text(bad)
    runner = CliRunner()

    def findings() -> set[str]:
        result = runner.invoke(build_app(), ["check", "--json"])
        assert result.exit_code in (0, 1), result.stderr
        return {Path(f["path"]).name for f in json.loads(result.stdout)["findings"]}

    assert findings() == {"old.py", "scratch.py"}
    (tmp_path / "pyproject.toml").write_text('[tool.wf.check]\nexclude = ["legacy/"]\n')
    assert findings() == {"scratch.py"}
    monkeypatch.setenv("WF_CHECK_EXCLUDE", "scratch.py")  # replaces the table's list
    assert findings() == {"old.py"}
    # wf dev checks with the same settings (it names changed files, and skips excluded ones).
    checked = Checker(tmp_path).check([tmp_path / "scratch.py", tmp_path / "legacy" / "old.py"])
    assert {Path(f.path).name for f in checked.result.findings} == {"old.py"}


FORGOTTEN_AWAIT = """\
import wf


@wf.step
def fetch(name: str) -> str:
    return name


@wf.workflow
async def shout(name: str) -> str:
    text = fetch(name)
    return text.upper()
"""


def test_a_forgotten_await_kept_in_a_name_is_found_before_and_named_at_run_time(
    project: Project,
) -> None:
    """The guide's example (``total = compute(x)``): `wf check` flags the line, and running
    it anyway fails with a message that reads as a sentence."""
    Path("flows.py").write_text(FORGOTTEN_AWAIT)
    checked = project.cli("check", "flows.py")
    assert checked.exit_code == 1
    assert "flows.py:11:" in checked.stdout and "WF504" in checked.stdout
    run = project.cli("run", "flows.py:shout", "--input", '{"name": "ada"}')
    assert run.exit_code == 1
    assert (
        "reading `.upper` of an un-awaited step 'fetch' call: did you forget `await`?" in run.stderr
    )
