"""Which functions are workflows and which are steps, and under what names.

A function is declared by a decorator (``@wf.workflow``, ``@wf.step(max_retries=3)``, an alias
such as ``@w.workflow`` after ``import wf as w``) or by wrapping it in a call at run time
(``charge = wf.step(charge_impl)``). A lambda can only be declared by wrapping.
"""

from __future__ import annotations

import ast
from dataclasses import dataclass
from typing import Literal

from wf.check._index import ModuleIndex, Scope
from wf.check._resolve import Project, is_wf_api, resolve_expr

Kind = Literal["workflow", "step"]


@dataclass(frozen=True)
class Declared:
    """How a function was declared: its kind and the explicit ``name=`` if a literal."""

    kind: Kind
    name: str | None = None


@dataclass
class Declarations:
    """The declared functions of a project, and the lambdas wrapped as steps."""

    by_scope: dict[Scope, Declared]
    lambda_steps: list[tuple[ModuleIndex, ast.Lambda]]

    def kind(self, scope: Scope) -> Kind | None:
        """``workflow``, ``step`` or None for plain code."""
        declared = self.by_scope.get(scope)
        return None if declared is None else declared.kind

    def workflow_name(self, scope: Scope) -> str:
        """The name a workflow is registered under: explicit, else ``module:qualname``."""
        declared = self.by_scope.get(scope)
        if declared is not None and declared.name is not None:
            return declared.name
        return f"{scope.module.name}:{scope.qualname}"


def find_declarations(project: Project) -> Declarations:
    """Classify every function of every module in ``project``."""
    result = Declarations({}, [])
    for module in project.modules:
        for scope in module.functions:
            fn = scope.function
            if fn is None or scope.parent is None:
                continue
            for decorator in fn.decorator_list:
                declared = _declaration(decorator, scope.parent)
                if declared is not None:
                    result.by_scope[scope] = declared
                    break
    for module in project.modules:
        for call, scope in module.wrapper_calls:
            declared = _declaration(call.func, scope)
            if declared is not None:
                if declared.name is None and not isinstance(call.func, ast.Call):
                    # ``wf.step(fn, name="...")``: the name is beside the function.
                    declared = Declared(declared.kind, _explicit_name(call))
                named = _has_name(call) or (
                    isinstance(call.func, ast.Call) and _has_name(call.func)
                )
                _declare_wrapped(call.args[0], scope, declared, project, result, named=named)
    return result


def _declaration(expr: ast.expr, scope: Scope) -> Declared | None:
    """What ``@expr`` (or ``expr(fn)``) declares, if it is wf.workflow / wf.step."""
    target = expr.func if isinstance(expr, ast.Call) else expr
    qualname = resolve_expr(target, scope)
    for kind in ("workflow", "step"):
        if is_wf_api(qualname, kind):
            name = _explicit_name(expr) if isinstance(expr, ast.Call) else None
            return Declared("workflow" if kind == "workflow" else "step", name)
    return None


def _explicit_name(call: ast.Call) -> str | None:
    for keyword in call.keywords:
        if keyword.arg == "name" and isinstance(keyword.value, ast.Constant):
            value = keyword.value.value
            return value if isinstance(value, str) else None
    return None


def _has_name(call: ast.Call) -> bool:
    """Whether ``call`` passes ``name=`` (a literal or not)."""
    return any(keyword.arg == "name" for keyword in call.keywords)


def _declare_wrapped(
    arg: ast.expr,
    scope: Scope,
    declared: Declared,
    project: Project,
    result: Declarations,
    *,
    named: bool = False,
) -> None:
    module = scope.module
    if isinstance(arg, ast.Lambda):
        if declared.kind == "step" and not named:
            result.lambda_steps.append((module, arg))
        if declared.kind == "step":
            result.by_scope[module.lambda_scopes[arg]] = declared
        return
    qualname = resolve_expr(arg, scope)
    target = None if qualname is None else project.lookup(qualname, module)
    if target is not None and target.function is not None:
        result.by_scope.setdefault(target, declared)
