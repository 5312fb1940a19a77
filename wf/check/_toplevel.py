"""WF506: module-level code that starts or runs workflows in a module that declares them.

A worker imports the module of a run's workflow to resume it: code at the module's top level
runs again then. A script whose ``asyncio.run(main())`` is not under
``if __name__ == "__main__":`` starts its runs again in every worker that resumes one.
"""

from __future__ import annotations

import ast
from collections.abc import Iterator

from wf._guard import import_time_calls
from wf.check._checks import Sink
from wf.check._declared import Declarations
from wf.check._index import ModuleIndex, Scope
from wf.check._resolve import Project, is_wf_api, resolve_expr

_RUNNERS = frozenset({"asyncio.run", "asyncio.Runner", "anyio.run", "trio.run", "uvloop.run"})
"""Calls that run an event loop (and so whatever coroutine they are handed) right away."""
_LOOP_METHODS = frozenset({"run_until_complete", "run_forever"})
_MAX_DEPTH = 4  # a top-level call of a function that calls one that runs a loop, so deep


def check_top_level_starts(project: Project, declarations: Declarations, sink: Sink) -> None:
    """WF506: in each module that declares a workflow, module-level statements (outside
    functions, classes and ``if __name__ == "__main__":``) that run an event loop, start a
    run (``wf.start``) or call a function of the checked code that does."""
    modules: dict[str, ModuleIndex] = {}
    for scope, declared in declarations.by_scope.items():
        if declared.kind == "workflow":
            modules.setdefault(scope.module.path, scope.module)
    for module in modules.values():
        top = module.scope
        with sink.guarded(top):
            for call in _top_level_calls(top.node):
                what = _starter(call, top, project, declarations, 0, set())
                if what is None:
                    continue
                message = (
                    f"`{what}` runs at the top level of a module that declares workflows: a "
                    "worker imports this module to resume its runs, and starts them again"
                )
                sink.add(module, call, "WF506", message)


def _starter(
    call: ast.Call,
    scope: Scope,
    project: Project,
    declarations: Declarations,
    depth: int,
    seen: set[int],
) -> str | None:
    """What ``call`` does that starts runs (``asyncio.run(...)``, ``wf.start(...)``, a call of
    a function that does), or None."""
    qualname = resolve_expr(call.func, scope)
    if qualname in _RUNNERS:
        return f"{qualname}(...)"
    if is_wf_api(qualname, "start"):
        return "wf.start(...)"
    if isinstance(call.func, ast.Attribute) and call.func.attr in _LOOP_METHODS:
        return f"{call.func.attr}(...)"
    if qualname is None or depth >= _MAX_DEPTH:
        return None
    target = project.lookup(qualname, scope.module)
    # Only a plain ``def`` runs when called: calling an ``async def`` makes a coroutine.
    if (
        target is None
        or target.kind != "function"
        or not isinstance(target.node, ast.FunctionDef)
        or declarations.kind(target) is not None
        or id(target) in seen
    ):
        return None
    seen.add(id(target))
    for inner in target.calls:
        if _starter(inner, target, project, declarations, depth + 1, seen) is not None:
            return f"{qualname.rpartition('.')[2]}()"
    return None


def _top_level_calls(tree: ast.AST) -> Iterator[ast.Call]:
    """The calls module-level statements make, outside functions, classes, lambdas and the
    parts of ``if`` statements that run only as a script (``wf._guard.main_guard``)."""
    yield from import_time_calls(tree.body if isinstance(tree, ast.Module) else [])
