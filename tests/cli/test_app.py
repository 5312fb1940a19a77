"""The app itself: fast ``wf --help`` agrees with Typer's, and importing ``wf.cli`` stays light."""

from __future__ import annotations

import re
import subprocess
import sys

import pytest
from typer.main import get_command
from typer.testing import CliRunner

from tests.cli.conftest import REPO
from wf.cli import top_level_help
from wf.cli._app import build_app, run_app
from wf.cli._registry import COMMANDS

HEAVY = ("typer", "click", "rich", "textual", "pydantic", "watchfiles")


def python(code: str) -> str:
    done = subprocess.run(
        [sys.executable, "-c", code], cwd=REPO, capture_output=True, text=True, check=True
    )
    return done.stdout.strip()


def test_fast_help_is_exactly_what_typer_prints() -> None:
    result = CliRunner().invoke(build_app(), ["--help"])
    assert result.exit_code == 0
    assert result.stdout == top_level_help()


def test_every_command_in_the_table_is_registered() -> None:
    group = get_command(build_app())
    assert sorted(group.commands) == sorted(c.name for c in COMMANDS)  # type: ignore[attr-defined]


def test_importing_wf_cli_adds_nothing_heavy() -> None:
    code = (
        "import sys, wf; before = set(sys.modules); import wf.cli; "
        "print(sorted(set(sys.modules) - before)); "
        f"print(sorted(m for m in sys.modules if m.split('.')[0] in {HEAVY!r}))"
    )
    added, heavy = python(code).splitlines()
    assert added == "['wf.cli']"
    assert heavy == "[]"


def test_wf_help_answers_without_importing_typer() -> None:
    code = (
        "import sys\nfrom wf.cli import main\ntry:\n    main(['--help'])\nexcept SystemExit:\n"
        f"    print(sorted(m for m in sys.modules if m.split('.')[0] in {HEAVY!r}))"
    )
    assert python(code).splitlines()[-1] == "[]"


def test_python_dash_m_wf() -> None:
    done = subprocess.run(
        [sys.executable, "-m", "wf", "--help"], cwd=REPO, capture_output=True, text=True
    )
    assert done.returncode == 0
    assert done.stdout == top_level_help()
    version = subprocess.run(
        [sys.executable, "-m", "wf", "--version"], cwd=REPO, capture_output=True, text=True
    )
    assert version.stdout.startswith("wf ")


def test_run_app_returns_exit_codes(capsys: object) -> None:
    assert run_app(["--help"]) == 0
    assert run_app(["no-such-command"]) == 2
    assert run_app(["runs", "--limit", "0"]) == 2


def test_a_named_command_is_built_alone_and_a_misspelt_one_still_gets_suggestions(
    capsys: pytest.CaptureFixture[str],
) -> None:
    alone = get_command(build_app("runs"))
    assert sorted(alone.commands) == ["runs"]  # type: ignore[attr-defined]
    assert sorted(get_command(build_app("rusn")).commands) == sorted(c.name for c in COMMANDS)  # type: ignore[attr-defined]
    assert run_app(["rusn"]) == 2
    # Click's wording differs across the pinned Typer range: "Did you mean 'run', 'runs'?" or
    # "(Did you mean one of: 'run', 'runs'?)".
    assert re.search(r"Did you mean (one of: )?'run', 'runs'\?", capsys.readouterr().err)
    code = (
        "import sys\nfrom wf.cli import main\ntry:\n    main(['runs', '--help'])\n"
        "except SystemExit:\n    print(sorted(m for m in sys.modules if m.startswith('wf.cli._')))"
    )
    imported = python(code).splitlines()[-1]
    assert "wf.cli._runs" in imported and "wf.cli._inspect" not in imported
