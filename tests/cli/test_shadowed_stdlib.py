"""A project file named like a module of the standard library (``json.py``, ``queue.py``).

wf's own imports of the standard library get the standard library whatever the project's files
are called; the project's own imports behave as plain Python's; an import error that a library
met because a project file stood in for a standard module says which file.
"""

from __future__ import annotations

import importlib.util
import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.cli.conftest import Project

FLOW = (
    "import wf\n\n\n@wf.step\ndef one() -> int:\n    return 1\n\n\n"
    "@wf.workflow\nasync def flow() -> int:\n    return await one()\n"
)
"""A workflow with a sync step: its thread pool imports ``queue`` once the run is driven."""

LAUNCHERS = {
    # `python -m wf` puts the current directory first on sys.path before wf runs ...
    "python -m wf": [sys.executable, "-m", "wf"],
    # ... the `wf` command does not (-P: nothing put first, as for a console script).
    "wf": [sys.executable, "-P", "-m", "wf"],
}


def wf_in(
    project: Project, launcher: str, *args: str, **env: str
) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [*LAUNCHERS[launcher], *args],
        cwd=project.root,
        env={**project.env, **env},
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )


@pytest.mark.parametrize("launcher", LAUNCHERS)
@pytest.mark.parametrize("shadow", ["json.py", "queue.py"])
def test_a_file_named_like_a_standard_module_leaves_wf_working(
    project: Project, launcher: str, shadow: str
) -> None:
    """``json.py`` beside the workflows was what wf's own ``import json`` got (an "unexpected
    SystemError" from orjson under ``python -m wf``); ``queue.py`` was what the thread pool of
    a sync step got, so every such step failed. Both run like any other project now."""
    (project.root / shadow).write_text(FLOW)
    (project.root / "flows.py").write_text(FLOW)
    result = wf_in(project, launcher, "run", "flows:flow", "-q")
    assert (result.returncode, result.stdout, result.stderr) == (0, "1\n", "")
    assert wf_in(project, launcher, "runs").returncode == 0


def test_a_worker_drives_a_sync_step_beside_queue_py(project: Project) -> None:
    (project.root / "queue.py").write_text("x = 1\n")
    (project.root / "flows.py").write_text(FLOW)
    started = wf_in(project, "wf", "run", "flows:flow", "--detach")
    assert started.returncode == 0, started.stderr
    worked = wf_in(project, "wf", "worker", "--until-idle")
    assert worked.returncode == 0, worked.stderr
    [run] = project.runs()
    assert run["status"] == "completed"


STANDARD = sorted(
    name
    for name in sys.stdlib_module_names
    # Names no one gives a file, and modules this platform does not have (winreg).
    if not name.startswith("_") and importlib.util.find_spec(name) is not None
)


@pytest.mark.parametrize("launcher", LAUNCHERS)
def test_a_project_with_a_file_named_like_every_standard_module_runs(
    project: Project, launcher: str
) -> None:
    """Whatever standard module wf or a package it uses imports late (while a run is
    driven), a project file of that name is not what it gets."""
    for name in STANDARD:
        (project.root / f"{name}.py").write_text(
            f"raise RuntimeError('the project file {name}.py was imported')\n"
        )
    (project.root / "flows.py").write_text(FLOW)
    result = wf_in(project, launcher, "run", "flows:flow", "-q")
    assert (result.returncode, result.stdout, result.stderr) == (0, "1\n", "")


def test_the_projects_own_import_of_its_file_named_like_a_standard_module_is_its_own(
    project: Project,
) -> None:
    """``test.py`` (Python's own ``test`` package is installed too), imported on purpose by
    the project's package: it is the project's file, as in plain Python."""
    (project.root / "test.py").write_text("depth = 1\n")
    (project.root / "app").mkdir()
    (project.root / "app" / "__init__.py").write_text("")
    (project.root / "app" / "flows.py").write_text(
        "import test\n\nimport wf\n\n\n@wf.step\nasync def one() -> int:\n"
        "    return test.depth\n\n\n@wf.workflow\nasync def flow() -> int:\n"
        "    return await one()\n"
    )
    result = project.wf("run", "app.flows:flow", "-q")
    assert (result.returncode, result.stdout) == (0, "1\n"), result.stderr


def with_library(project: Project, source: str) -> dict[str, str]:
    """An installed package ``shades`` (its directory a ``site-packages``) of ``source``;
    the environment that finds it."""
    site = project.root / "venv" / "site-packages"
    site.mkdir(parents=True)
    (site / "shades.py").write_text(source)
    return {"PYTHONPATH": os.pathsep.join([str(site), project.env["PYTHONPATH"]])}


@pytest.mark.parametrize(
    ("library", "error"),
    [
        (
            "import statistics\n\nRED = statistics.mean([1, 2])\n",
            "AttributeError: module 'statistics' has no attribute 'mean'",
        ),
        (
            "from statistics import mean\n",
            "ImportError: cannot import name 'mean' from 'statistics'",
        ),
    ],
    ids=["attribute", "from-import"],
)
def test_a_library_that_gets_a_project_file_for_a_standard_module_names_it(
    project: Project, library: str, error: str
) -> None:
    """A package the workflow uses imports ``statistics`` and gets the project's
    ``statistics.py``: the error keeps its type, message and place, and names that file."""
    env = with_library(project, library)
    (project.root / "statistics.py").write_text("x = 1\n")
    (project.root / "flows.py").write_text("import shades\n" + FLOW)
    result = project.wf("run", "flows:flow", **env)
    assert result.returncode == 2, result.stderr
    [line] = result.stderr.strip().splitlines()
    assert line.startswith(f"error: error while importing 'flows' at flows.py:1: {error}"), line
    assert line.endswith(
        "; statistics.py of the project is imported in place of the standard library module "
        "'statistics': rename that file"
    ), line


def test_a_project_file_named_like_a_standard_module_that_fails_inside_a_library_is_named(
    project: Project,
) -> None:
    """The project's ``statistics.py`` runs, in a library's import of ``statistics``, and fails:
    its own error, at its own line, and the file named."""
    env = with_library(project, "import statistics\n")
    (project.root / "statistics.py").write_text("x = {}['k']\n")
    (project.root / "flows.py").write_text("import shades\n" + FLOW)
    result = project.wf("run", "flows:flow", **env)
    assert result.returncode == 2, result.stderr
    assert result.stderr == (
        "error: error while importing 'flows' at statistics.py:1: KeyError: 'k'; statistics.py of "
        "the project is imported in place of the standard library module 'statistics': rename "
        "that file\n"
    )


@pytest.mark.parametrize(
    ("source", "error"),
    [
        ("x = {}['k']\n", "at statistics.py:1: KeyError: 'k'"),
        (
            "x = 1\n",
            "at flows.py:2: AttributeError: module 'statistics' has no attribute 'no_such'",
        ),
    ],
    ids=["its-error", "its-use"],
)
def test_the_projects_own_import_of_a_file_named_like_a_standard_module_is_no_shadow(
    project: Project, source: str, error: str
) -> None:
    """The workflow itself imports its ``statistics.py``: what fails is reported as any error of
    the project's code, with no word of the standard library."""
    (project.root / "statistics.py").write_text(source)
    (project.root / "flows.py").write_text("import statistics\nstatistics.no_such\n" + FLOW)
    result = project.wf("run", "flows:flow")
    assert result.returncode == 2, result.stderr
    assert result.stderr == f"error: error while importing 'flows' {error}\n"


@pytest.mark.parametrize("launcher", LAUNCHERS)
def test_a_workflow_file_named_like_a_standard_module_wf_uses_is_named_not_searched(
    project: Project, launcher: str
) -> None:
    """``wf run queue.py:flow``: its module name, ``queue``, is the standard library's module
    wf imported. The file is named, not "module 'queue' has no attribute 'flow'"."""
    (project.root / "queue.py").write_text(FLOW)
    result = wf_in(project, launcher, "run", "queue.py:flow")
    assert (result.returncode, result.stdout) == (2, ""), result.stderr
    assert result.stderr == (
        "error: cannot load 'queue.py': its module name 'queue' is the standard library "
        "module 'queue', which wf needs, not queue.py of the project: rename that file\n"
    )
    assert project.runs() == []


def test_the_projects_own_import_of_its_file_that_wf_needs_the_standard_module_of_is_told(
    project: Project,
) -> None:
    """``http.py`` beside the workflows was the project's ``http``; wf needs the standard
    library's, so ``from http import fetch_json`` fails: the real error first, then the file
    and what to do."""
    (project.root / "http.py").write_text("def fetch_json() -> int:\n    return 1\n")
    (project.root / "flows.py").write_text("from http import fetch_json\n" + FLOW)
    for launcher in LAUNCHERS:
        result = wf_in(project, launcher, "run", "flows:flow")
        assert result.returncode == 2, result.stderr
        [line] = result.stderr.strip().splitlines()
        assert line.startswith(
            "error: error while importing 'flows' at flows.py:1: ImportError: cannot import "
            "name 'fetch_json' from 'http'"
        ), line
        assert line.endswith(
            "; http.py of the project is not what `import http` gets: wf needs the standard "
            "library's http; rename that file"
        ), line


@pytest.mark.parametrize("launcher", LAUNCHERS)
@pytest.mark.parametrize("target", ["email:flow", "email.py:flow"])
def test_a_workflow_module_named_like_a_standard_module_wf_needs_is_named(
    project: Project, launcher: str, target: str
) -> None:
    """``wf run email:flow`` (a run queued before wf needed ``email`` has that target too):
    the project's ``email.py`` is named, not "module 'email' has no attribute 'flow'"."""
    (project.root / "email.py").write_text(FLOW)
    result = wf_in(project, launcher, "run", target)
    assert (result.returncode, result.stdout) == (2, ""), result.stderr
    spec = target.partition(":")[0]
    assert result.stderr == (
        f"error: cannot load {spec!r}: its module name 'email' is the standard library module "
        "'email', which wf needs, not email.py of the project: rename that file\n"
    )
    assert project.runs() == []


def test_a_step_that_uses_its_file_that_wf_needs_the_standard_module_of_fails_told(
    project: Project,
) -> None:
    """A step calls ``calendar.report()`` of the project's ``calendar.py``, which is the
    standard library's ``calendar`` now: the run fails with the real error, and the file named."""
    (project.root / "calendar.py").write_text("def report() -> int:\n    return 1\n")
    (project.root / "flows.py").write_text(
        "import calendar\n\nimport wf\n\n\n@wf.step\nasync def one() -> int:\n"
        "    return calendar.report()\n\n\n@wf.workflow\nasync def flow() -> int:\n"
        "    return await one()\n"
    )
    result = wf_in(project, "wf", "run", "flows:flow", "-q")
    assert result.returncode != 0
    [run] = project.runs()
    assert run["status"] == "failed"
    message = project.gather(run["id"])["run"]["error"]["message"]
    assert message == (
        "module 'calendar' has no attribute 'report'; calendar.py of the project is not what "
        "`import calendar` gets: wf needs the standard library's calendar; rename that file"
    ), message


def test_python_m_wf_imports_no_standard_module_before_the_shield(project: Project) -> None:
    """An interpreter that has not imported ``typing`` yet (``-S``: no ``site``), started as
    ``python -m wf`` beside a ``typing.py`` that raises: wf's own first imports are the
    standard library's."""
    import site

    (project.root / "typing.py").write_text("raise RuntimeError('the project typing.py')\n")
    path = os.pathsep.join([project.env["PYTHONPATH"], *site.getsitepackages()])
    result = subprocess.run(
        [sys.executable, "-S", "-m", "wf", "--help"],
        cwd=project.root,
        env={**project.env, "PYTHONPATH": path},
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert (result.returncode, result.stderr) == (0, ""), result.stderr


def test_a_package_run_with_python_m_that_imports_wf_keeps_plain_pythons_imports(
    project: Project,
) -> None:
    """``python -m app`` whose ``__init__`` imports wf is not ``python -m wf``: its own
    ``import http`` gets its ``http.py``, as in plain Python."""
    (project.root / "http.py").write_text("x = 1\n")
    (project.root / "app").mkdir()
    (project.root / "app" / "__init__.py").write_text("import wf\nimport http\n\nprint(http.x)\n")
    (project.root / "app" / "__main__.py").write_text("")
    result = subprocess.run(
        [sys.executable, "-m", "app"],
        cwd=project.root,
        env=project.env,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert (result.returncode, result.stdout, result.stderr) == (0, "1\n", "")


@pytest.mark.parametrize(
    "argv",
    ["None", "[]", "['-m']", "[b'-m']"],
)
def test_import_wf_with_odd_argv_works(project: Project, argv: str) -> None:
    """An embedding program may set ``sys.argv`` to anything."""
    result = subprocess.run(
        [sys.executable, "-c", f"import sys\nsys.argv = {argv}\nimport wf\nprint(wf.__version__)"],
        cwd=project.root,
        env=project.env,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert (result.returncode, result.stderr) == (0, ""), result.stderr


def test_the_standard_modules_wf_needs_are_listed_in_the_docs() -> None:
    """docs/cli.md names every module a project file must not be called like, and no other."""
    import re

    from wf import _shadows

    text = (Path(__file__).parents[2] / "docs" / "cli.md").read_text(encoding="utf-8")
    listed = re.search(r"before wf can import anything\)\. They are:\n(.*?)\.\n", text, re.S)
    assert listed is not None
    assert re.findall(r"`([a-z_0-9]+)`", listed.group(1)) == sorted(_shadows.NEEDED)
