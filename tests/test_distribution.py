"""The distribution's name: one no other package on the index holds (``wf`` there is an
unrelated project), used by every install hint, while the package imports as ``wf`` and the
command is ``wf``."""

from __future__ import annotations

import re
import tomllib
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
PROJECT = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]
# `pip install 'NAME[extra]'` where NAME is wf's own (wf, wf-something); others' are left alone.
_HINT = re.compile(r"pip install '(wf[\w-]*)\[([\w,]+)\]'")


def _texts() -> list[Path]:
    return [
        REPO / "README.md",
        *(REPO / "docs").glob("*.md"),
        *(REPO / "wf").rglob("*.py"),
        *(REPO / "examples").glob("*.py"),
        *(REPO / "tests").rglob("*.py"),
    ]


def test_the_distribution_is_not_called_wf_but_imports_and_runs_as_wf() -> None:
    assert PROJECT["name"] == "wf-durable"
    assert PROJECT["scripts"] == {"wf": "wf.cli:main"}
    setuptools = tomllib.loads((REPO / "pyproject.toml").read_text())["tool"]["setuptools"]
    assert setuptools["packages"]["find"]["include"] == ["wf*"]  # the import package: wf
    assert "pip install wf-durable" in (REPO / "README.md").read_text()


def test_every_install_hint_names_the_distribution_and_an_extra_it_has() -> None:
    extras = set(PROJECT["optional-dependencies"])
    hints = []
    for path in _texts():
        for name, wanted in _HINT.findall(path.read_text(encoding="utf-8")):
            hints.append((path.relative_to(REPO), name, wanted))
    assert len(hints) >= 10  # the serve, otel, ai and postgres hints at least
    for where, name, wanted in hints:
        assert name == PROJECT["name"], (where, name)
        assert set(wanted.split(",")) <= extras, (where, wanted)
