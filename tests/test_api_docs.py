"""The API reference builds from the docstrings (``mkdocs build --strict``) and covers every
public name, so a broken cross-reference or a missing docstring fails the suite, not a reader.
CI installs the ``docs`` extra; without mkdocs the test skips with a reason."""

from __future__ import annotations

import importlib.util
import re
import subprocess
import sys
from pathlib import Path

import pytest

import wf

REPO = Path(__file__).resolve().parents[1]


@pytest.mark.skipif(
    importlib.util.find_spec("mkdocs") is None or importlib.util.find_spec("mkdocstrings") is None,
    reason="mkdocs / mkdocstrings not installed (pip install -e '.[docs]')",
)
def test_the_documentation_site_builds_strictly_and_covers_every_public_name(
    tmp_path: Path,
) -> None:
    site = tmp_path / "site"
    done = subprocess.run(
        [sys.executable, "-m", "mkdocs", "build", "--strict", "-q", "-d", str(site)],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=110,
        check=False,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    page = (site / "api" / "index.html").read_text(encoding="utf-8")
    documented = set(re.findall(r'id="wf\.([A-Za-z_0-9]+)"', page))
    missing = sorted(set(wf.__all__) - documented)
    assert missing == [], f"public names missing from the API reference: {missing}"


def test_every_public_name_has_a_docstring() -> None:
    missing = [name for name in wf.__all__ if not (getattr(wf, name).__doc__ or "").strip()]
    assert missing == []


def test_user_docs_name_no_private_module() -> None:
    allowed = {"contributing.md", "design.md", "performance.md", "reliability.md", "store.md"}
    pages = [
        REPO / "README.md",
        *(p for p in (REPO / "docs").glob("*.md") if p.name not in allowed),
    ]
    found = []
    for page in pages:
        for number, line in enumerate(page.read_text(encoding="utf-8").splitlines(), start=1):
            if re.search(r"\bwf(\.[a-z]+)*\._[a-z]", line):
                found.append(f"{page.name}:{number}: {line.strip()}")
    assert found == [], "user docs name private modules:\n" + "\n".join(found)
