"""Which code a request may make this server import: only the project's own.

A target (``module:attr``) names a module of the project (its file under the project root,
outside any ``site-packages``) or one the configuration names (``[tool.wf] modules``, and their
submodules). File paths, installed packages, the standard library and modules found elsewhere on
``sys.path`` are refused before anything is imported: the module's file is located the way the
import system would find it (``importlib.util.find_spec`` for the top-level name, which runs no
module code, then the finders on its package's directories), and only then imported.
"""

from __future__ import annotations

import importlib.machinery
import importlib.util
import sys
import sysconfig
from pathlib import Path
from typing import Any

from wf.serve._errors import ApiError

_OUTSIDE_DIRS = frozenset({"site-packages", "dist-packages"})


def check_target(target: str) -> None:
    """Refuse (``ApiError`` 400) a target this server may not import; see the module docstring."""
    from wf._loader import split_target

    module, sep, attr = target.rpartition(":")
    if sep and (module.endswith(".py") or "/" in module or "\\" in module):
        raise _refused(target, "a file path: name the module instead, as 'module:attr'")
    split_target(target)  # a missing ':attr' says so (LoadError, 400)
    names = [*module.split("."), *attr.split(".")]
    if not all(part.isidentifier() for part in names):
        raise _refused(target, "expected 'module:attr' with dotted Python names")
    if _configured(module):
        return
    where = _project_file(module)
    if where is not None:
        raise _refused(target, where)


def _refused(target: str, why: str) -> ApiError:
    shown = target if len(target) <= 200 else target[:200] + "…"
    return ApiError(400, "bad_request", f"target {shown!r} refused: {why}")


def _configured(module: str) -> bool:
    """Whether ``[tool.wf] modules`` names ``module`` or a package holding it."""
    from wf._config import find_project, setting
    from wf._loader import module_name_for

    project = find_project()
    for entry in setting("modules", project):
        name = entry
        if entry.endswith(".py") or "/" in entry:
            name, _ = module_name_for(project.root / entry)
        if module == name or module.startswith(name + "."):
            return True
    return False


def _project_file(module: str) -> str | None:
    """None when ``module``, and each package above it, would be imported from a file of the
    project; else why not."""
    from wf._loader import ensure_project_on_path, project_root

    ensure_project_on_path()  # as the import will be: the project's modules are findable
    root = project_root()
    parts = module.split(".")
    top = parts[0]
    outside = f"{module!r} is not a module of this project ({root}) nor named in [tool.wf] modules"
    if top in sys.builtin_module_names or top in sys.stdlib_module_names:
        return outside
    spec: Any
    try:
        spec = importlib.util.find_spec(top)  # a top-level name: no module code runs
    except (ImportError, ValueError):
        spec = None
    for depth in range(1, len(parts) + 1):
        if spec is None:
            return f"no module named {'.'.join(parts[:depth])!r} in this project ({root})"
        if not _inside(spec, root):
            return outside
        if depth == len(parts):
            return None
        name = ".".join(parts[: depth + 1])
        loaded = sys.modules.get(name)
        if loaded is not None:
            spec = getattr(loaded, "__spec__", None)
            continue
        parent = sys.modules.get(".".join(parts[:depth]))
        locations = getattr(parent, "__path__", None) or spec.submodule_search_locations
        if locations is None:
            return f"{'.'.join(parts[:depth])!r} is a module, not a package"
        spec = importlib.machinery.PathFinder.find_spec(name, list(locations))
    return outside  # pragma: no cover (the loop returns)


def _inside(spec: Any, root: Path) -> bool:
    """Whether the import of ``spec`` runs only code of the project: a file under ``root``,
    outside installed packages and the standard library, or a namespace package (no code)."""
    if spec.origin is None or spec.origin == "namespace":
        return spec.submodule_search_locations is not None
    if not spec.has_location:
        return False  # built-in, frozen
    path = Path(spec.origin).resolve()
    if not path.is_relative_to(root) or _OUTSIDE_DIRS & set(path.parts):
        return False
    for key in ("stdlib", "platstdlib", "purelib", "platlib"):
        if path.is_relative_to(Path(sysconfig.get_paths()[key]).resolve()):
            return False
    return True
