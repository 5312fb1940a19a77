"""Project-wide analysis: find workflow code, then apply every rule to it.

Workflow code is each workflow body plus, transitively, the plain functions it calls (resolved
across the checked modules) and the functions and lambdas nested in those. Steps are never
entered: a step may do anything, that is what it is for.
"""

from __future__ import annotations

import ast
from collections import deque

from wf.check._awaits import check_awaits, check_uncalled_awaits
from wf.check._branches import check_branches
from wf.check._checks import Sink, check_workflow_code
from wf.check._declared import Declarations, find_declarations
from wf.check._hygiene import check_steps, check_workflows
from wf.check._index import Scope
from wf.check._model import Finding
from wf.check._resolve import Project, method_of_instance, resolve_expr
from wf.check._toplevel import check_top_level_starts

# Methods that run when a class in the checked code is instantiated from workflow code.
_CONSTRUCTORS = ("__new__", "__init__", "__post_init__")


def analyze(project: Project) -> tuple[list[Finding], list[Finding]]:
    """Every finding in ``project``, before select/ignore filtering, and the notes on code
    nested too deeply to analyse."""
    declarations = find_declarations(project)
    sink = Sink()
    check_workflows(declarations, sink)
    check_steps(declarations, sink)
    check_awaits(project, declarations, sink)
    check_uncalled_awaits(project, declarations, sink)
    check_top_level_starts(project, declarations, sink)
    scopes = _workflow_code(project, declarations, sink)
    bodies = _workflow_bodies(scopes, declarations)
    for scope, context in scopes.items():
        with sink.guarded(scope):
            check_workflow_code(scope, sink, context, project, bodies)
    check_branches(scopes, project, declarations, sink)
    notes = sorted([*sink.notes(), *project.notes.values()], key=Finding.sort_key)
    return sink.findings(), notes


def _workflow_code(project: Project, declarations: Declarations, sink: Sink) -> dict[Scope, str]:
    """Scopes of workflow code, each with the message suffix that explains why it counts."""
    # scope -> (name of the first workflow found to reach it, reached through a call?)
    reached: dict[Scope, tuple[str, bool]] = {}
    queue: deque[Scope] = deque()
    for scope, declared in declarations.by_scope.items():
        if declared.kind == "workflow":
            reached[scope] = (declarations.workflow_name(scope), False)
            queue.append(scope)
    while queue:
        scope = queue.popleft()
        workflow, via_call = reached[scope]
        for child in scope.children:
            # Nested functions and lambdas run as part of the code that defines them; nested
            # classes only define methods, which count once something calls them.
            if child.kind != "class" and declarations.kind(child) is None and child not in reached:
                reached[child] = (workflow, via_call)
                queue.append(child)
        callees: list[Scope] = []
        with sink.guarded(scope):
            callees = _callees(scope, project)
        for callee in callees:
            if declarations.kind(callee) is None and callee not in reached:
                reached[callee] = (workflow, True)
                queue.append(callee)
    return {
        scope: f" (in `{scope.qualname}`, called from workflow `{workflow}`)" if via_call else ""
        for scope, (workflow, via_call) in reached.items()
    }


def _workflow_bodies(scopes: dict[Scope, str], declarations: Declarations) -> set[Scope]:
    """The workflows and the functions nested in their bodies: scopes every run makes afresh.

    A helper a workflow calls is not one: a factory may also be called at import time, and a
    closure it makes then outlives every run.
    """
    bodies: set[Scope] = set()
    for scope in scopes:
        current: Scope | None = scope
        while current is not None and current.kind != "module":
            if declarations.kind(current) == "workflow":
                bodies.add(scope)
                break
            current = current.parent
    return bodies


def _callees(scope: Scope, project: Project) -> list[Scope]:
    """Functions in the checked code that ``scope`` calls or passes along as callbacks."""
    found: list[Scope] = []
    module = scope.module
    for call in scope.calls:
        qualname = resolve_expr(call.func, scope)
        if qualname is not None and (qualname == "wf" or qualname.startswith("wf.")):
            # `wf.step(fn)`, `wf.rollback(fn, ...)`, `wf.start(child)`: what wf is handed is a
            # step or another workflow, not code that runs inline.
            continue
        if qualname is not None:
            target = project.lookup(qualname, module)
        else:
            target = method_of_instance(call.func, scope, project)
        if target is not None and target.kind == "class":
            found.extend(target.defs[m] for m in _CONSTRUCTORS if m in target.defs)
        elif target is not None:
            found.append(target)
        for arg in (*call.args, *(k.value for k in call.keywords)):
            if isinstance(arg, ast.Name | ast.Attribute):
                name = resolve_expr(arg, scope)
                callback = None if name is None else project.lookup(name, module)
                if callback is not None and callback.kind == "function":
                    found.append(callback)
    return found
