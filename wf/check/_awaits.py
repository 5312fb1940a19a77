"""WF504: a step, a workflow or a wf operation called in workflow code without ``await``;
WF505: a step or a workflow awaited without being called (``await charge``).

Inside a run, ``charge(order)`` only *creates* the operation; ``await`` runs it. A call whose
value is thrown away (a bare statement), returned, or used as a plain value (added to, compared,
formatted, tested, indexed) was almost certainly meant to be awaited. So was one kept in a name
(``total = compute(x)``) that is never awaited, handed on or collected afterwards: the name is
only ever used as a value, or not at all. Calls handed to another call
(``asyncio.gather(a(), b())``, ``tg.create_task(...)``, ``wf.select(...)``), kept in a
collection, or kept in a name that is later awaited or handed on are left alone.
"""

from __future__ import annotations

import ast
from collections.abc import Iterator

from wf.check._checks import Sink
from wf.check._declared import Declarations
from wf.check._index import Scope
from wf.check._resolve import Project, resolve_expr

# wf functions whose result must be awaited inside a run.
_WF_OPERATIONS = frozenset(
    {"wf.sleep", "wf.sleep_until", "wf.map", "wf.select", "wf.first", "wf.start"}
)
# Where a call's value is used as a value (or dropped), not kept for a later await.
_MISUSE = (
    ast.Expr,
    ast.Return,
    ast.BinOp,
    ast.Compare,
    ast.FormattedValue,
    ast.Attribute,
    ast.Subscript,
    ast.UnaryOp,
    ast.BoolOp,
    ast.If,
    ast.While,
    ast.IfExp,
    ast.AugAssign,
)
# Where a name's value is awaited, handed on or collected: it may still be awaited.
_KEEPS = (
    ast.Await,
    ast.Starred,
    ast.keyword,
    ast.List,
    ast.Tuple,
    ast.Set,
    ast.Dict,
    ast.Yield,
    ast.YieldFrom,
)


def _async_workflows(declarations: Declarations) -> Iterator[tuple[ast.AsyncFunctionDef, Scope]]:
    """Each async workflow's function and scope."""
    for scope, declared in declarations.by_scope.items():
        fn = scope.function
        if declared.kind == "workflow" and isinstance(fn, ast.AsyncFunctionDef):
            yield fn, scope


def check_awaits(project: Project, declarations: Declarations, sink: Sink) -> None:
    """Flag un-awaited operations in the body of every async workflow."""
    for fn, scope in _async_workflows(declarations):
        with sink.guarded(scope):  # not in the generator: the loop's errors never reach it
            _check_awaits(fn, scope, project, declarations, sink)


def _check_awaits(
    fn: ast.AsyncFunctionDef,
    scope: Scope,
    project: Project,
    declarations: Declarations,
    sink: Sink,
) -> None:
    calls, parents = _calls_with_parents(fn)
    deferred = _deferred_names(fn, parents)
    for call, parent in calls:
        use = _misuse(call, parent, deferred)
        if use is None:
            continue
        what = _operation(call, scope, project, declarations)
        if what is None:
            continue
        sink.add(
            scope.module,
            call,
            "WF504",
            f"{what} is called without `await`: it {use}, and the workflow gets an "
            "operation object instead of its result",
        )


def check_uncalled_awaits(project: Project, declarations: Declarations, sink: Sink) -> None:
    """Flag ``await charge`` (no call) of a step or workflow in every async workflow."""
    for fn, scope in _async_workflows(declarations):
        with sink.guarded(scope):
            _check_uncalled_awaits(fn, scope, project, declarations, sink)


def _check_uncalled_awaits(
    fn: ast.AsyncFunctionDef,
    scope: Scope,
    project: Project,
    declarations: Declarations,
    sink: Sink,
) -> None:
    for node in _own_nodes(fn):
        if not isinstance(node, ast.Await) or isinstance(node.value, ast.Call):
            continue
        qualname = resolve_expr(node.value, scope)
        target = None if qualname is None else project.lookup(qualname, scope.module)
        kind = None if target is None else declarations.kind(target)
        if target is None or kind is None:
            continue
        short = target.qualname.rpartition(".")[2]
        sink.add(
            scope.module,
            node,
            "WF505",
            f"{kind} `{target.qualname}` is awaited without being called; "
            f"write `await {short}(...)`",
        )


def _own_nodes(fn: ast.AsyncFunctionDef) -> list[ast.AST]:
    """The nodes of ``fn``'s own body, not of functions nested in it."""
    found: list[ast.AST] = []
    stack: list[ast.AST] = list(fn.body)
    while stack:
        node = stack.pop()
        found.append(node)
        stack.extend(
            child
            for child in ast.iter_child_nodes(node)
            if not isinstance(child, ast.FunctionDef | ast.AsyncFunctionDef | ast.Lambda)
        )
    return found


def _misuse(call: ast.Call, parent: ast.AST, deferred: set[str]) -> str | None:
    """How ``call``'s value is misused ("is never run" / "is used as a value"), or None."""
    if isinstance(parent, ast.Assign | ast.AnnAssign) and parent.value is call:
        targets = parent.targets if isinstance(parent, ast.Assign) else [parent.target]
        names = [t.id for t in targets if isinstance(t, ast.Name)]
        if len(names) != len(targets) or any(name in deferred for name in names):
            return None  # unpacked, stored in an attribute, or awaited / handed on later
        return "is used as a value"
    if not isinstance(parent, _MISUSE):
        return None
    if isinstance(parent, ast.If | ast.While | ast.IfExp) and parent.test is not call:
        return None
    return "is never run" if isinstance(parent, ast.Expr) else "is used as a value"


def _deferred_names(fn: ast.AsyncFunctionDef, parents: dict[int, ast.AST]) -> set[str]:
    """Names whose value may still be awaited: somewhere ``await``ed, handed to a call, put in a
    collection, or read by a nested function (whose body this rule does not follow)."""
    deferred: set[str] = set()
    for node in ast.walk(fn):
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.Lambda) and node is not fn:
            deferred.update(n.id for n in ast.walk(node) if isinstance(n, ast.Name))
        if not isinstance(node, ast.Name) or not isinstance(node.ctx, ast.Load):
            continue
        parent = parents.get(id(node))
        handed_on = isinstance(parent, ast.Call) and node is not parent.func
        if handed_on or isinstance(parent, _KEEPS):
            deferred.add(node.id)
    return deferred


def _calls_with_parents(
    fn: ast.AsyncFunctionDef,
) -> tuple[list[tuple[ast.Call, ast.AST]], dict[int, ast.AST]]:
    """Every call in ``fn``'s own body (not in nested functions) with its parent node, and the
    parent of every node visited (by ``id``)."""
    found: list[tuple[ast.Call, ast.AST]] = []
    stack: list[ast.AST] = list(fn.body)
    parents: dict[int, ast.AST] = {}
    for stmt in fn.body:
        parents[id(stmt)] = fn
    while stack:
        node = stack.pop()
        if isinstance(node, ast.Call):
            found.append((node, parents[id(node)]))
        for child in ast.iter_child_nodes(node):
            if isinstance(child, ast.FunctionDef | ast.AsyncFunctionDef | ast.Lambda):
                continue
            parents[id(child)] = node
            stack.append(child)
    found.sort(key=lambda item: (item[0].lineno, item[0].col_offset))
    return found, parents


def _operation(
    call: ast.Call, scope: Scope, project: Project, declarations: Declarations
) -> str | None:
    """``step `charge``` / ``workflow `child``` / ```wf.sleep()``` if ``call`` makes one."""
    qualname = resolve_expr(call.func, scope)
    if qualname is None:
        return None
    if qualname in _WF_OPERATIONS:
        return f"`{qualname}()`"
    target = project.lookup(qualname, scope.module)
    if target is None:
        return None
    kind = declarations.kind(target)
    if kind is None:
        return None
    return f"{kind} `{target.qualname}`"
