"""Rules about how steps and workflows are declared (WF401–WF403, WF5xx).

These look at declarations, not at what the code does, so they apply to every step and
workflow in the checked files, reachable or not.
"""

from __future__ import annotations

import ast
from collections import defaultdict

from wf.check._checks import Sink
from wf.check._declared import Declarations
from wf.check._index import Scope


def check_workflows(declarations: Declarations, sink: Sink) -> None:
    """WF501 (sync workflow), WF502 (duplicate name), WF503 (unannotated parameter)."""
    by_name: dict[str, list[Scope]] = defaultdict(list)
    for scope, declared in declarations.by_scope.items():
        fn = scope.function
        if declared.kind != "workflow" or fn is None:
            continue
        with sink.guarded(scope):
            name = declarations.workflow_name(scope)
            by_name[name].append(scope)
            if isinstance(fn, ast.FunctionDef):
                message = (
                    f"workflow `{name}` is a plain `def`; wf drives workflows as coroutines and "
                    "suspends them at `await`s, so it must be `async def`"
                )
                sink.add(scope.module, fn, "WF501", message)
            elif scope.yields:
                message = (
                    f"workflow `{name}` is an async generator (it yields); a workflow returns its "
                    "result, and `@wf.workflow` refuses it when the module is imported"
                )
                sink.add(scope.module, fn, "WF501", message)
            for arg in _parameters(fn, skip_first=_is_method(scope)):
                if arg.annotation is None:
                    message = (
                        f"workflow parameter `{arg.arg}` has no type annotation; wf validates and "
                        "decodes run input by the annotations, so without one it stays raw JSON"
                    )
                    sink.add(scope.module, arg, "WF503", message)
    for name, scopes in by_name.items():
        if len(scopes) < 2:
            continue
        scopes.sort(key=lambda s: (s.module.path, s.node_line))
        for index, other in enumerate(scopes):
            earlier = [s for s in scopes[:index] if not _alternatives(s, other)]
            if not earlier:
                continue
            first = earlier[0]
            message = (
                f"workflow name `{name}` is already used at {first.module.path}:"
                f"{first.node_line}; runs of the two would be confused in the store"
            )
            assert other.function is not None
            sink.add(other.module, other.function, "WF502", message)


def check_steps(declarations: Declarations, sink: Sink) -> None:
    """WF401 (lambda step), WF402 (closure step), WF403 (instance-method step)."""
    for module, node in declarations.lambda_steps:
        message = (
            "a lambda cannot be a step: it has no stable name for the journal to record, and "
            "its inputs are hidden in the closure"
        )
        sink.add(module, node, "WF401", message)
    for scope, declared in declarations.by_scope.items():
        fn = scope.function
        if declared.kind != "step" or fn is None or scope.parent is None:
            continue
        with sink.guarded(scope):
            if scope.parent.kind == "class" and _is_method(scope) and _parameters(fn, False):
                first = _parameters(fn, False)[0].arg
                message = (
                    f"step `{scope.qualname}` is an instance method; wf records a step's "
                    f"arguments as JSON, and `{first}` is an object it cannot record or rebuild"
                )
                sink.add(scope.module, fn, "WF403", message)
            enclosing = _enclosing_function(scope)
            if enclosing is None:
                continue
            captured = sorted(_free_names(scope) & _outer_names(enclosing))
            if captured:
                names = ", ".join(f"`{n}`" for n in captured)
                message = (
                    f"step `{fn.name}` captures {names} from `{enclosing.qualname}`; wf records "
                    "a step's arguments, not its closure, so those inputs are invisible to the "
                    "journal and to retries"
                )
                sink.add(scope.module, fn, "WF402", message)


def _alternatives(a: Scope, b: Scope) -> bool:
    """Whether two definitions sit in different arms of one if/try/match (only one runs)."""
    if a.module is not b.module:
        return False
    arms = dict(a.branch)
    return any(node in arms and arms[node] != arm for node, arm in b.branch)


def _parameters(fn: ast.FunctionDef | ast.AsyncFunctionDef, skip_first: bool) -> list[ast.arg]:
    args = fn.args
    every = [*args.posonlyargs, *args.args]
    if skip_first:
        every = every[1:]
    every.extend(args.kwonlyargs)
    every.extend(a for a in (args.vararg, args.kwarg) if a is not None)
    return every


def _is_method(scope: Scope) -> bool:
    fn = scope.function
    if fn is None or scope.parent is None or scope.parent.kind != "class":
        return False
    return not any(
        isinstance(d, ast.Name) and d.id in ("staticmethod", "classmethod")
        for d in fn.decorator_list
    )


def _enclosing_function(scope: Scope) -> Scope | None:
    current = scope.parent
    while current is not None and current.kind == "class":
        current = current.parent
    return current if current is not None and current.kind != "module" else None


def _free_names(scope: Scope) -> set[str]:
    """Names ``scope`` (or anything nested in it) reads but does not bind itself."""
    names = {name.id for name in scope.loads}
    declared_nonlocal: set[str] = set()
    for stmt in scope.scope_stmts:
        if isinstance(stmt, ast.Nonlocal):
            declared_nonlocal.update(stmt.names)
    for child in scope.children:
        names |= _free_names(child)
    if scope.kind != "class":
        names = {n for n in names if not scope.binds(n) or n in declared_nonlocal}
    return (names | declared_nonlocal) - scope.globals


def _outer_names(scope: Scope) -> set[str]:
    """Names bound in ``scope`` and the functions around it (not module globals).

    Imports are left out: a step that uses a module imported by its enclosing function reads
    no data from the closure, so there is nothing for the journal to miss.
    """
    names: set[str] = set()
    current: Scope | None = scope
    while current is not None and current.kind != "module":
        if current.kind != "class":
            bound = {*current.bindings, *current.params, *current.defs, *current.classes}
            names |= bound - current.globals
        current = current.parent
    return names
