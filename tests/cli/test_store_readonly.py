"""``wf store verify`` on a store it cannot write (a read-only mount): it checks what it
reads and says it repaired nothing, rather than failing on its first repair."""

from __future__ import annotations

import errno
import json
import os
from typing import Any

import pytest

from tests.cli.conftest import Project
from wf.store.local import _fsops

FLOW = "tests.cli.flows:adder"


def read_only(project: Project, monkeypatch: pytest.MonkeyPatch) -> Any:
    """The store as on a read-only mount: every change fails with EROFS, and access says so."""
    real = os.access
    root = str(project.store_dir)

    def access(path: Any, mode: int, *args: Any, **kwargs: Any) -> bool:
        if mode & os.W_OK and str(path).startswith(root):
            return False
        return real(path, mode, *args, **kwargs)

    monkeypatch.setattr(os, "access", access)
    return _fsops.inject("*", errno.EROFS, match=root)


def test_verify_of_a_read_only_store_checks_and_repairs_nothing(
    project: Project, monkeypatch: pytest.MonkeyPatch
) -> None:
    assert project.cli("run", FLOW, "-i", "[1]", "-q").exit_code == 0
    (project.store_dir / "counts" / "ready").unlink(missing_ok=True)  # verify would mark it
    with read_only(project, monkeypatch):
        result = project.cli("store", "verify")
    assert result.exit_code == 0, result.output
    assert "store ok" in result.stdout
    assert "is read-only: verify checked what it reads and repaired nothing" in result.stderr


def test_a_count_off_in_a_read_only_store_is_said_not_repaired(
    project: Project, monkeypatch: pytest.MonkeyPatch
) -> None:
    assert project.cli("run", FLOW, "-i", "[1]", "-q").exit_code == 0
    assert project.cli("store", "verify").exit_code == 0  # counts ready
    with open(project.store_dir / "counts" / "completed.in", "ab") as counted:
        counted.write(b"x")  # one completed run too many
    with read_only(project, monkeypatch):
        result = project.cli("store", "verify", "--json")
    assert result.exit_code == 1, result.output
    (line,) = json.loads(result.stdout)["problems"]
    assert "count of completed is 2, a scan found 1: not repaired (the store is read-only)" in line
