"""The package's shape: the facade's contract and the direction of imports."""

from __future__ import annotations

import ast
import importlib
import pathlib
import re
import types

import pytest

import wf
import wf.admin

ROOT = pathlib.Path(wf.__file__).parent

CONTRACT = {
    "workflow",
    "step",
    "FatalError",
    "RetryableError",
    "step_id",
    "sleep",
    "sleep_until",
    "now",
    "random",
    "uuid4",
    "start",
    "Run",
    "RunStatus",
    "get_run",
    "NondeterminismError",
    "RunFailed",
    "RunCancelled",
    "RunNotFound",
    "RunAlreadyExists",
    "StoreVersionError",
    "RunStalled",
}


def test_every_contract_name_is_exported() -> None:
    missing = CONTRACT - set(wf.__all__)
    assert not missing
    for name in wf.__all__:
        assert getattr(wf, name) is not None, name


def test_all_is_sorted_and_has_no_private_names() -> None:
    assert wf.__all__ == sorted(wf.__all__)
    assert not [n for n in wf.__all__ if n.startswith("_")]


def _checked_imports(package: types.ModuleType) -> dict[str, tuple[str, str]]:
    """What a type checker sees in ``package``'s ``if TYPE_CHECKING:`` block: each name
    bound, with the module and the name it is imported from."""
    tree = ast.parse(pathlib.Path(package.__file__ or "").read_text())
    found: dict[str, tuple[str, str]] = {}
    for node in tree.body:
        if not (isinstance(node, ast.If) and ast.unparse(node.test) == "TYPE_CHECKING"):
            continue
        for statement in node.body:
            assert isinstance(statement, ast.ImportFrom), ast.unparse(statement)
            for alias in statement.names:
                found[alias.asname or alias.name] = (statement.module or "", alias.name)
    return found


@pytest.mark.parametrize("package", [wf, wf.admin], ids=lambda package: package.__name__)
def test_each_lazy_name_is_the_object_type_checkers_are_shown(package: types.ModuleType) -> None:
    # The names are imported on first use (``_EXPORTS``), while type checkers read the
    # ``TYPE_CHECKING`` imports: the three lists are kept by hand and must not drift apart.
    exports: dict[str, str] = vars(package)["_EXPORTS"]
    subpackages: set[str] = vars(package).get("_SUBPACKAGES", set())
    checked = _checked_imports(package)
    assert set(exports) == set(package.__all__)
    assert set(checked) == set(package.__all__) | subpackages
    for name in subpackages:
        assert checked[name] == (package.__name__, name)
        assert getattr(package, name) is importlib.import_module(f"{package.__name__}.{name}")
    for name in package.__all__:
        module, original = checked[name]
        assert exports[name] == module, name
        assert getattr(package, name) is getattr(importlib.import_module(module), original), name


def test_the_exceptions_module_draws_every_exception_in_its_tree() -> None:
    """The docstring of ``wf._exceptions`` is the map of the whole tree: each class is on it."""
    from wf import _exceptions

    tree = _exceptions.__doc__ or ""
    classes = [
        name
        for name, value in vars(_exceptions).items()
        if isinstance(value, type)
        and issubclass(value, BaseException)
        and value.__module__.split(".")[0] == "wf"
    ]
    assert classes
    missing = [name for name in classes if not re.search(rf"^[\s│├└─]*{name} ", tree, re.M)]
    assert not missing, f"not drawn in wf._exceptions' tree: {missing}"


def _imports(path: pathlib.Path) -> set[str]:
    tree = ast.parse(path.read_text())
    found: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module:
            found.add(node.module)
    return found


def test_the_engine_imports_no_cli_and_no_concrete_store() -> None:
    forbidden = ("wf.cli", "wf.store.local", "wf.store.postgres", "wf.store.memory", "wf.check")
    for path in (ROOT / "engine").rglob("*.py"):
        bad = [m for m in _imports(path) if m.startswith(forbidden)]
        assert not bad, f"{path.name} imports {bad}"


def test_stores_import_nothing_from_engine_or_cli() -> None:
    for path in (ROOT / "store").rglob("*.py"):
        bad = [m for m in _imports(path) if m.startswith(("wf.engine", "wf.cli"))]
        assert not bad, f"{path.name} imports {bad}"


def test_admin_imports_no_front_end() -> None:
    forbidden = ("wf.cli", "wf.serve", "wf.store.local", "wf.store.postgres")
    for path in (ROOT / "admin").rglob("*.py"):
        bad = [m for m in _imports(path) if m.startswith(forbidden)]
        assert not bad, f"{path.name} imports {bad}"


# -- the import graph ----------------------------------------------------------------------
#
# Edges are the imports a module runs: at module level and inside functions alike (an import
# inside a function is a dependency hidden, not removed). Imports under ``if TYPE_CHECKING:``
# are annotations only and do not count. An import of a package's ``__init__`` is no edge: it
# runs before any module of the package anyway.


def _module_name(path: pathlib.Path) -> str:
    parts = path.relative_to(ROOT.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _is_type_checking(node: ast.If) -> bool:
    test = node.test
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (
        isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING"
    )


def _runtime_imports(path: pathlib.Path, *, annotations: bool = False) -> set[str]:
    """Every module ``path`` imports when it runs, as absolute names (with ``annotations``:
    and those it imports under ``if TYPE_CHECKING:``)."""
    name = _module_name(path)
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    found: set[str] = set()

    def visit(node: ast.AST) -> None:
        if isinstance(node, ast.If) and _is_type_checking(node) and not annotations:
            for child in node.orelse:
                visit(child)
            return
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")[: len(package.split(".")) - (node.level - 1)]
                module = ".".join(base + ([node.module] if node.module else []))
            else:
                module = node.module or ""
            found.add(module)
            found.update(f"{module}.{alias.name}" for alias in node.names)
        for child in ast.iter_child_nodes(node):
            visit(child)

    visit(ast.parse(path.read_text()))
    return found


def _graph(prefix: str) -> dict[str, set[str]]:
    """Module -> the non-package modules it imports at run time, for modules under ``prefix``."""
    modules = {_module_name(p): p for p in ROOT.rglob("*.py") if p.name != "__init__.py"}
    return {
        name: {m for m in _runtime_imports(path) if m in modules and m != name}
        for name, path in modules.items()
        if name.startswith(prefix)
    }


def _cycle(graph: dict[str, set[str]]) -> list[str] | None:
    """One import cycle of ``graph`` (restricted to its own modules), or None."""
    state: dict[str, int] = {}  # 1: on the current path, 2: done
    path: list[str] = []

    def visit(node: str) -> list[str] | None:
        state[node] = 1
        path.append(node)
        for dep in sorted(graph[node] & graph.keys()):
            if state.get(dep) == 1:
                return [*path[path.index(dep) :], dep]
            if dep not in state and (found := visit(dep)) is not None:
                return found
        path.pop()
        state[node] = 2
        return None

    for start in sorted(graph):
        if start not in state and (found := visit(start)) is not None:
            return found
    return None


def test_the_kernel_is_a_directed_acyclic_graph() -> None:
    cycle = _cycle(_graph("wf.engine."))
    assert cycle is None, "the kernel's imports go round: " + " -> ".join(cycle or [])


def test_the_whole_package_is_a_directed_acyclic_graph() -> None:
    cycle = _cycle(_graph("wf"))
    assert cycle is None, "imports go round: " + " -> ".join(cycle or [])


# What the kernel may use from outside it: the errors, the journal schema, the store interface
# (its faults too), the target loader (and its hint for a project file wf needs the standard
# module of), the extras' install hint, the bounded cancellation the stores share, and
# OpenTelemetry's instrument (imported only when tracing is in use).
KERNEL_MAY_IMPORT = {
    "wf._exceptions",
    "wf._extras",  # the `pip install` hint of an optional extra
    "wf._durations",  # the grammar of a duration: imports only wf._exceptions
    "wf._files",  # ulimit -n against a concurrency: imports nothing of wf
    "wf._events",
    "wf._loader",
    "wf._shadows",  # the hint a failed step's message gets: imports nothing of wf
    "wf._tasks",  # cancel_within: imports nothing of wf
    "wf.otel",
    "wf.store",
    "wf.store._base",
    "wf.store._faults",  # the faults a store notes, and where an error names: only wf._exceptions
    "wf.store._ids",
    "wf.store._limits",
}


def test_the_kernel_imports_only_what_lies_below_it() -> None:
    for module, deps in _graph("wf.engine.").items():
        outside = {d for d in deps if not d.startswith("wf.engine.")} - KERNEL_MAY_IMPORT
        assert not outside, f"{module} imports {sorted(outside)}"


def test_the_cycle_finder_finds_a_cycle() -> None:
    assert _cycle({"a": {"b"}, "b": {"c"}, "c": {"a"}}) == ["a", "b", "c", "a"]
    assert _cycle({"a": {"b"}, "b": set()}) is None


# -- the top of the kernel -----------------------------------------------------------------
#
# ``Engine`` sits at the top of the kernel: the modules below it see an engine through the
# ``EngineLike`` protocol (``wf.engine._enginelike``), and its features through the tuple it
# owns (``engine.features``), never through tables filled when a module is imported.


def _below(graph: dict[str, set[str]], top: str) -> set[str]:
    """The modules ``top`` depends on, directly or not."""
    seen: set[str] = set()
    todo = [top]
    while todo:
        for dep in graph.get(todo.pop(), set()):
            if dep not in seen:
                seen.add(dep)
                todo.append(dep)
    return seen


def test_no_module_below_the_engine_imports_it() -> None:
    engine = (ROOT / "engine").glob("_*.py")
    graph = {
        _module_name(p): {m for m in _runtime_imports(p, annotations=True) if m.startswith("wf.")}
        for p in engine
    }
    below = _below(graph, "wf.engine._engine")
    naming = sorted(m for m in below & graph.keys() if "wf.engine._engine" in graph[m])
    assert not naming, f"{naming} lie below wf.engine._engine and import it (annotations count)"
    # The modules that may: the worker and what lies above the engine.
    assert "wf.engine._worker" not in below
    assert {m for m, deps in graph.items() if "wf.engine._engine" in deps} >= {"wf.engine._worker"}


def test_the_search_for_modules_below_follows_every_edge() -> None:
    graph = {"top": {"a"}, "a": {"b"}, "b": {"top"}, "c": {"top"}}
    assert _below(graph, "top") == {"a", "b", "top"}


def _calls_at_import(tree: ast.Module) -> list[str]:
    """The names of functions a module calls while it is imported (not in function bodies)."""
    called: list[str] = []

    def visit(node: ast.AST) -> None:
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda)):
            for default in (*node.args.defaults, *node.args.kw_defaults):
                if default is not None:
                    visit(default)  # evaluated at import
            for decorator in getattr(node, "decorator_list", ()):
                visit(decorator)
            return
        if isinstance(node, ast.Call):
            func = node.func
            if isinstance(func, ast.Name):
                called.append(func.id)
            elif isinstance(func, ast.Attribute):
                called.append(func.attr)
        for child in ast.iter_child_nodes(node):
            visit(child)

    visit(tree)
    return called


def test_no_engine_module_registers_anything_when_imported() -> None:
    for path in (ROOT / "engine").rglob("*.py"):
        calls = _calls_at_import(ast.parse(path.read_text()))
        registering = [c for c in calls if c.startswith("register")]
        assert not registering, f"{path.name} calls {registering} when it is imported"


def test_the_import_time_call_finder_skips_function_bodies() -> None:
    source = (
        "register_a(1)\n"
        "if x:\n    register_b()\n"
        "def f(y=register_c()):\n    register_d()\n"
        "class C:\n    register_e()\n    def m(self):\n        register_f()\n"
        "g = lambda: register_g()\n"
    )
    calls = _calls_at_import(ast.parse(source))
    assert [c for c in calls if c.startswith("register")] == [
        "register_a",
        "register_b",
        "register_c",
        "register_e",
    ]


def test_serve_dev_and_the_tui_import_nothing_from_the_cli() -> None:
    # Their words come from wf.admin._words, like the CLI's: no front end renders with another's.
    for folder in ("serve", "dev", "cli/tui"):
        for path in (ROOT / folder).rglob("*.py"):
            bad = [
                m
                for m in _runtime_imports(path) | _imports(path)
                if m.startswith("wf.cli") and not m.startswith("wf.cli.tui")
            ]
            assert not bad, f"{path.relative_to(ROOT)} imports {sorted(bad)}"


def test_no_engine_module_branches_on_the_http_client() -> None:
    # wf.start / wf.get_run / wf.resume_hook choose a server above the kernel (wf._entry).
    for path in (ROOT / "engine").rglob("*.py"):
        names = {
            node.id if isinstance(node, ast.Name) else node.attr
            for node in ast.walk(ast.parse(path.read_text()))
            if isinstance(node, ast.Name | ast.Attribute)
        }
        assert not names & {"remote_client", "RemoteClient"}, f"{path.name} asks for the remote"
        assert not {m for m in _runtime_imports(path) if m.startswith("wf._remote")}, path.name


# The CLI renders wf.admin: a command parses, makes one wf.admin call and renders, so it needs
# no kernel or store module (annotations under TYPE_CHECKING aside), the terminal UI included.
# What it needs of the kernel it reaches through wf.admin or the facade (``wf.Worker``).


def test_the_cli_imports_no_kernel_or_store_module() -> None:
    for path in (ROOT / "cli").rglob("*.py"):
        deep = sorted(m for m in _runtime_imports(path) if m.startswith(("wf.engine", "wf.store")))
        assert not deep, f"{_module_name(path)} imports {deep}: go through wf.admin"


FRONT_ENDS = ("serve", "cli", "dev")
"""Packages that only render what ``wf.admin`` returns (docs/admin.md)."""

STORE_CALLS_ALLOWED = {"close"}
"""What a front end may call on a store itself: closing the one it opened."""

STORE_READERS = {
    # The webhook receiver records deliveries and replays them (a write path of the engine's
    # hooks, not a page or a command that shows runs): it keeps its own store calls.
    "serve/_webhooks.py",
}


def _store_calls(path: pathlib.Path) -> list[str]:
    """``<…store>.<Store method>(…)`` calls in a module (a store reached by any name that
    ends in ``store``: ``store``, ``self.store``, ``server.store``, ``self._store``…)."""
    from wf.store import Store

    methods = {name for name in dir(Store) if not name.startswith("_")}
    found = []
    for node in ast.walk(ast.parse(path.read_text())):
        if not (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute)):
            continue
        owner = node.func.value
        name = (
            owner.attr
            if isinstance(owner, ast.Attribute)
            else owner.id
            if isinstance(owner, ast.Name)
            else ""
        )
        called = node.func.attr
        if name.lstrip("_").endswith("store") and called in methods - STORE_CALLS_ALLOWED:
            found.append(f"{node.lineno}: {name}.{called}")
    return found


def test_front_ends_read_and_wait_through_wf_admin_not_the_store() -> None:
    # A page, a command or a screen that read the store itself could tell other than the
    # same question asked through wf.admin (or over WF_URL): every read goes through it.
    for package in FRONT_ENDS:
        for path in (ROOT / package).rglob("*.py"):
            if str(path.relative_to(ROOT)) in STORE_READERS:
                continue
            calls = _store_calls(path)
            assert not calls, f"{path.relative_to(ROOT)} calls the store: {calls}"


RENDERING = {
    "connect",
    "local",
    "explain",
    "detail_json",
    "http_detail_json",
    "operations",
    "failures",
}
"""``wf.admin``'s functions that take no store: the client, and what renders an answer."""
STORE_LEVEL = frozenset(name for name in wf.admin.__all__ if name[0].islower()) - RENDERING
"""``wf.admin``'s functions that take a store or an engine: the readers and controls a backend
is built of."""


def test_the_terminal_ui_renders_an_admin_client() -> None:
    # Every read and action of the app is a method of wf.admin.Admin, so that it opens on a
    # server's runs (WF_URL) as on the store here: no store-level reader or control, no feed or
    # liveness probe of a store, no engine's drivers (a drive here is LocalAdmin.drive's).
    private = ("wf.admin._feed", "wf.admin._logs", "wf.admin._control", "wf.admin._liveness")
    for path in (ROOT / "cli" / "tui").rglob("*.py"):
        where = path.relative_to(ROOT)
        tree = ast.parse(path.read_text())
        for node in ast.walk(tree):
            if isinstance(node, ast.ImportFrom) and node.module is not None:
                names = {alias.name for alias in node.names}
                assert not node.module.startswith(private), f"{where} imports {node.module}"
                if node.module == "wf.admin":
                    assert not names & STORE_LEVEL, f"{where} imports {names & STORE_LEVEL}"
                if node.module == "wf.admin._read":
                    assert names <= {"OFF_LOOP_EVENTS"}, f"{where} imports {names} of _read"
            if isinstance(node, ast.Attribute):
                assert node.attr not in {"drivers", "drive_soon", "live", "probe"}, (
                    f"{where} reaches into an engine: .{node.attr}"
                )


def _unguarded_isdigit(source: str) -> list[int]:
    """Lines of ``source`` calling ``.isdigit()`` in a statement with no ``.isascii()``."""
    tree = ast.parse(source)
    lines = source.splitlines()
    found = []
    for node in ast.walk(tree):
        if not isinstance(node, ast.stmt) or isinstance(node, ast.FunctionDef | ast.ClassDef):
            continue
        body = [
            n
            for field in ("body", "orelse", "finalbody", "handlers")
            for n in getattr(node, field, [])
        ]
        own = "\n".join(lines[node.lineno - 1 : (node.end_lineno or node.lineno)])
        for inner in body:  # a compound statement's own text is its header only
            start, end = inner.lineno - 1, inner.end_lineno or inner.lineno
            own = own.replace("\n".join(lines[start:end]), "")
        if ".isdigit()" in own and ".isascii()" not in own:
            found.append(node.lineno)
    return found


def test_every_isdigit_is_guarded_by_isascii() -> None:
    """``str.isdigit`` also takes superscripts (``"²"``), which ``int`` refuses: a name or
    field checked by it alone let one stray file stop a worker with a ``ValueError``."""
    offenders = [
        f"{path.relative_to(ROOT)}:{line}"
        for path in sorted(ROOT.rglob("*.py"))
        for line in _unguarded_isdigit(path.read_text())
    ]
    assert not offenders, offenders


def test_the_isdigit_finder_finds_an_unguarded_call() -> None:
    source = "if x.isdigit():\n    y = int(x)\nif x.isascii() and x.isdigit():\n    pass\n"
    assert _unguarded_isdigit(source) == [1]
