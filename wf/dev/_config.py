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
    """The nearest configuration at or above ``start``: its file and its ``[tool.wf]`` table."""
    start = start.resolve()
    for folder in (start, *start.parents):
        candidate = folder / CONFIG_FILE
        if candidate.is_file():
            return candidate, _read_toml(candidate)
        pyproject = folder / "pyproject.toml"
        if pyproject.is_file():
            section = _read_toml(pyproject).get("tool", {}).get("wf")
            if section is not None:
                if not isinstance(section, dict):
                    raise UsageError(f"{pyproject}: [tool.wf] must be a table")
                return pyproject, section
    return None


def load_dev_config(start: Path) -> DevConfig:
    """Read the ``wf dev`` settings of the project around ``start``. Raises ``UsageError``."""
    found = find_config(start)
    if found is None:
        return DevConfig()
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
        if isinstance(grace, bool) or not isinstance(grace, int | float) or grace < 0:
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
    return config


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
    """Write ``root/wf.toml`` with :func:`starter_config`; refuses to overwrite without
    ``force`` (``UsageError``). Returns the file and what it holds."""
    import tomli_w

    target = root / CONFIG_FILE
    if target.exists() and not force:
        raise UsageError(f"{target} exists already (use --force to overwrite it)")
    data = starter_config(root)
    text = tomli_w.dumps(data)
    # Written whole to a temporary file and renamed, so an interrupted write never leaves a
    # half configuration behind.
    temporary = target.with_name(f".{CONFIG_FILE}.{os.getpid()}.tmp")
    temporary.write_text(text, encoding="utf-8")
    os.replace(temporary, target)
    return target, data
