"""WF504: a step, a workflow or a wf operation called in workflow code without ``await``.

Inside a run, ``charge(order)`` only *creates* the operation; ``await`` runs it. A call whose
value is thrown away (a bare statement), returned, or used as a plain value (added to, compared,
formatted, tested, indexed) was almost certainly meant to be awaited. Calls handed to another
call (``asyncio.gather(a(), b())``, ``tg.create_task(...)``, ``wf.select(...)``) or kept in a
name or a collection may be awaited later and are left alone.
"""

from __future__ import annotations

import ast

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


def check_awaits(project: Project, declarations: Declarations, sink: Sink) -> None:
    """Flag un-awaited operations in the body of every async workflow."""
    for scope, declared in declarations.by_scope.items():
        fn = scope.function
        if declared.kind != "workflow" or not isinstance(fn, ast.AsyncFunctionDef):
            continue
        for call, parent in _calls_with_parents(fn):
            if not isinstance(parent, _MISUSE):
                continue
            if isinstance(parent, ast.If | ast.While | ast.IfExp) and parent.test is not call:
                continue
            what = _operation(call, scope, project, declarations)
            if what is None:
                continue
            use = "is never run" if isinstance(parent, ast.Expr) else "is used as a value"
            sink.add(
                scope.module,
                call,
                "WF504",
                f"{what} is called without `await`: it {use}, and the workflow gets an "
                "operation object instead of its result",
            )


def _calls_with_parents(fn: ast.AsyncFunctionDef) -> list[tuple[ast.Call, ast.AST]]:
    """Every call in ``fn``'s own body (not in nested functions) with its parent node."""
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
    return found


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
