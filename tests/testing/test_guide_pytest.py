"""The guide's testing section (§8) as a user follows it: its test file passes, quietly, with
pytest alone and with pytest-asyncio configured as the guide says."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from tests.test_docs import REPO, blocks_of

_NAMED = re.compile(r"^#\s*([\w./-]+\.(?:py|toml))\s*$")


def _guide_files() -> tuple[dict[str, str], str]:
    """The files the guide writes (by name), and its pytest-asyncio configuration block."""
    files: dict[str, str] = {}
    config = ""
    for block in blocks_of(REPO / "docs" / "guide.md"):
        first = block.text.splitlines()[0] if block.text else ""
        named = _NAMED.match(first)
        if named is not None:
            files[named.group(1)] = block.text
        elif block.lang == "toml" and "asyncio_mode" in block.text:
            config = block.text
    return files, config


def _pytest(root: Path, *args: str) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("WF_", "PYTEST_"))}
    env["PYTHONPATH"] = str(REPO)
    return subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", *args, "test_flows.py"],
        cwd=root,
        env=env,
        capture_output=True,
        text=True,
        timeout=90,
    )


@pytest.mark.parametrize("with_asyncio", [False, True], ids=["pytest-alone", "pytest-asyncio"])
def test_the_guides_tests_pass_without_a_warning(tmp_path: Path, with_asyncio: bool) -> None:
    files, config = _guide_files()
    for name in ("pyproject.toml", "flows.py", "approvals.py", "test_flows.py"):
        (tmp_path / name).write_text(files[name])
    args: tuple[str, ...] = ("-p", "no:asyncio")
    if with_asyncio:
        pytest.importorskip("pytest_asyncio")
        assert config, "the guide shows no pytest-asyncio configuration"
        with (tmp_path / "pyproject.toml").open("a") as pyproject:
            pyproject.write("\n" + config)
        args = ()
    result = _pytest(tmp_path, *args)
    assert result.returncode == 0, result.stdout + result.stderr
    assert "6 passed" in result.stdout
    assert "warning" not in (result.stdout + result.stderr).lower(), result.stdout
