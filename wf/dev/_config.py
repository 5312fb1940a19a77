"""Project configuration for ``wf dev``: ``wf.toml``, or ``[tool.wf]`` in ``pyproject.toml``.

Both hold the same keys; ``wf.toml`` has them at the top level::

    modules = ["app.flows"]      # runner modules, imported at start and on every reload
    paths = ["app"]              # what is watched and checked (default: the project directory)

    [dev]
    run = "app.flows:hello"      # start a run of this after every successful reload
    input = {name = "dev"}       # ... with this input (any TOML value; as ``--input`` JSON)
    grace = 30.0                 # seconds running steps get to finish before a reload
    poll = false                 # watch by polling (network or container mounts)
    concurrency = 100            # runs driven at once

The nearest directory at or above the current one holding a ``wf.toml``, or a
``pyproject.toml`` with a ``[tool.wf]`` table, is the configuration (``wf.toml`` wins when both
are in one directory). Paths are relative to that directory. Other top-level keys (``check``,
and whatever later commands add) belong to their commands and are left alone here.
"""

from __future__ import annotations

import dataclasses
import math
import os
import tomllib
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

from wf._exceptions import UsageError

CONFIG_FILE = "wf.toml"
_DEV_KEYS = ("run", "input", "grace", "poll", "concurrency")
_SKIP_DIRS = frozenset(
    {".git", ".hg", ".svn", ".venv", "venv", "env", "__pycache__", "node_modules", ".tox",
     ".nox", ".mypy_cache", ".pytest_cache", ".ruff_cache", ".hypothesis", ".workflows",
     "build", "dist", "site-packages"}
)  # fmt: skip


@dataclasses.dataclass
class DevConfig:
    """What the configuration says about ``wf dev`` (defaults when there is none)."""

    modules: list[str] = dataclasses.field(default_factory=list)
    """Runner modules: dotted names, or ``.py`` paths made absolute."""
    paths: list[Path] = dataclasses.field(default_factory=list)
    """Watched and checked paths, absolute."""
    run: str | None = None
    input: Any = None
    has_input: bool = False
    grace: float = 30.0
    poll: bool = False
    concurrency: int = 100
    source: Path | None = None
    """The file this came from, or None for the defaults."""


def find_config(start: Path) -> tuple[Path, Mapping[str, Any]] | None:
    """The nearest configuration at or above ``start``: its file and its ``[tool.wf]`` table
    (the project ``wf._config.find_project`` finds)."""
    from wf._config import find_project

    project = find_project(start)
    if project.source is None:
        return None
    return project.source, project.table


def load_dev_config(start: Path) -> DevConfig:
    """Read the ``wf dev`` settings of the project around ``start``. Raises ``UsageError``."""
    found = find_config(start)
    if found is None:
        config = DevConfig()
        _apply_environment(config)  # WF_DEV_* count without a configuration file too
        return config
    source, table = found
    where = f"{source}: " + ("[tool.wf]" if source.name == "pyproject.toml" else "")
    base = source.parent
    config = DevConfig(source=source)
    config.modules = [_module_spec(m, base) for m in _strings(table, "modules", where)]
    config.paths = [(base / p).resolve() for p in _strings(table, "paths", where)]
    dev = table.get("dev", {})
    if not isinstance(dev, dict):
        raise UsageError(f"{where}dev must be a table")
    unknown = sorted(set(dev) - set(_DEV_KEYS))
    if unknown:
        raise UsageError(f"{where}[dev]: unknown key {unknown[0]!r} (expected one of {_DEV_KEYS})")
    if "run" in dev:
        if not isinstance(dev["run"], str):
            raise UsageError(f"{where}[dev]: run must be a string ('module:workflow')")
        config.run = dev["run"]
    if "input" in dev:
        config.input, config.has_input = dev["input"], True
    if "grace" in dev:
        grace = dev["grace"]
        if (
            isinstance(grace, bool)
            or not isinstance(grace, int | float)
            or not (math.isfinite(grace) and grace >= 0)
        ):
            raise UsageError(f"{where}[dev]: grace must be a number of seconds >= 0")
        config.grace = float(grace)
    if "poll" in dev:
        if not isinstance(dev["poll"], bool):
            raise UsageError(f"{where}[dev]: poll must be true or false")
        config.poll = dev["poll"]
    if "concurrency" in dev:
        concurrency = dev["concurrency"]
        if isinstance(concurrency, bool) or not isinstance(concurrency, int) or concurrency < 1:
            raise UsageError(f"{where}[dev]: concurrency must be an integer >= 1")
        config.concurrency = concurrency
    _apply_environment(config)
    return config


def _apply_environment(config: DevConfig) -> None:
    # One precedence for every setting: WF_DEV_* variables override the table.
    from wf._config import Project, resolve

    # A project without a table: resolve() then sees only the variables and wf.configure().
    bare = Project(Path.cwd(), None, {}, "current directory")
    for key in ("grace", "poll", "concurrency"):
        value = resolve(f"dev.{key}", bare)
        if value.origin != "default":
            setattr(config, key, value.value)
    run = resolve("dev.run", bare)
    if run.origin != "default":
        config.run = run.value


def _read_toml(path: Path) -> dict[str, Any]:
    try:
        return tomllib.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, tomllib.TOMLDecodeError) as exc:
        raise UsageError(f"{path}: cannot read configuration: {exc}") from None


def _strings(table: Mapping[str, Any], key: str, where: str) -> list[str]:
    value = table.get(key, [])
    if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
        raise UsageError(f"{where}{key} must be a list of strings")
    return list(value)


def _module_spec(spec: str, base: Path) -> str:
    # A file path is made absolute so it means the same file whatever the current directory;
    # a dotted name is kept (it is resolved against sys.path, which holds the cwd).
    if spec.endswith(".py") or "/" in spec or os.sep in spec:
        return str((base / spec).resolve())
    return spec


# -- wf init -------------------------------------------------------------------------------


def starter_config(root: Path) -> dict[str, Any]:
    """The ``wf.toml`` ``wf init`` writes for the project at ``root``.

    ``modules`` lists the modules that seem to declare workflows (their source mentions
    ``@wf.workflow`` or ``@workflow``), so ``wf dev`` imports them at once.
    """
    return {
        "modules": discover_workflow_modules(root),
        "paths": ["."],
        "dev": {"grace": 30.0, "poll": False},
    }


def discover_workflow_modules(root: Path, limit: int = 50) -> list[str]:
    """Dotted names of the modules under ``root`` whose source declares a workflow."""
    root = root.resolve()
    found: list[str] = []
    for path in sorted(_python_files(root)):
        try:
            text = path.read_text(encoding="utf-8")
        except (OSError, UnicodeDecodeError):
            continue
        if "@wf.workflow" not in text and "@workflow" not in text:
            continue
        parts = path.relative_to(root).with_suffix("").parts
        if parts and parts[-1] == "__init__":
            parts = parts[:-1]
        if parts and all(p.isidentifier() for p in parts):
            found.append(".".join(parts))
        if len(found) >= limit:
            break
    return found


def _python_files(root: Path) -> Iterable[Path]:
    for folder, dirs, files in os.walk(root):
        dirs[:] = [
            d
            for d in dirs
            if d not in _SKIP_DIRS
            and not d.startswith(".")
            and not os.path.exists(os.path.join(folder, d, "pyvenv.cfg"))
        ]
        for name in files:
            if name.endswith(".py"):
                yield Path(folder) / name


def write_starter(root: Path, *, force: bool = False) -> tuple[Path, dict[str, Any]]:
    """Add a starter ``[tool.wf]`` table (:func:`starter_config`) to ``root/pyproject.toml``.

    The table is appended as text (written with tomli-w), so the rest of the file keeps its
    comments and layout; a missing pyproject.toml is created. Only modules that import cleanly
    are listed. A file that has ``[tool.wf]`` already is left alone (``UsageError``) unless
    ``force``, which replaces a whole-file ``wf.toml`` instead. Returns the file and the table.
    """
    import tomli_w

    target = root / "pyproject.toml"
    existing = target.read_text(encoding="utf-8") if target.is_file() else ""
    if not target.is_file():
        # Below a project every command finds that project: a second file here would give
        # the commands run here a store of their own, without a word.
        from wf._config import find_project

        project = find_project(root)
        if project.source is not None and project.root != root.resolve():
            raise UsageError(
                f"{project.source} configures wf already, for this directory too (the "
                f"project is {project.root}); edit it by hand, or start a project of its own "
                "here with a pyproject.toml of its own (wf help config)"
            )
    if existing:
        try:
            document = tomllib.loads(existing)
        except tomllib.TOMLDecodeError as exc:
            raise UsageError(f"{target}: cannot read it: {exc}") from None
        if "wf" in document.get("tool", {}):
            raise UsageError(
                f"{target} has a [tool.wf] table already; edit it by hand (wf help config)"
            )
    data = starter_config(root)
    data["modules"] = importable_modules(root, data["modules"])
    text = tomli_w.dumps({"tool": {"wf": data}})
    if existing and not existing.endswith("\n"):
        existing += "\n"
    joined = existing + ("\n" if existing else "") + text
    # Written whole to a temporary file and renamed, so an interrupted write never leaves a
    # half configuration behind.
    temporary = target.with_name(f".pyproject.toml.{os.getpid()}.tmp")
    temporary.write_text(joined, encoding="utf-8")
    os.replace(temporary, target)
    _ = force  # kept for the command's --force; a [tool.wf] table is never overwritten
    return target, data


def importable_modules(root: Path, modules: list[str], timeout: float = 30.0) -> list[str]:
    """The ``modules`` that import without error from ``root``, tried in a child process (a
    module's import-time side effects or crash stay out of this one)."""
    import json
    import subprocess
    import sys

    if not modules:
        return []
    probe = (
        "import importlib, json, pathlib, sys\n"
        "from wf._loader import ensure_on_path\n"
        "ensure_on_path(pathlib.Path(sys.argv[1]))\n"
        "ok = []\n"
        "for name in json.loads(sys.argv[2]):\n"
        "    try:\n"
        "        importlib.import_module(name)\n"
        "    except BaseException:\n"
        "        continue\n"
        "    ok.append(name)\n"
        "print(json.dumps(ok))\n"
    )
    try:
        done = subprocess.run(
            # -P: the directory goes on the path as wf's loader puts it there, not before
            # the probe's own imports (json.py of the project is not its json).
            [sys.executable, "-P", "-c", probe, str(root), json.dumps(modules)],
            cwd=root,
            capture_output=True,
            text=True,
            timeout=timeout,
            check=False,
        )
        found = json.loads(done.stdout.strip().splitlines()[-1])
    except (subprocess.TimeoutExpired, OSError, ValueError, IndexError):
        return []
    return [m for m in modules if m in found]
