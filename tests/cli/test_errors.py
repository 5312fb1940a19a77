"""Errors become one line on stderr with a documented exit code; never a traceback by default."""

from __future__ import annotations

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
    monkeypatch.setattr("wf.cli._store.open_store", explode)
    result = project.cli("runs")
    assert result.exit_code == 1
    assert result.stderr == (
        "error: unexpected RuntimeError: kaboom second line "
        "(run with WF_DEBUG=1 for the traceback)\n"
    )


def test_wf_debug_shows_the_traceback(project: Project, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr("wf.cli._store.open_store", explode)
    monkeypatch.setenv("WF_DEBUG", "1")
    result = project.cli("runs")
    assert result.exit_code == 1
    assert "Traceback" in result.stderr
    assert result.stderr.splitlines()[-1] == "error: unexpected RuntimeError: kaboom second line"


def test_a_store_error_exits_3(project: Project, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr("wf.cli._store.open_store", store_failure)
    for args in (["runs"], ["inspect", "wrun_x"], ["worker", "--until-idle"]):
        result = project.cli(*args)
        assert result.exit_code == 3, args
        assert result.stderr == "error: cannot write /x/y: disk full\n"
