"""Every code block of the README and of docs/*.md runs (or parses) as written.

The conventions, for anyone writing documentation (also in docs/contributing.md):

* Blocks of one Markdown file run in order, in one fresh empty directory (a *session*), with
  ``wf`` on ``PATH``, this checkout on ``PYTHONPATH`` and no ``WF_*`` variables set: a later
  block sees the files and runs an earlier one made.
* ``python``: run with ``python3``. A block whose first line is a comment naming a file
  (``# shop.py``, ``# app/flows.py``) is written to that file instead of run; if the repository
  holds a file at that path (``examples/shop.py``) the block must be identical to it. A file named
  ``test_*.py`` is then run with pytest (wf's pytest plugin is active).
* ``sh`` / ``bash``: each command line runs in bash and must exit 0. ``<run-id>`` stands for
  the newest run of the session's store. Comments are fine.
* ``toml`` and ``json``: parsed; a toml block with ``[tool.wf]`` may only use known keys. One
  whose first line names a file (``# pyproject.toml``) is also written to that file.
* ``console`` (a transcript: ``$ command`` then its output), ``text`` and blocks without a
  language are illustrations and are not run.
* An HTML comment on the line before a block changes that: ``<!-- doctest: skip -->`` (a
  fragment, a command that never ends such as ``wf worker``, an install step),
  ``<!-- doctest: needs-postgres -->`` (runs with ``WF_POSTGRES_DSN`` set to the test server;
  skipped when none answers), ``<!-- doctest: exit=N -->`` (the block's last command exits N),
  ``<!-- doctest: timeout=S -->`` (default 60 seconds per block). Words combine:
  ``<!-- doctest: needs-postgres timeout=120 -->``.
"""

from __future__ import annotations

import dataclasses
import json
import os
import re
import shlex
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
DOCS = sorted([REPO / "README.md", *(REPO / "docs").glob("*.md")])
_FENCE = re.compile(r"^(```+|~~~+)\s*([\w+-]*)\s*$")
_MARK = re.compile(r"<!--\s*doctest:\s*(.*?)\s*-->")
_FILE = re.compile(r"^#\s*([\w./-]+\.(?:py|toml|json|txt))\s*$")
_RUNNABLE = {"python", "py", "sh", "bash", "shell", "toml", "json"}


@dataclasses.dataclass
class Block:
    """One fenced code block: where it is, its language, its text, its doctest words."""

    path: Path
    line: int
    lang: str
    text: str
    words: dict[str, str]

    @property
    def where(self) -> str:
        return f"{self.path.relative_to(REPO)}:{self.line}"


def blocks_of(path: Path) -> list[Block]:
    """The fenced blocks of a Markdown file, with the doctest words of the comment above each."""
    lines = path.read_text(encoding="utf-8").splitlines()
    found: list[Block] = []
    i = 0
    while i < len(lines):
        match = _FENCE.match(lines[i].strip())
        if match is None:
            i += 1
            continue
        fence, lang = match.group(1), match.group(2).lower()
        words: dict[str, str] = {}
        above = next((lines[j] for j in range(i - 1, max(i - 3, -1), -1) if lines[j].strip()), "")
        mark = _MARK.search(above)
        if mark is not None:
            for word in mark.group(1).split():
                key, _, value = word.partition("=")
                words[key] = value
        body: list[str] = []
        i += 1
        while i < len(lines) and not lines[i].strip().startswith(fence):
            body.append(lines[i])
            i += 1
        found.append(Block(path, i - len(body), lang, "\n".join(body) + "\n", words))
        i += 1
    return found


def test_doctest_words_are_known() -> None:
    known = {"skip", "needs-postgres", "exit", "timeout"}
    for path in DOCS:
        for block in blocks_of(path):
            unknown = set(block.words) - known
            assert not unknown, f"{block.where}: unknown doctest word(s) {sorted(unknown)}"


@pytest.fixture(scope="module")
def shim(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A directory holding a ``wf`` command that runs this checkout's wf."""
    folder = tmp_path_factory.mktemp("bin")
    script = folder / "wf"
    script.write_text(f'#!/bin/sh\nexec {shlex.quote(sys.executable)} -m wf "$@"\n')
    script.chmod(0o755)
    return folder


def _postgres_dsn() -> str | None:
    dsn = os.environ.get("WF_TEST_POSTGRES_DSN", "postgresql://postgres@127.0.0.1:5432/test")
    try:
        import psycopg

        with psycopg.connect(dsn, connect_timeout=2):
            return dsn
    except Exception:
        return None


class Session:
    """A fresh directory and environment in which one Markdown file's blocks run."""

    def __init__(self, root: Path, shim: Path) -> None:
        self.root = root
        env = {k: v for k, v in os.environ.items() if not k.startswith("WF_")}
        env["PATH"] = f"{shim}{os.pathsep}{env.get('PATH', '')}"
        env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(REPO), env.get("PYTHONPATH")]))
        env["NO_COLOR"] = "1"
        env["COLUMNS"] = "120"
        self.env = env

    def run(self, args: list[str], block: Block, what: str) -> subprocess.CompletedProcess[str]:
        env = dict(self.env)
        if "needs-postgres" in block.words:
            dsn = _postgres_dsn()
            if dsn is None:
                pytest.skip(f"{block.where} needs PostgreSQL and none answers")
            env["WF_POSTGRES_DSN"] = dsn
        try:
            return subprocess.run(
                args,
                cwd=self.root,
                env=env,
                capture_output=True,
                text=True,
                timeout=float(block.words.get("timeout") or 60),
                stdin=subprocess.DEVNULL,
                check=False,
            )
        except subprocess.TimeoutExpired:
            pytest.fail(
                f"{block.where}: {what} did not end in time (mark a command that never ends "
                "with <!-- doctest: skip -->)"
            )

    def newest_run(self) -> str:
        done = subprocess.run(
            [sys.executable, "-m", "wf", "runs", "--json", "--limit", "1"],
            cwd=self.root,
            env=self.env,
            capture_output=True,
            text=True,
            timeout=60,
            check=False,
        )
        runs = json.loads(done.stdout or "[]")
        assert runs, "a block uses <run-id> before any run exists"
        return str(runs[0]["id"])


def _expect(done: subprocess.CompletedProcess[str], block: Block, what: str, code: int = 0) -> None:
    assert done.returncode == code, (
        f"{block.where}: {what} exited {done.returncode} (expected {code})\n"
        f"stdout: {done.stdout[-2000:]}\nstderr: {done.stderr[-2000:]}"
    )


def run_block(block: Block, session: Session) -> None:
    """Run (or parse) one block in the session; fail with the block's place on a problem."""
    lang = block.lang
    first = block.text.lstrip().splitlines()[0] if block.text.strip() else ""
    named = _FILE.match(first.strip())
    if lang in ("json", "toml") and named is not None:
        target = session.root / named.group(1)
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_text(block.text, encoding="utf-8")
    if lang == "json":
        json.loads(block.text)
        return
    if lang == "toml":
        document = tomllib.loads(block.text)
        table = document.get("tool", {}).get("wf")
        if isinstance(table, dict):
            from wf._config import Project

            unknown = Project(session.root, None, table, "pyproject.toml").unknown_keys()
            assert not unknown, f"{block.where}: unknown [tool.wf] key(s) {unknown}"
        return
    if lang in ("python", "py"):
        if named is None:
            script = session.root / f"_block_{block.line}.py"
            script.write_text(block.text, encoding="utf-8")
            done = session.run([sys.executable, script.name], block, "the block")
            _expect(done, block, "the block", int(block.words.get("exit") or 0))
            return
        name = named.group(1)
        original = REPO / name
        if original.is_file() and name.endswith(".py"):
            assert block.text.strip() == original.read_text(encoding="utf-8").strip(), (
                f"{block.where}: the block says it is {name} but differs from the repository's"
            )
        target = session.root / name
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_text(block.text, encoding="utf-8")
        if Path(name).name.startswith("test_"):
            done = session.run(
                [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", name],
                block,
                f"pytest {name}",
            )
            _expect(done, block, f"pytest {name}")
        return
    # sh / bash: one command per line; the last may be expected to fail.
    commands = [
        line
        for line in (raw.strip() for raw in block.text.splitlines())
        if line and not line.startswith("#")
    ]
    for index, command in enumerate(commands):
        if "<run-id>" in command:
            command = command.replace("<run-id>", session.newest_run())
        placeholder = re.search(r"<[a-z][a-z-]*>", command.split("#")[0])
        assert placeholder is None, (
            f"{block.where}: {placeholder.group(0) if placeholder else ''} in {command!r} "
            "cannot run as written (only <run-id> is filled in; else mark the block skip)"
        )
        done = session.run(["bash", "-c", command], block, repr(command))
        last = index == len(commands) - 1
        _expect(done, block, repr(command), int(block.words.get("exit") or 0) if last else 0)


# A page runs its blocks one after another, each bounded by its own timeout (60 s unless the
# block says): the page as a whole gets more than the suite's 120 s. guide.md runs about 30
# commands, 20 s on a quiet machine and over 120 s on a loaded one.
@pytest.mark.timeout(600)
@pytest.mark.parametrize("path", DOCS, ids=[str(p.relative_to(REPO)) for p in DOCS])
def test_every_code_block_runs(path: Path, tmp_path: Path, shim: Path) -> None:
    session = Session(tmp_path, shim)
    ran = 0
    for block in blocks_of(path):
        if block.lang not in _RUNNABLE or "skip" in block.words:
            continue
        run_block(block, session)
        ran += 1
    if path.name == "README.md":
        assert ran >= 2, "the README's quickstart is not run"


def test_files_the_docs_cite_exist() -> None:
    """A path in backticks (`wf/engine/_step.py`, `tests/test_layers.py`) names a real file."""
    cited = re.compile(r"`((?:wf|tests|bench|examples|docs)/[\w/.-]+\.(?:py|md|toml|yml))`")
    missing = [
        f"{path.relative_to(REPO)}: {name}"
        for path in DOCS
        for name in cited.findall(path.read_text(encoding="utf-8"))
        if not (REPO / name).exists()
    ]
    assert missing == []
