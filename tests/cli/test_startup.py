"""What the quick commands load: ``wf --help``, ``wf runs`` and ``wf inspect --json`` stay
within their start-up budget (DESIGN.md) by importing only what they use.

Checked through ``sys.modules`` of a fresh process, not by timing it: a package that comes
back costs every run of the command, on any machine.
"""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from tests.cli.conftest import Project

OPTIONAL = [
    # wf's own optional parts, and the extras and servers a read never needs.
    "httpx",
    "jsonschema",
    "opentelemetry",
    "psycopg",
    "pydantic",
    "pydantic_ai",
    "redis",
    "starlette",
    "textual",
    "uvicorn",
    "watchfiles",
    "croniter",
    "wf.check",
    "wf.engine._engine",
    "wf.serve",
    "wf.store.postgres",
    "wf.store.redis",
]

LOADED = """
import json, sys
from wf.cli import main
try:
    main(sys.argv[1:])
except SystemExit as exit:
    code = exit.code
print(json.dumps({"code": code, "modules": sorted(sys.modules)}))
"""


def loaded(project: Project, *args: str) -> set[str]:
    """The modules ``wf ARGS`` has loaded when it ends (stdout a pipe, as in a script)."""
    done = subprocess.run(
        [sys.executable, "-c", LOADED, *args],
        cwd=project.root,
        env=project.env,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 0, done.stderr
    outcome = json.loads(done.stdout.splitlines()[-1])
    assert outcome["code"] == 0, done.stderr
    return set(outcome["modules"])


def packages(modules: set[str], names: list[str]) -> list[str]:
    return sorted(n for n in names if any(m == n or m.startswith(n + ".") for m in modules))


@pytest.mark.parametrize(
    ("args", "also_not"),
    [
        (["--help"], ["typer", "asyncio", "rich", "wf.store", "wf.admin"]),
        (["runs"], []),
        (["runs", "--json"], []),
        # A finished run with no progress: no codec (decimal, zoneinfo), no queue's hold.
        (["inspect", "RUN", "--json"], ["wf.engine._codec", "wf.engine._queueing"]),
    ],
    ids=["help", "runs", "runs --json", "inspect --json"],
)
def test_the_quick_commands_load_only_what_they_use(
    project: Project, args: list[str], also_not: list[str]
) -> None:
    made = project.cli("run", "tests.cli.flows:adder", "-i", "1", "--json", "-q")
    assert made.exit_code == 0, made.stderr
    project.cli("run", "tests.cli.flows:failing", "--json", "-q")
    run_id = json.loads(made.stdout)["run_id"]
    modules = loaded(project, *[run_id if arg == "RUN" else arg for arg in args])
    assert packages(modules, OPTIONAL + also_not) == []
