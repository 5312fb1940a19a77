"""Which modules are the project's, and reloading them as one transaction.

A reload *purges* every loaded project module from ``sys.modules`` and imports the runner
modules (and every project module that was loaded before, in its original order) afresh,
rather than calling ``importlib.reload`` module by module. ``docs/dev.md`` explains the choice;
in short:

* fresh module objects hold no stale names (``reload`` keeps a deleted function alive in the
  module's namespace) and no stale references (``from app.util import f`` in a module that is
  not reloaded keeps calling the old ``f``);
* the import system computes the dependency order itself, import cycles included;
* an import that fails halfway can be rolled back completely: the old module objects (and the
  workflows they declared) are put back, and the previous code keeps serving.

The import runs on the loop's thread (the main one), so no workflow code runs meanwhile and
module-level objects bound to their thread serve the steps, for at most ``import_wait``
seconds (and not past a stop signal): an import that never returns (``time.sleep``, a socket
wait or ``while True`` at module level) is interrupted there and given up, the serving code is
put back, and the outcome says where it hung. C code that never returns to Python cannot be
interrupted so: only a second signal (or a kill) ends ``wf dev`` then.
"""

from __future__ import annotations

import ast
import contextlib
import dataclasses
import importlib
import importlib.util
import linecache
import os
import signal
import site
import sys
import sysconfig
import threading
import time
import traceback
import types
from collections.abc import Callable, Iterable, Sequence
from pathlib import Path
from typing import Any

from wf import _interrupts
from wf._loader import ensure_on_path, module_name_for
from wf._syntax import parse_source
from wf.check._files import resolved
from wf.engine import _workflow
from wf.engine._errors import sigint_may_raise


@dataclasses.dataclass
class ReloadOutcome:
    """What an import or reload did: the modules imported, or the error that undid it."""

    ok: bool
    modules: list[str]
    took: float
    error: str | None = None
    dropped: list[str] = dataclasses.field(default_factory=list)
    """Modules loaded before whose file is gone (not imported again)."""
    _fresh: dict[str, types.ModuleType] = dataclasses.field(default_factory=dict, repr=False)
    """A prepared reload's new module objects, not serving yet (see ``commit``)."""
    _declared: dict[str, Any] = dataclasses.field(default_factory=dict, repr=False)
    """... and the workflows they declared."""
    _purged: set[str] = dataclasses.field(default_factory=set, repr=False)
    """... and the names of the modules they replace."""
    stuck: bool = False
    """The import did not return within the wait (or by a stop signal): interrupted."""

    def files(self) -> list[Path]:
        """The files of the project modules a prepared reload imported (those the new code is
        made of, including any it imports for the first time)."""
        found = [getattr(m, "__file__", None) for m in self._fresh.values()]
        return [resolved(Path(f)) for f in found if isinstance(f, str)]


_LOOK_EVERY = 0.25
"""Seconds between two looks at an import that runs (whether its wait ran out, or a stop
signal came). Not shorter: each look is a signal, and a C extension that does not retry a
system call it interrupts (Python's own modules do) would fail its import."""

IMPORT_WAIT = 10.0
"""Seconds an import (the first load, a reload's) may take before it is said to be stuck and
given up (``WF_DEV_IMPORT_WAIT``)."""


class _Stuck(BaseException):
    """Raised into an import still running after the wait (or at a stop signal), where it
    was: a ``BaseException``, so that module code catching ``Exception`` lets it through."""

    def __init__(self, where: str, waited: float) -> None:
        super().__init__(where)
        self.where = where
        self.waited = waited
        self.library: str | None = None
        """The library outside the project the import was in (or had loaded part of):
        modules of it it finished stay loaded, the interpreter may hold part of it."""


class ProjectModules:
    """The project's modules (files under its roots, outside virtualenvs) and the runner
    modules, with transactional reloads."""

    def __init__(
        self,
        roots: Sequence[Path],
        runner_specs: Sequence[str],
        *,
        import_wait: float = IMPORT_WAIT,
        stop_asked: Callable[[], bool] = lambda: False,
    ) -> None:
        self.roots = [Path(r).resolve() for r in roots]
        self.runner_specs = list(runner_specs)
        self.runners = [runner_name(spec) for spec in self.runner_specs]
        self._excluded = _library_dirs(self.roots)
        self.import_wait = import_wait
        self.stop_asked = stop_asked
        """Whether a stop signal came: an import is waited for no longer then."""
        self._refused = False

    # -- what belongs to the project --------------------------------------------------------

    def owns_file(self, path: Path | str) -> bool:
        """Whether a file is project code (under a root, not in a virtualenv or wf itself)."""
        if str(path).startswith("<"):
            return False  # ``<frozen importlib._bootstrap>``, ``<string>``: no file at all
        # resolved(): a symlink loop among the changed files must not end the reload.
        file = resolved(Path(path))
        if not any(file.is_relative_to(root) for root in self.roots):
            return False
        return not any(file.is_relative_to(d) for d in self._excluded)

    def owns(self, name: str, module: types.ModuleType | None) -> bool:
        """Whether a loaded module is project code."""
        if module is None or name == "__main__" or name == "wf" or name.startswith("wf."):
            return False
        file = getattr(module, "__file__", None)
        return isinstance(file, str) and self.owns_file(file)

    def loaded(self) -> dict[str, types.ModuleType]:
        """The project's modules in ``sys.modules``, in the order they were imported."""
        return {n: m for n, m in list(sys.modules.items()) if self.owns(n, m)}

    def loaded_files(self) -> dict[Path, str]:
        """File -> module name of every loaded project module."""
        files: dict[Path, str] = {}
        for name, module in self.loaded().items():
            file = getattr(module, "__file__", None)
            if isinstance(file, str):
                files[Path(file).resolve()] = name
        return files

    def runner_files(self) -> list[Path]:
        """The files of the runner modules that are loaded (or given as paths)."""
        files: list[Path] = []
        for spec, name in zip(self.runner_specs, self.runners, strict=True):
            module = sys.modules.get(name)
            file = getattr(module, "__file__", None) if module is not None else None
            if isinstance(file, str):
                files.append(Path(file).resolve())
            elif spec.endswith(".py"):
                files.append(Path(spec).resolve())
        return files

    def missing_runners(self) -> list[str]:
        """Runner modules whose source is gone (deleted or renamed): found before a drain,
        so a reload that cannot import them is refused without stopping anything."""
        missing: list[str] = []
        for spec, name in zip(self.runner_specs, self.runners, strict=True):
            module = sys.modules.get(name)
            file = getattr(module, "__file__", None) if module is not None else None
            if isinstance(file, str):
                if not os.path.exists(file):
                    missing.append(name)
            elif spec.endswith(".py") and not Path(spec).exists():
                missing.append(name)
        return missing

    def all_runners_loaded(self) -> bool:
        """False while a runner module failed to import (any change may fix it)."""
        return all(name in sys.modules for name in self.runners)

    def refused(self) -> None:
        """A reload was refused: until one goes through, any project file may be what it
        needs (a module only the refused code imports is loaded by nothing that serves)."""
        self._refused = True

    def affected(self, paths: Iterable[Path]) -> list[Path]:
        """The changed files a reload must pick up: loaded project files and runner files.

        Any other change (a test, a script, a new file nothing imports yet) leaves the running
        code as it is; while a runner module failed to import, or since a reload was refused,
        every project file counts.
        """
        interesting = set(self.loaded_files()) | set(self.runner_files())
        retry = self._refused or not self.all_runners_loaded()
        return [p for p in paths if resolved(p) in interesting or (retry and self.owns_file(p))]

    def first_imports(self, files: Iterable[Path]) -> list[Path]:
        """Project files that ``files`` import, directly or through one another, and that are
        not loaded now: what importing them would run for the first time.

        Found from the ``import`` statements (those that run at import: not in a function's
        body), without running anything; a dynamic import (``importlib.import_module``) is not
        seen.
        """
        loaded = set(self.loaded_files())
        queue = [resolved(Path(f)) for f in files]
        seen = set(queue)
        found: list[Path] = []
        while queue:
            for target in self._imported_files(queue.pop()):
                if target in seen or target in loaded:
                    continue  # an unchanged loaded file imports nothing new
                seen.add(target)
                found.append(target)
                queue.append(target)
        return found

    def _imported_files(self, file: Path) -> list[Path]:
        try:
            tree = parse_source(file.read_bytes())
        except (OSError, SyntaxError, ValueError, RecursionError, MemoryError):
            return []  # the check reports it
        found: list[Path] = []
        for parts, base in _imports(tree, file):
            for end in range(1, len(parts) + 1):  # `a.b.c` runs a, a.b and a.b.c
                target = self._module_file(parts[:end], base)
                if target is not None and target not in found:
                    found.append(target)
        return found

    def _module_file(self, parts: Sequence[str], base: Path | None) -> Path | None:
        """The project file of the module ``parts`` (relative to ``base`` for a relative
        import, else found on ``sys.path`` as the import system would), if any."""
        if base is not None:
            dirs = [base]
        else:
            dirs = [Path(p or os.curdir) for p in [str(Path.cwd()), *sys.path]]
        for directory in dirs:
            stem = directory.joinpath(*parts)
            for candidate in (stem / "__init__.py", stem.with_name(stem.name + ".py")):
                try:
                    found = candidate.is_file()
                except OSError:  # a name too long for a file, a directory not readable
                    found = False
                if found:
                    file = resolved(candidate)
                    return file if self.owns_file(file) else None
        return None  # not found, or a namespace package: no code of its own

    # -- importing --------------------------------------------------------------------------

    def load(self) -> ReloadOutcome:
        """Import the runner modules (the first time)."""
        began = time.perf_counter()
        registry = dict(_workflow._registry)
        try:
            self._import(self.runners)
        except _Stuck as stuck:
            self._serve({}, registry)  # none of it serves (a module half run least of all)
            took = time.perf_counter() - began
            return ReloadOutcome(False, [], took, self._said_stuck(stuck), stuck=True)
        except BaseException as exc:
            if _interrupted(exc):
                raise
            return ReloadOutcome(False, [], time.perf_counter() - began, self.describe(exc))
        return ReloadOutcome(True, list(self.runners), time.perf_counter() - began)

    def reload(self, changed: Iterable[Path] = ()) -> ReloadOutcome:
        """Purge the project's modules and import them again; on any error, put the old ones
        back (``ok=False``) so the previous code keeps serving."""
        outcome = self.prepare(changed)
        if outcome.ok:
            self.commit(outcome)
        return outcome

    def prepare(self, changed: Iterable[Path] = ()) -> ReloadOutcome:
        """Import the project's modules afresh *without* switching to them: the new module
        objects (and the workflows they declare) are kept aside in the outcome, and the old
        ones are put back at once, whether the import worked or not, so the serving code is
        untouched. :meth:`commit` switches later (after a drain).

        This is how a reload finds out that the new code does not import (a syntax error, an
        ``ImportError``, a ``NameError`` at import, a runner module gone) *before* it stops
        anything. It runs synchronously on the event loop, so no workflow code runs meanwhile,
        for at most ``import_wait`` seconds: an import given up is interrupted, an outcome
        with ``stuck`` set, the serving code untouched.
        """
        began = time.perf_counter()
        for path in changed:
            _forget_bytecode(path)
        old = self.loaded()
        registry = dict(_workflow._registry)
        order = list(dict.fromkeys([*self.runners, *old]))
        dropped = [n for n in old if n not in self.runners and not _source_exists(old[n])]
        order = [n for n in order if n not in dropped]
        for name in old:
            del sys.modules[name]
        # Workflows declared by the purged modules are forgotten, so a workflow deleted from
        # the code is no longer served by its old definition.
        for key, declared in list(_workflow._registry.items()):
            if declared.fn.__module__ in old:
                del _workflow._registry[key]
        importlib.invalidate_caches()
        error: str | None = None
        stuck = False
        try:
            self._import(order)
        except _Stuck as given_up:
            error, stuck = self._said_stuck(given_up), True
        except BaseException as exc:
            if _interrupted(exc):
                self._serve(old, registry)
                raise
            error = self.describe(exc)
        # Every project module was purged above: those loaded now are the new code's.
        fresh = self.loaded()
        new_flows = {k: w for k, w in _workflow._registry.items() if w.fn.__module__ in fresh}
        # Back to the serving code, whatever happened.
        self._serve(old, registry)
        took = time.perf_counter() - began
        if error is not None:
            return ReloadOutcome(False, [], took, error, dropped, stuck=stuck)
        return ReloadOutcome(
            True, order, took, None, dropped, _fresh=fresh, _declared=new_flows, _purged=set(old)
        )

    def commit(self, prepared: ReloadOutcome) -> None:
        """Serve the modules :meth:`prepare` imported: the project's modules loaded now
        (including any imported since, on the old code) are replaced by them, and so are the
        workflows they declared."""
        if not prepared.ok:
            raise ValueError("cannot commit a reload that failed")
        current = self.loaded()
        gone = current.keys() | prepared._purged
        for name in current:
            del sys.modules[name]
        for key, declared in list(_workflow._registry.items()):
            if declared.fn.__module__ in gone:
                del _workflow._registry[key]
        sys.modules.update(prepared._fresh)
        _workflow._registry.update(prepared._declared)
        self._refused = False
        linecache.checkcache()  # divergence messages and tracebacks show the new lines

    def _serve(self, old: dict[str, types.ModuleType], registry: dict[str, Any]) -> None:
        """Put the serving code back: the modules ``old`` (the project's others dropped from
        ``sys.modules``) and the workflow registry ``registry``."""
        for name in self.loaded():
            if old.get(name) is not sys.modules.get(name):
                sys.modules.pop(name, None)
        sys.modules.update(old)
        _workflow._registry.clear()
        _workflow._registry.update(registry)

    def _import(self, names: Sequence[str]) -> None:
        """Import ``names`` here, on the loop's thread (as ``wf worker`` does: module-level
        objects bound to their thread, an SQLite connection or the running loop, serve the
        steps), for at most ``import_wait`` seconds and not past a stop signal: a short
        interval timer (SIGALRM) looks, and once the wait ran out raises ``_Stuck`` into the
        import (a ``time.sleep``, a socket wait, a ``while True`` loop). The import system
        then drops the module half run and releases its lock, so nothing of it runs on.
        Raises what the import raised, or ``_Stuck``. Off the main thread, or without
        ``setitimer``, the import is not bounded."""
        if threading.current_thread() is not threading.main_thread() or not hasattr(
            signal, "setitimer"
        ):
            _import_all(names)
            return
        began = time.monotonic()
        importing = True
        own = sys._getframe()

        def look(signum: int, frame: types.FrameType | None) -> None:
            nonlocal importing
            if not importing or frame is own:  # not in the import (or back out of it)
                return
            waited = time.monotonic() - began
            if waited >= self.import_wait or self.stop_asked():
                if _unsafe_to_raise(frame, sys._getframe().f_code):
                    return  # at the next look
                importing = False  # raised once: the import system unwinds undisturbed
                stuck = _Stuck(self._where(frame), waited)
                if frame is not None and not self.owns_file(frame.f_code.co_filename):
                    stuck.library = _top_name(frame.f_globals.get("__name__"))
                raise stuck

        previous = signal.signal(signal.SIGALRM, look)
        timer: tuple[float, float] = (0.0, 0.0)
        try:
            timer = signal.setitimer(signal.ITIMER_REAL, _LOOK_EVERY, _LOOK_EVERY)
            known = set(sys.modules)
            try:
                _import_all(names)
            except _Stuck as stuck:
                if stuck.library is None:  # loaded in part, outside the project?
                    new = [n for n in sys.modules if n not in known]
                    outside = [n for n in new if not self.owns(n, sys.modules.get(n))]
                    stuck.library = _top_name(outside[0]) if outside else None
                raise
            finally:
                importing = False
        finally:
            # The timer set before (pytest-timeout's, say) goes on, less the time spent, and
            # with its own handler back first: one that ran out meanwhile fires now.
            signal.setitimer(signal.ITIMER_REAL, 0)
            signal.signal(signal.SIGALRM, previous)
            left, every = timer
            if left > 0:
                left = max(left - (time.monotonic() - began), 1e-6)
                signal.setitimer(signal.ITIMER_REAL, left, every)

    def _where(self, frame: types.FrameType | None) -> str:
        """Where the import is in the project's code (``path:line``), else in which file."""
        found: str | None = None
        while frame is not None:
            if found is None and self.owns_file(frame.f_code.co_filename):
                found = f"{self.display(frame.f_code.co_filename)}:{frame.f_lineno}"
            frame = frame.f_back
        return found or "an import outside the project's code"

    def _said_stuck(self, stuck: _Stuck) -> str:
        if self.stop_asked():
            said = f"{stuck.where}: the import was still running at the stop signal: given up"
        else:
            said = (
                f"{stuck.where}: the import has not returned after {stuck.waited:.0f} s (code "
                "at module level that blocks?); given up, the previous code keeps serving"
            )
        if stuck.library:
            said += (
                f"; the interpreter may hold part of {stuck.library} (what it had loaded): "
                "restart wf dev (Ctrl-C and start it again)"
            )
        return said

    def describe(self, exc: BaseException) -> str:
        """An import error in one line, located in the project's code where possible."""
        if isinstance(exc, SyntaxError) and exc.filename:
            return f"{self.display(exc.filename)}:{exc.lineno}: SyntaxError: {exc.msg}"
        frames = [f for f in traceback.extract_tb(exc.__traceback__) if self.owns_file(f.filename)]
        if isinstance(exc, ModuleNotFoundError) and exc.name and not frames:
            # Not found by the import of a runner itself (no project code ran): name it.
            gone = [r for r in self.runners if r == exc.name or r.startswith(exc.name + ".")]
            if gone:
                return f"runner module(s) {', '.join(gone)} not found"
        said = str(exc).strip()  # `raise KeyboardInterrupt` says nothing: no dangling colon
        text = (f"{type(exc).__name__}: {said}" if said else type(exc).__name__).splitlines()
        message = " ".join(line.strip() for line in text)
        if frames:
            last = frames[-1]
            return f"{self.display(last.filename)}:{last.lineno}: {message}"
        return message

    def display(self, path: str | Path) -> str:
        """A path as the user sees it: relative to the current directory when inside it."""
        shown = resolved(Path(path))
        with contextlib.suppress(ValueError):
            return str(shown.relative_to(Path.cwd().resolve()))
        return str(shown)


def runner_name(spec: str) -> str:
    """The module name of a runner given as a dotted name or a ``.py`` path."""
    if spec.endswith(".py") or "/" in spec or os.sep in spec:
        name, root = module_name_for(Path(spec))
        ensure_on_path(root)
        return name
    return spec


def _imports(tree: ast.Module, file: Path) -> list[tuple[list[str], Path | None]]:
    """The modules a file's import statements name (not those in function bodies): dotted
    parts, and the directory a relative import starts from (None: an absolute one)."""
    found: list[tuple[list[str], Path | None]] = []
    todo: list[ast.AST] = [tree]
    while todo:
        node = todo.pop()
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.Lambda):
            continue  # runs when called, not at import
        if isinstance(node, ast.Import):
            found.extend((alias.name.split("."), None) for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            module = node.module.split(".") if node.module else []
            base = None
            if node.level:
                base = file.parent
                for _ in range(node.level - 1):
                    base = base.parent
            if module:
                found.append((module, base))
            # `from pkg import name`: name may be a submodule
            found.extend(([*module, a.name], base) for a in node.names if a.name != "*")
        else:
            todo.extend(ast.iter_child_nodes(node))
    return found


def _unsafe_to_raise(frame: types.FrameType | None, look: types.CodeType) -> bool:
    """Whether ``_Stuck`` raised at ``frame`` could break the interpreter rather than the
    import: inside importlib's own code (between taking an import lock and the ``try`` that
    releases it, in a callback whose exceptions are swallowed), inside wf's stop-signal
    handler, or inside an earlier ``look`` (its exception would surface where that one was
    called, importlib's code maybe). The next look tries again."""
    if frame is not None and frame.f_code.co_filename.startswith("<frozen importlib"):
        return True
    while frame is not None:
        if frame.f_code is _STOP_HANDLER or frame.f_code is look:
            return True
        frame = frame.f_back
    return False


_STOP_HANDLER = _interrupts.StopSignals.__call__.__code__


def _top_name(name: object) -> str | None:
    return (name.partition(".")[0] or None) if isinstance(name, str) else None


def _import_all(names: Sequence[str]) -> None:
    ensure_on_path(Path.cwd())  # as wf's loader does: project modules import from the cwd
    for name in names:
        importlib.import_module(name)


def _interrupted(exc: BaseException) -> bool:
    """Whether an exception out of an import must stop ``wf dev``: only a ``KeyboardInterrupt``
    that may be a real Ctrl-C. ``wf dev`` takes SIGINT on its event loop, whose handler raises
    nothing, so one raised while it serves is the imported code's (``raise KeyboardInterrupt``),
    a fault of that code like ``sys.exit``: the import fails, the previous code keeps serving."""
    return isinstance(exc, KeyboardInterrupt) and sigint_may_raise()


def _source_exists(module: types.ModuleType) -> bool:
    file = getattr(module, "__file__", None)
    return isinstance(file, str) and os.path.exists(file)


def _forget_bytecode(path: Path) -> None:
    # A .pyc is trusted when the source's mtime (whole seconds) and size match: an edit within
    # the same second that keeps the size would otherwise import the old code.
    with contextlib.suppress(OSError, ValueError, NotImplementedError):
        os.unlink(importlib.util.cache_from_source(str(path)))


def _library_dirs(roots: Sequence[Path]) -> list[Path]:
    """Directories holding installed code, never the project's even when inside it (a
    ``.venv`` in the project, wf itself when developing wf)."""
    candidates: list[str] = []
    if sys.prefix != sys.base_prefix:
        candidates.append(sys.prefix)  # a virtualenv: everything in it is installed code
    with contextlib.suppress(AttributeError):
        candidates.extend(site.getsitepackages())
    with contextlib.suppress(AttributeError):
        candidates.append(site.getusersitepackages())
    paths = sysconfig.get_paths()
    candidates.extend(paths[k] for k in ("purelib", "platlib", "stdlib") if k in paths)
    import wf

    candidates.append(str(Path(wf.__file__).parent))
    dirs = {Path(c).resolve() for c in candidates if c}
    # A directory holding a whole root (a project inside /usr, say) says nothing about it.
    return [d for d in dirs if not any(root.is_relative_to(d) for root in roots)]
