"""Fixtures for the CLI tests: a store in a temporary directory, and ways to run ``wf``."""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from wf.cli._app import build_app

REPO = Path(__file__).resolve().parents[2]


class Project:
    """A directory with its own store; runs ``wf`` in-process or as a subprocess."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self.store_dir = root / ".workflows"
        self.log = root / "log"
        self.log.mkdir()
        self.env = {
            **os.environ,
            "WF_DIR": str(self.store_dir),
            "WF_TEST_LOG": str(self.log),
            "PYTHONPATH": os.pathsep.join(
                [str(REPO), *filter(None, [os.environ.get("PYTHONPATH")])]
            ),
        }
        self.env.pop("WF_DEBUG", None)

    # -- running wf ------------------------------------------------------------------------

    def cli(self, *args: str, input: str | None = None) -> Any:
        """``wf ARGS`` in this process (typer's CliRunner); returns its Result."""
        return CliRunner().invoke(build_app(), list(args), input=input, catch_exceptions=False)

    def spawn(self, *args: str, **env: str) -> subprocess.Popen[str]:
        """``wf ARGS`` as a subprocess in the project directory."""
        return subprocess.Popen(
            [sys.executable, "-m", "wf", *args],
            cwd=self.root,
            env={**self.env, **env},
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )

    def wf(self, *args: str, timeout: float = 60, **env: str) -> subprocess.CompletedProcess[str]:
        """``wf ARGS`` as a subprocess, waited for."""
        proc = self.spawn(*args, **env)
        out, err = proc.communicate(timeout=timeout)
        return subprocess.CompletedProcess(proc.args, proc.returncode, out, err)

    # -- looking at the store ----------------------------------------------------------------

    def gather(self, run_id: str) -> dict[str, Any]:
        """``wf inspect --json`` of a run, read in this process."""
        from wf.admin import detail_json, local

        async def go() -> dict[str, Any]:
            async with local() as client:
                return detail_json(await client.run_detail(run_id))

        return asyncio.run(go())

    def runs(self) -> list[dict[str, Any]]:
        result = self.cli("runs", "--json", "--limit", "1000")
        assert result.exit_code == 0, result.stderr
        return list(json.loads(result.stdout))

    def wait_for(self, predicate: Callable[[], bool], timeout: float = 20.0) -> None:
        deadline = time.monotonic() + timeout
        while not predicate():
            if time.monotonic() > deadline:
                raise AssertionError("timed out waiting for a condition")
            time.sleep(0.05)

    def status(self, run_id: str) -> str | None:
        try:
            return str(self.gather(run_id)["run"]["status"])
        except Exception:
            return None

    def lines(self, name: str) -> list[str]:
        path = self.log / name
        return path.read_text().splitlines() if path.exists() else []


@pytest.fixture
def project(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Project]:
    proj = Project(tmp_path)
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("WF_DIR", str(proj.store_dir))
    monkeypatch.setenv("WF_TEST_LOG", str(proj.log))
    monkeypatch.delenv("WF_DEBUG", raising=False)
    yield proj
