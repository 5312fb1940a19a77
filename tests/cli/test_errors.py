"""Errors become one line on stderr with a documented exit code; never a traceback by default."""

from __future__ import annotations

import os

import pytest

import wf
from tests.cli.conftest import Project
from wf.cli import _errors


@pytest.mark.parametrize(
    ("exc", "code"),
    [
        (wf.UsageError("x"), 2),
        (wf.LoadError("x"), 2),
        (wf.InputValidationError("x"), 2),
        (wf.ValueEncodingError("x"), 2),
        (wf.WorkflowNotFound("x"), 2),
        (wf.RunNotFound("wrun_x"), 2),
        (wf.HookError("x"), 2),
        (wf.StoreError("x"), 3),
        (wf.StoreCorrupted("x"), 3),
        (wf.RunFailed("wrun_x", "ValueError", "x"), 1),
        (wf.RunCancelled("wrun_x"), 1),
        (wf.NondeterminismError(1, "a", "b"), 1),
        (RuntimeError("x"), 1),
    ],
)
def test_exit_codes(exc: BaseException, code: int) -> None:
    assert _errors.exit_code_for(exc) == code


def test_one_line() -> None:
    assert _errors.one_line("a\n  b\n\nc ") == "a b c"


def explode(*args: object, **kwargs: object) -> object:
    raise RuntimeError("kaboom\nsecond line")


def store_failure(*args: object, **kwargs: object) -> object:
    raise wf.StoreError("cannot write /x/y: disk full")


def test_an_unexpected_error_is_one_line_with_a_hint(
    project: Project, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr("wf._config.default_store", explode)
    result = project.cli("runs")
    assert result.exit_code == 1
    assert result.stderr == (
        "error: unexpected RuntimeError: kaboom second line "
        "(run with WF_DEBUG=1 for the traceback)\n"
    )


def test_wf_debug_shows_the_traceback(project: Project, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr("wf._config.default_store", explode)
    monkeypatch.setenv("WF_DEBUG", "1")
    result = project.cli("runs")
    assert result.exit_code == 1
    assert "Traceback" in result.stderr
    assert result.stderr.splitlines()[-1] == "error: unexpected RuntimeError: kaboom second line"


def test_a_store_error_exits_3(project: Project, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr("wf._config.default_store", store_failure)
    for args in (["runs"], ["inspect", "wrun_x"], ["worker", "--until-idle"]):
        result = project.cli(*args)
        assert result.exit_code == 3, args
        assert result.stderr == "error: cannot write /x/y: disk full\n"


def test_an_error_while_importing_names_the_users_file_and_line(project: Project) -> None:
    (project.root / "helpers").mkdir()
    (project.root / "helpers" / "__init__.py").write_text("")
    (project.root / "helpers" / "config.py").write_text("def read():\n    return {}['k']\n")
    (project.root / "broken.py").write_text("from helpers.config import read\n\nread()\n")
    result = project.wf("run", "broken.py:flow")
    assert result.returncode == 2
    assert result.stderr.strip().splitlines() == [
        "error: error while importing 'broken' at helpers/config.py:2: KeyError: 'k'"
    ]


@pytest.mark.parametrize(
    ("source", "raised"),
    [
        ('raise BaseException("base")\n', "BaseException: base"),
        ("import sys\nsys.exit(3)\n", "SystemExit: 3"),  # 3 would read as a store failure
        ('raise SystemExit("bye")\n', "SystemExit: bye"),
    ],
    ids=["BaseException", "sys.exit(3)", "SystemExit"],
)
def test_a_base_exception_while_importing_is_a_load_error(
    project: Project, source: str, raised: str
) -> None:
    (project.root / "odd.py").write_text(source)
    result = project.wf("run", "odd.py:flow")
    assert (result.returncode, result.stdout) == (2, "")
    lines = result.stderr.strip().splitlines()
    assert lines == [
        f"error: error while importing 'odd' at odd.py:{source.count(chr(10))}: {raised}"
    ]


def test_ctrl_c_while_importing_is_still_an_interruption(project: Project) -> None:
    (project.root / "stop.py").write_text("raise KeyboardInterrupt\n")
    assert project.wf("run", "stop.py:flow").returncode == 130


def test_a_nul_byte_in_a_module_names_its_file(project: Project) -> None:
    (project.root / "pkg").mkdir()
    (project.root / "pkg" / "nul.py").write_bytes(b"x = 1\0\n")
    for target in ("pkg/nul.py:x", "pkg.nul:x"):
        result = project.wf("run", target)
        assert result.returncode == 2
        assert result.stderr == (
            "error: syntax error in pkg/nul.py: source code string cannot contain null bytes\n"
        )


def test_a_file_named_like_a_package_wf_needs_is_named_as_the_cause(project: Project) -> None:
    """A workflow file called rich.py hides the rich that wf imports: every command in that
    directory says so, in one line, instead of "'rich' is not a package"."""
    (project.root / "rich.py").write_text(
        "import wf\n\n\n@wf.workflow\nasync def flow() -> int:\n    return 1\n"
    )
    for args in (["runs"], ["hooks"], ["schedules"]):
        result = project.wf(*args)
        assert result.returncode == 2, result.stderr
        [line] = result.stderr.strip().splitlines()
        assert line.startswith("error: rich.py shadows the installed package 'rich'"), line
        assert line.endswith("rename that file")


@pytest.mark.parametrize(
    ("args", "env", "message"),
    [
        ([], {"WF_WORKER_CONCURRENCY": "0"}, "WF_WORKER_CONCURRENCY='0': worker.concurrency must"),
        ([], {"WF_WORKER_POLL": "nan"}, "WF_WORKER_POLL='nan': worker.poll must be a number > 0"),
        (["--poll", "inf"], {}, "--poll must be a number of seconds, not inf"),
    ],
    ids=["concurrency", "poll", "--poll"],
)
def test_a_worker_setting_out_of_range_is_refused_not_waited_on(
    project: Project, args: list[str], env: dict[str, str], message: str
) -> None:
    # A worker without a slot, or with a poll that never ends, waited forever (--until-idle).
    result = project.wf("worker", "--until-idle", *args, timeout=30, **env)
    assert result.returncode == 2, result.stderr
    assert result.stderr.startswith(f"error: {message}")
    assert result.stderr.count("\n") == 1


@pytest.mark.parametrize("command", ["worker", "serve", "dev"])
@pytest.mark.parametrize("grace", ["nan", "inf"])
def test_a_grace_that_is_no_finite_number_of_seconds_is_refused(
    project: Project, command: str, grace: str
) -> None:
    """Click's range lets NaN and infinity through: a drain would wait on a NaN timeout."""
    result = project.wf(command, "--grace", grace, timeout=30)
    assert result.returncode == 2, result.stderr
    assert result.stderr.startswith(
        f"error: Invalid value for '--grace': {float(grace)!r} is not a finite number of seconds"
    ), result.stderr
    assert result.stderr.count("\n") == 1


def test_a_file_named_like_a_package_that_imports_but_lacks_its_names_is_named(
    project: Project,
) -> None:
    """``orjson.py`` beside the workflows imports fine, then lacks what wf uses from orjson:
    the same sentence as for a package whose import fails, not an AttributeError."""
    (project.root / "orjson.py").write_text("x = 1\n")
    (project.root / "flows.py").write_text(
        "import wf\n\n\n@wf.step\ndef one() -> int:\n    return 1\n\n\n"
        "@wf.workflow\nasync def flow() -> int:\n    return await one()\n"
    )
    for args in (["run", "flows:flow"], ["runs"]):
        result = project.wf(*args)
        assert result.returncode == 2, result.stderr
        [line] = result.stderr.strip().splitlines()
        assert line.startswith(
            "error: orjson.py shadows the installed package 'orjson' (using it failed: module "
            "'orjson' has no attribute"
        ), line
        assert line.endswith("rename that file")


UNMAKEABLE = "/proc/1/nope"  # no directory can be made there, not even by root


@pytest.mark.skipif(not os.path.isdir("/proc/1"), reason="needs Linux's /proc")
def test_a_store_directory_that_cannot_be_made_is_a_store_error(
    project: Project, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("WF_DIR", UNMAKEABLE)
    for args in (
        ["run", "tests.cli.flows:adder", "-i", "[1]"],
        ["schedule", "set", "s", "tests.cli.flows:adder", "--cron", "* * * * *", "-i", "[1]"],
        ["worker", "--until-idle"],
    ):
        result = project.cli(*args)
        assert result.exit_code == 3, (args, result.stderr)
        assert result.stderr.endswith(
            f"error: cannot make the store directory {UNMAKEABLE}: [ENOENT] No such file or "
            "directory\n"
        ), args


@pytest.mark.skipif(not os.path.isdir("/proc/1"), reason="needs Linux's /proc")
def test_verify_over_no_store_says_there_is_none_rather_than_store_ok(
    project: Project, monkeypatch: pytest.MonkeyPatch
) -> None:
    for where in (UNMAKEABLE, str(project.store_dir)):
        monkeypatch.setenv("WF_DIR", where)
        result = project.cli("store", "verify")
        assert result.exit_code == 0
        assert result.stdout.startswith(f"no store at {where}: nothing to verify"), result.stdout
    assert project.cli("run", "tests.cli.flows:adder", "-i", "[1]").exit_code == 0
    assert project.cli("store", "verify").stdout == "store ok\n"
