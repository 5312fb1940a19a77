"""Loading ``module:attr`` and ``path/to/file.py:attr`` targets, with precise errors.

A file path is imported under a dotted module name derived from its location relative to the
project root (the directory of the ``pyproject.toml`` with ``[tool.wf]``, see ``wf._config``; the
current directory outside a project): ``examples/hello.py`` -> ``examples.hello``. The project
root and the current directory are on ``sys.path``, so every process started anywhere in the
project gives a module the same name, which is what workflow names and stored type references
rely on.
"""

from __future__ import annotations

import asyncio
import contextlib
import importlib
import keyword
import os
import sys
import threading
import types
from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar

from wf._exceptions import LoadError
from wf._shadows import TAKEN, module_file, shield, shown_file, taken_hint


def ensure_on_path(directory: Path) -> None:
    """Put ``directory`` first on ``sys.path`` if it is not there yet, once the standard
    modules wf needs that its files would hide are imported (``wf._shadows``)."""
    entry = str(directory)
    if entry not in sys.path:
        shield(entry)
        sys.path.insert(0, entry)


def project_root() -> Path:
    """The directory module names are relative to: the project's, else the current one."""
    from wf._config import find_project

    try:
        return find_project().root
    except Exception:
        # An unreadable configuration is reported by the commands that read it; importing a
        # module does not depend on it.
        return Path.cwd().resolve()


def module_name_for(path: Path) -> tuple[str, Path]:
    """The dotted module name for a ``.py`` file, and the ``sys.path`` root it imports from."""
    path = path.resolve()
    parts = path.with_suffix("").parts
    for base in dict.fromkeys((project_root(), Path.cwd().resolve())):
        if path.is_relative_to(base):
            rel = path.with_suffix("").relative_to(base).parts
            if all(part.isidentifier() for part in rel):
                return ".".join(rel), base
    return parts[-1], path.parent


def importable_name(path: Path) -> str | None:
    """The dotted module name under which any process started in the project imports the
    ``.py`` file ``path`` (``jobs/nightly.py`` -> ``jobs.nightly``): its path relative to the
    project root (else the current directory), when every part is a name ``import`` takes.
    None when it has none: below that directory but at a path no module has (``sub dir/``,
    ``2bad/``, ``my-flows.py``), or outside it."""
    path = path.resolve()
    for base in dict.fromkeys((project_root(), Path.cwd().resolve())):
        if path.is_relative_to(base):
            rel = path.with_suffix("").relative_to(base).parts
            if rel and all(p.isidentifier() and not keyword.iskeyword(p) for p in rel):
                return ".".join(rel)
            return None  # the first directory it is below decides: another gives other names
    return None


def script_module(fn: Any) -> str | None:
    """The module name another process imports the script being run (``python3 jobs/x.py``,
    ``python3 -m jobs.x``) by, when ``fn`` is a function of it (its module ``__main__``):
    ``importable_name`` of its file, or the name ``-m`` was given. None when it has none (a
    file of no module path, ``python -c``, an interactive session)."""
    main = sys.modules.get("__main__")
    if main is None or getattr(fn, "__module__", None) != "__main__":
        return None
    spec = getattr(main, "__spec__", None)
    if spec is not None and spec.name and spec.name != "__main__":
        return str(spec.name)  # python -m NAME
    file = getattr(main, "__file__", None)
    code = getattr(fn, "__code__", None)
    if not isinstance(file, str) or not file.endswith(".py") or code is None:
        return None
    try:
        if Path(code.co_filename).resolve() != Path(file).resolve():
            return None  # code run as __main__ from elsewhere (exec, runpy of a string)
        if unguarded_start(file) is not None:
            return None  # a worker importing it would start its runs again: keep __main__
        return importable_name(Path(file))
    except OSError:
        return None


_RUNNERS = frozenset(
    {"asyncio.run", "asyncio.Runner", "anyio.run", "trio.run", "uvloop.run", "wf.start"}
)
_unguarded: dict[str, str | None] = {}
_MAX_DEPTH = 4  # a top-level call of a function that calls one that runs a loop, so deep


def unguarded_start(file: str) -> str | None:
    """The first module-level call in the script ``file`` that starts runs when the file is
    imported (``asyncio.run(...)``, ``asyncio.Runner(...)`` or ``wf.start(...)``, however
    imported, outside the part of an ``if`` that runs only as a script, see
    ``wf._guard.main_guard``; or a call of a module-level ``def`` whose body, not counting the
    functions it defines, makes one or calls such a ``def``), as ``asyncio.run(...) (line
    17)``; None if there is none or the file cannot be read. Parsed once per file: a script
    declares its workflows when it starts. ``wf check`` finds more (rule WF506)."""
    if file in _unguarded:
        return _unguarded[file]
    import ast

    from wf._guard import import_time_calls
    from wf._syntax import parse_source

    found: str | None = None
    try:
        tree = parse_source(Path(file).read_bytes(), filename=file)
    except (OSError, SyntaxError, ValueError):
        tree = None
    if tree is not None:
        names = _imported_names(tree)
        defs = {d.name: d for d in tree.body if isinstance(d, ast.FunctionDef)}

        def starts(call: ast.Call, depth: int, seen: set[str]) -> str | None:
            what = _runner(call, names)
            if what is not None or depth >= _MAX_DEPTH:
                return what
            if not (isinstance(call.func, ast.Name) and call.func.id in defs):
                return None
            name = call.func.id
            if name in seen:
                return None
            seen.add(name)
            # The function's own statements: those of a function it defines run only if called.
            for inner in import_time_calls(defs[name].body):
                if starts(inner, depth + 1, seen) is not None:
                    return f"{name}()"
            return None

        for call in import_time_calls(tree.body):
            what = starts(call, 0, set())
            if what is not None:
                found = f"{what} (line {call.lineno})"
                break
    _unguarded[file] = found
    return found


def _imported_names(tree: Any) -> dict[str, str]:
    """Each name an import binds in ``tree``, to what it names (``aio`` -> ``asyncio``,
    ``run`` -> ``asyncio.run``)."""
    import ast

    names: dict[str, str] = {}
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for alias in node.names:
                if alias.asname:
                    names[alias.asname] = alias.name
                else:
                    top = alias.name.partition(".")[0]
                    names[top] = top
        elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
            for alias in node.names:
                names[alias.asname or alias.name] = f"{node.module}.{alias.name}"
    return names


def _runner(call: Any, names: dict[str, str]) -> str | None:
    import ast

    func = call.func
    if isinstance(func, ast.Attribute) and func.attr in ("run_until_complete", "run_forever"):
        return f"{func.attr}(...)"
    parts: list[str] = []
    while isinstance(func, ast.Attribute):
        parts.append(func.attr)
        func = func.value
    if not isinstance(func, ast.Name):
        return None
    dotted = ".".join([names.get(func.id, func.id), *reversed(parts)])
    return f"{dotted}(...)" if dotted in _RUNNERS else None


def ensure_project_on_path() -> None:
    """Put the current directory and the project root on ``sys.path`` (workers import runs'
    modules by their dotted names, from wherever the worker was started)."""
    ensure_on_path(Path.cwd())
    ensure_on_path(project_root())


def split_target(target: str) -> tuple[str, str]:
    """Split ``module:attr`` into its two parts; a missing ``:attr`` is an error, and so is a
    colon more (but a Windows drive's: ``C:\\shop\\flows.py:order``, and one in a file's
    path: ``/data/odd:dir/job.py:job`` splits at its last colon when what is before it
    ends in ``.py`` or is a file)."""
    windows = target[1:2] == ":" and target[:1].isalpha() and target[2:3] in ("\\", "/")
    drive = target[:2] if windows else ""
    rest = target[len(drive) :]
    if rest.count(":") > 1 and not _names_a_file(target.rpartition(":")[0]):
        module, _, extra = rest.partition(":")
        raise LoadError(
            f"invalid target {target!r}: one colon too many: {drive + module!r} is the module, "
            f"{extra!r} is no attribute (a target has one colon, before the attribute; an "
            "attribute's attribute takes a dot: 'module:Class.method')"
        )
    module, sep, attr = target.rpartition(":")
    if not sep or not module or not attr:
        raise LoadError(
            f"invalid target {target!r}: expected 'module:attribute' or 'path/file.py:attribute'"
        )
    return module, attr


def _names_a_file(module: str) -> bool:
    """Whether ``module`` (what comes before a target's last colon) is a file's path."""
    if module.endswith(".py"):
        return True
    try:
        return os.path.isfile(module)
    except (OSError, ValueError):
        return False


_T = TypeVar("_T")


def load_off_loop(func: Callable[..., _T], *args: Any) -> asyncio.Future[_T]:
    """``func(*args)`` in a thread of its own (a daemon: an import that never ends keeps
    neither the loop nor the process's exit waiting). A target's import runs the module's code,
    which may take its time: on the event loop it would stall every request and every run the
    process drives (``wf serve``'s starts by name, a worker's first drive of a run whose module
    it has not imported). Two callers for one module both wait for its one import (the import
    system's per-module lock). Anything ``func`` raises that is not an ``Exception`` comes back
    as a ``LoadError``, never into the loop, where it would end the process."""
    loop = asyncio.get_running_loop()
    future: asyncio.Future[_T] = loop.create_future()

    def settle(result: Any, exc: BaseException | None) -> None:
        if future.done():
            return  # the caller went away meanwhile
        if exc is not None:
            future.set_exception(exc)
        else:
            future.set_result(result)

    def answer(result: Any, exc: BaseException | None) -> None:
        # A loop closed before the import ended has nobody waiting for it any more.
        with contextlib.suppress(RuntimeError):
            loop.call_soon_threadsafe(settle, result, exc)

    def run() -> None:
        try:
            result = func(*args)
        except Exception as exc:
            answer(None, exc)
        except BaseException as exc:
            answer(None, LoadError(f"error while loading: {type(exc).__name__}: {exc}"))
        else:
            answer(result, None)

    threading.Thread(target=run, name="wf-import", daemon=True).start()
    return future


def load_module(spec: str) -> Any:
    """Import a module given by dotted name or by ``.py`` path."""
    ensure_project_on_path()
    path: Path | None = None
    if spec.endswith(".py") or os.sep in spec or "/" in spec:
        path = Path(spec)
        if not path.is_file():
            raise LoadError(f"cannot load {spec!r}: no such file")
        name, root = module_name_for(path)
        ensure_on_path(root)
    else:
        name = spec
    _not_taken(spec, name)
    try:
        module = importlib.import_module(name)
    except ModuleNotFoundError as exc:
        if exc.name and (name == exc.name or name.startswith(exc.name + ".")):
            raise LoadError(
                f"cannot import module {name!r}: no module named {exc.name!r}"
            ) from None
        shadow = shadowing(exc)
        if shadow is not None:
            raise LoadError(shadow) from exc
        raise LoadError(
            f"error while importing {name!r}{_where(exc)}: {exc}{stdlib_hint(exc)}"
        ) from exc
    except SyntaxError as exc:
        # A NUL byte in the source is a SyntaxError that names no file: name the module's.
        where = exc.filename or _origin(name) or name
        line = f":{exc.lineno}" if exc.lineno is not None else ""
        raise LoadError(f"syntax error in {where}{line}: {exc.msg}") from None
    except BaseException as exc:
        if (
            isinstance(exc, KeyboardInterrupt)
            and threading.current_thread() is threading.main_thread()
        ):
            raise  # Ctrl-C while importing: the command's own answer (exit 130)
        # Off the main thread (``wf serve`` imports there) no Ctrl-C arrives: the module's own
        # code raised it, a load error like any other.
        # Not only Exception: a module that raises SystemExit or BaseException while it is
        # imported would otherwise end the command silently with its code, or a traceback.
        shadow = shadowing(exc)
        if shadow is not None:
            raise LoadError(shadow) from exc
        said = f"{type(exc).__name__}: {exc}" if str(exc) else type(exc).__name__
        raise LoadError(
            f"error while importing {name!r}{_where(exc)}: {said}{stdlib_hint(exc)}"
        ) from exc
    if path is not None:
        _is_file(module, name, spec, path)
    return module


def _not_taken(spec: str, name: str) -> None:
    """Raise ``LoadError`` when module ``name`` is (in) a project file that ``import`` no
    longer reaches: wf needs the standard module of its name (``wf._shadows.TAKEN``)."""
    top = name.partition(".")[0]
    if top in TAKEN:
        raise LoadError(
            f"cannot load {spec!r}: its module name {top!r} is the standard library module "
            f"{top!r}, which wf needs, not {shown_file(TAKEN[top])} of the project: "
            "rename that file"
        )


def _is_file(module: object, name: str, spec: str, path: Path) -> None:
    """Raise ``LoadError`` when the module named ``name`` is another file than ``path``: one
    imported before under that name (``queue.py`` is ``queue``, which wf imported from the
    standard library), not a module of ``path`` that was never run."""
    # A module that put another object in its place, or has no file, is taken as it is.
    found = module_file(module)
    if found is None or Path(found).resolve() == path.resolve():
        return
    owner = (
        f"the standard library module {name!r}"
        if name.partition(".")[0] in sys.stdlib_module_names
        else f"the module {name!r} of {_shown(Path(found))}"
    )
    raise LoadError(
        f"cannot load {spec!r}: its module name {name!r} is {owner}, which this process "
        "imported already: rename that file"
    )


def _origin(name: str) -> str | None:
    """The file module ``name`` is imported from (shown like ``_shown``), or None."""
    import importlib.util

    try:
        spec = importlib.util.find_spec(name)
    except (ImportError, ValueError):
        return None
    if spec is None or not spec.origin or not os.path.isfile(spec.origin):
        return None
    return _shown(Path(spec.origin))


def _shown(path: Path) -> str:
    """``path`` relative to the current directory when it is below it."""
    try:
        return str(path.resolve().relative_to(Path.cwd().resolve()))
    except ValueError:
        return str(path)


def _where(exc: BaseException) -> str:
    """`` at flows.py:12``: the innermost frame of the error in the user's own code (not in
    the import machinery, wf or an installed package); empty when there is none."""
    import traceback

    wf_dir = Path(__file__).resolve().parent
    ours: tuple[Path, ...] = tuple(dict.fromkeys((project_root(), Path.cwd().resolve())))
    found = ""
    for frame in traceback.extract_tb(exc.__traceback__):
        if frame.filename.startswith("<") or frame.lineno is None:
            continue  # <frozen importlib._bootstrap> and the like
        path = Path(frame.filename).resolve()
        if path.is_relative_to(wf_dir) or "site-packages" in path.parts:
            continue
        if any(path.is_relative_to(base) for base in ours):
            found = f" at {_shown(path)}:{frame.lineno}"
    return found


def shadowing(exc: BaseException) -> str | None:
    """The sentence for an import error caused by a project file named like a package that
    another module imports (``rich.py`` beside the workflows: "No module named 'rich.console';
    'rich' is not a package"), or None when ``exc`` is not that. A module of the standard
    library is not a package (``stdlib_hint``)."""
    if isinstance(exc, ImportError) and exc.name:
        top, failed = exc.name.partition(".")[0], "importing it failed"
    elif isinstance(exc, AttributeError) and isinstance(exc.obj, types.ModuleType):
        # `orjson.py` beside the workflows: importing works, using it does not ("module
        # 'orjson' has no attribute 'dumps'").
        top, failed = exc.obj.__name__.partition(".")[0], "using it failed"
    else:
        return None
    if top in sys.stdlib_module_names:
        return None
    file = module_file(sys.modules.get(top))
    if file is None:
        return None
    path = Path(file).resolve()
    ours = tuple(dict.fromkeys((project_root(), Path.cwd().resolve())))
    if not any(path.parent == base for base in ours):
        return None
    # It shadows only if the same name is also installed elsewhere on the path.
    from importlib.machinery import PathFinder

    elsewhere = [
        entry
        for entry in sys.path
        if entry and Path(entry).resolve() not in ours and Path(entry).is_dir()
    ]
    if PathFinder.find_spec(top, elsewhere) is None:
        return None
    return (
        f"{_shown(path)} shadows the installed package {top!r} ({failed}: {exc}): rename that file"
    )


def stdlib_hint(exc: BaseException) -> str:
    """``; json.py of the project is imported in place of the standard library module 'json':
    rename that file`` when ``exc`` is an error that code of a library (the standard
    library's, an installed package's, wf's) met because it imported a file of the project
    named like a standard module: the file's own code failed, or the library found in it no
    name it uses. Empty otherwise: above all when the project's own code imported that file,
    which is its file, as in plain Python. Only the modules of ``exc`` and its traceback are
    looked at. When the module is one wf needs the standard library's of (``wf._shadows``),
    the project's own code is told too: its file is not what its ``import`` gets."""
    taken = taken_hint(exc)
    if taken:
        return taken
    import itertools
    import traceback

    frames = [frame for frame, _ in traceback.walk_tb(exc.__traceback__)]
    frames = [f for f in frames if not _machinery(f.f_code.co_filename)]
    module: types.ModuleType | None = None
    file: str | None = None
    if isinstance(exc, AttributeError) and isinstance(exc.obj, types.ModuleType):
        module = exc.obj  # "module 'json' has no attribute 'loads'"
    elif isinstance(exc, ImportError) and exc.name:
        # "cannot import name 'loads' from 'json' (json.py)" names the file; "No module named
        # 'json.decoder'; 'json' is not a package" names the module above it.
        file = exc.path or None
        if file is None:
            found_module = sys.modules.get(exc.name.rpartition(".")[0] or exc.name)
            if isinstance(found_module, types.ModuleType):
                module = found_module
    if module is not None:
        file = module_file(module)
    # The failing use: where the library met the module (the innermost frame).
    if file is not None and frames and _library(frames[-1].f_code.co_filename):
        hint = _hidden(file)
        if hint:
            return hint
    # The file's own code failed while a library imported it.
    for importer, imported in reversed(list(itertools.pairwise(frames))):
        if imported.f_code.co_name == "<module>" and _library(importer.f_code.co_filename):
            hint = _hidden(imported.f_code.co_filename)
            if hint:
                return hint
    return ""


def _machinery(filename: str) -> bool:
    """Whether ``filename`` is the import system's, between an import and the module."""
    return filename.startswith("<frozen importlib") or filename == importlib.__file__


def _library(filename: str) -> bool:
    """Whether code of ``filename`` is a library's: the standard library's (frozen modules
    too), an installed package's or wf's. The project's, and code of no file (``python -c``,
    a notebook's cell) are the user's, and so is this module's import of the module a
    command was asked to load."""
    if filename.startswith("<frozen "):
        return True
    if filename.startswith("<"):
        return False
    path = os.path.realpath(filename)
    if path == os.path.realpath(__file__):
        return False
    if {"site-packages", "dist-packages"}.intersection(path.split(os.sep)):
        return True
    wf_dir = os.path.dirname(os.path.realpath(__file__)) + os.sep
    stdlib_dir = os.path.dirname(os.path.realpath(os.__file__)) + os.sep
    return path.startswith((wf_dir, stdlib_dir))


def _hidden(file: str) -> str:
    """The hint of ``stdlib_hint`` when ``file`` is the project's and named like a module of
    the standard library (``json.py``, ``json/__init__.py``); else empty."""
    path = Path(os.path.realpath(file))
    if path.stem == "__init__":
        path = path.parent
    name = path.name.partition(".")[0]
    ours = tuple(dict.fromkeys((project_root(), Path.cwd().resolve())))
    if name not in sys.stdlib_module_names or path.parent not in ours:
        return ""
    return (
        f"; {_shown(path)} of the project is imported in place of the standard library module "
        f"{name!r}: rename that file"
    )


def load_target(target: str) -> Any:
    """The object a ``module:attr`` / ``path/file.py:attr`` target names."""
    if ":" not in target and target.strip():
        _no_attribute(target)
    module_spec, attr = split_target(target)
    module = load_module(module_spec)
    obj: Any = module
    for part in attr.split("."):
        if not part.isidentifier() or part.startswith("__"):
            raise LoadError(f"invalid target {target!r}: {part!r} is not a name a target may use")
        if obj is not module and isinstance(obj, types.ModuleType):
            # Not through another module the target's imports: its lazy attributes import
            # code (a package's ``__getattr__``) that the target's own module check never saw.
            raise LoadError(
                f"invalid target {target!r}: it reaches into module {obj.__name__!r}; name "
                f"that module's own target instead ('{obj.__name__}:...')"
            )
        try:
            obj = getattr(obj, part)
        except AttributeError:
            raise LoadError(
                f"module {module.__name__!r} has no attribute {attr!r}"
                + workflows_hint(module, attr)
            ) from None
    return obj


def _no_attribute(target: str) -> None:
    """``flows.py`` (no ``:attr``): a module that loads is named with its workflows."""
    try:
        module = load_module(target)
    except LoadError:
        split_target(target)  # the usual "invalid target" error
        raise
    names = workflows_in(module)
    listing = (
        f"workflows in {module.__name__}: {', '.join(names[:20])}"
        + (", ..." if len(names) > 20 else "")
        if names
        else f"module {module.__name__!r} declares no workflow"
    )
    first = names[0] if names else "WORKFLOW"
    raise LoadError(
        f"invalid target {target!r}: name the workflow after a colon, as "
        f"'{target}:{first}' ({listing})"
    )


def workflows_in(module: Any) -> list[str]:
    """The attribute names of the workflows ``module`` declares, sorted."""
    return sorted(
        name
        for name, value in vars(module).items()
        if getattr(type(value), "is_wf_workflow", False) and not name.startswith("_")
    )


def workflows_hint(module: Any, attr: str) -> str:
    """``; did you mean 'order'? (workflows in shop: order, refund)`` for a mistyped name."""
    import difflib

    names = workflows_in(module)
    if not names:
        return f" (module {module.__name__!r} declares no workflow)"
    close = difflib.get_close_matches(attr, names, n=1)
    guess = f"; did you mean {close[0]!r}?" if close else ""
    listing = ", ".join(names[:20]) + (", ..." if len(names) > 20 else "")
    return f"{guess} (workflows in {module.__name__}: {listing})"


def canonical_target(target: str, obj: Any) -> str:
    """A target other processes can load: file paths become dotted module names."""
    module_spec, attr = split_target(target)
    if module_spec.endswith(".py") or "/" in module_spec:
        path = Path(module_spec).resolve()
        module_name = importable_name(path)
        if module_name is None:
            # Outside the project, or at a path no module has (``sub dir/ok.py``): no dotted
            # name is importable elsewhere, keep the path (which loads it, as here).
            return f"{path}:{attr}"
        return f"{module_name}:{attr}"
    return target
