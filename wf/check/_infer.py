"""Just enough type inference to tell sets, paths and event loops from everything else.

The rules only ever ask "is this surely a set?" or "is this surely a ``pathlib.Path``?", and a
wrong "yes" is a false positive, so every answer defaults to no: a name counts only when every
assignment to it in its scope (or its annotation) says so.
"""

from __future__ import annotations

import ast
from collections.abc import Callable

from wf.check._index import Scope
from wf.check._resolve import binding_scope, resolve_expr
from wf.check._rules import GENERATOR_CLASSES, LOOP_FACTORIES, PATH_CLASSES

_MAX_DEPTH = 8
_SET_TYPES = frozenset({"set", "frozenset", "Set", "FrozenSet", "AbstractSet", "MutableSet"})
_SET_BUILTINS = frozenset({"builtins.set", "builtins.frozenset"})
_SET_METHODS = frozenset({"union", "intersection", "difference", "symmetric_difference", "copy"})
_PATH_FACTORIES = PATH_CLASSES | {f"{cls}.{m}" for cls in PATH_CLASSES for m in ("cwd", "home")}
_PATH_METHODS = frozenset(
    {"joinpath", "with_name", "with_stem", "with_suffix", "absolute", "expanduser", "resolve"}
)

_Predicate = Callable[[ast.expr, Scope, int], bool]


def is_set(expr: ast.expr, scope: Scope, depth: int = 0) -> bool:
    """Whether ``expr`` surely evaluates to a set or frozenset."""
    if depth > _MAX_DEPTH:
        return False
    if isinstance(expr, ast.Set | ast.SetComp):
        return True
    if isinstance(expr, ast.Call):
        func = expr.func
        if isinstance(func, ast.Attribute) and func.attr in _SET_METHODS:
            return is_set(func.value, scope, depth + 1)
        return resolve_expr(func, scope) in _SET_BUILTINS
    if isinstance(expr, ast.BinOp) and isinstance(
        expr.op, ast.BitOr | ast.BitAnd | ast.BitXor | ast.Sub
    ):
        if is_set(expr.left, scope, depth + 1):
            return True
        # `a | s` is a set when either side is; `a - s` only when the left side is.
        return not isinstance(expr.op, ast.Sub) and is_set(expr.right, scope, depth + 1)
    if isinstance(expr, ast.Name):
        return _name_is(expr.id, scope, depth, is_set, _is_set_annotation)
    return False


def is_hash_ordered_set(expr: ast.expr, scope: Scope) -> bool:
    """Whether ``expr`` is surely a set whose iteration order can differ between processes:
    any set but a literal of numbers (``{3, 1, 2}``), whose hashes are the same everywhere."""
    return is_set(expr, scope) and not _numbers_only(expr, scope, 0)


def _numbers_only(expr: ast.expr, scope: Scope, depth: int) -> bool:
    if isinstance(expr, ast.Set):
        return all(
            isinstance(e, ast.Constant) and type(e.value) in (int, float, bool) for e in expr.elts
        )
    if isinstance(expr, ast.Name) and depth <= _MAX_DEPTH:
        return _name_is(expr.id, scope, depth, _numbers_only, lambda _a, _s: False)
    return False


_INT_TYPES = frozenset({"int", "bool", "builtins.int", "builtins.bool"})
_INT_CALLS = frozenset({"builtins.int", "builtins.bool", "builtins.len"})
_TUPLE_TYPES = frozenset({"tuple", "Tuple", "builtins.tuple", "typing.Tuple"})
_ARITHMETIC = (
    ast.Add, ast.Sub, ast.Mult, ast.Div, ast.FloorDiv, ast.Mod, ast.Pow,
    ast.LShift, ast.RShift, ast.BitOr, ast.BitAnd, ast.BitXor,
)  # fmt: skip


def hashes_alike(
    expr: ast.expr, scope: Scope, depth: int = 0, assumed: frozenset[tuple[int, str]] = frozenset()
) -> bool:
    """Whether ``hash(expr)`` is surely the same in every process: an int or bool (a literal,
    a name every binding of which is one, and its annotation too, ``len()``, ``int()``,
    ``bool()``, arithmetic on them) or a tuple of such. Strings and bytes hash differently
    per process, plain objects (``None`` before Python 3.12) by their address, and a float
    may be NaN, which hashes by identity (Python 3.10 on): anything else is no.

    ``assumed``: the names (by their scope) being looked at further up, taken as int-like in
    their own bindings (``total = total + n``): a name all of whose bindings are int-like
    when it is, is."""
    if depth > _MAX_DEPTH:
        return False
    if isinstance(expr, ast.Constant):
        return type(expr.value) in (int, bool)
    if isinstance(expr, ast.Tuple):
        return all(hashes_alike(item, scope, depth + 1, assumed) for item in expr.elts)
    if isinstance(expr, ast.UnaryOp):
        # `not x` is a bool whatever x is.
        return isinstance(expr.op, ast.Not) or _int_like(expr.operand, scope, depth + 1, assumed)
    if isinstance(expr, ast.BinOp) and isinstance(expr.op, _ARITHMETIC):
        if isinstance(expr.op, ast.Mult) and isinstance(expr.left, ast.Tuple):
            return hashes_alike(expr.left, scope, depth + 1, assumed) and _int_like(
                expr.right, scope, depth + 1, assumed
            )
        # Both sides ints (`s + s` of strings is a string, `s % n` formats one); a quotient
        # of ints is a float, never NaN.
        return _int_like(expr.left, scope, depth + 1, assumed) and _int_like(
            expr.right, scope, depth + 1, assumed
        )
    if isinstance(expr, ast.Call):
        return resolve_expr(expr.func, scope) in _INT_CALLS
    if isinstance(expr, ast.Name):
        return _name_hashes_alike(expr.id, scope, depth, assumed)
    return False


def _int_like(
    expr: ast.expr, scope: Scope, depth: int, assumed: frozenset[tuple[int, str]]
) -> bool:
    return not isinstance(expr, ast.Tuple) and hashes_alike(expr, scope, depth, assumed)


def _name_hashes_alike(
    name: str, scope: Scope, depth: int, assumed: frozenset[tuple[int, str]]
) -> bool:
    """A name is surely int-like only if its annotation (if any) says so and every binding
    of it says so: in its scope and in every scope that rebinds it (``global``,
    ``nonlocal``). An annotation alone is believed only for a parameter (its caller's
    value: nothing in the code says otherwise)."""
    owner = binding_scope(name, scope)
    if owner is None or name in owner.imports or name in owner.defs or name in owner.classes:
        return False
    key = (id(owner), name)
    if key in assumed:
        return True
    annotation = owner.annotations.get(name) or owner.param_annotations.get(name)
    if annotation is not None and not _hashes_alike_annotation(annotation, owner):
        return False
    if name in owner.params and name not in owner.param_annotations:
        return False
    bindings = [(value, owner) for value in owner.bindings.get(name, ())]
    bindings += _rebindings(name, owner)
    if not bindings:
        return name in owner.param_annotations
    inner = assumed | {key}
    return all(
        value is not None and hashes_alike(value, where, depth + 1, inner)
        for value, where in bindings
    )


def _rebindings(name: str, owner: Scope) -> list[tuple[ast.expr | None, Scope]]:
    """The bindings of ``name`` made in the scopes below ``owner`` that declare it
    ``global`` (``owner`` the module) or ``nonlocal`` (``owner`` a function)."""
    found: list[tuple[ast.expr | None, Scope]] = []
    stack = list(owner.children)
    while stack:
        scope = stack.pop()
        stack.extend(scope.children)
        if owner.kind == "module":
            rebinds = name in scope.globals
        else:
            rebinds = any(
                isinstance(stmt, ast.Nonlocal) and name in stmt.names for stmt in scope.scope_stmts
            )
        if rebinds:
            found += [(value, scope) for value in scope.bindings.get(name, ())]
    return found


def _hashes_alike_annotation(annotation: ast.expr, scope: Scope) -> bool:
    """``int``, ``bool``, or a ``tuple[...]`` of them (``tuple[int, ...]`` too)."""
    if isinstance(annotation, ast.Subscript):
        if resolve_expr(annotation.value, scope) not in _TUPLE_TYPES and not (
            isinstance(annotation.value, ast.Name) and annotation.value.id in _TUPLE_TYPES
        ):
            return False
        items = (
            annotation.slice.elts if isinstance(annotation.slice, ast.Tuple) else [annotation.slice]
        )
        return all(
            (isinstance(item, ast.Constant) and item.value is Ellipsis)
            or _hashes_alike_annotation(item, scope)
            for item in items
        )
    if isinstance(annotation, ast.Name):
        return annotation.id in _INT_TYPES
    return resolve_expr(annotation, scope) in _INT_TYPES


def is_loop(expr: ast.expr, scope: Scope, depth: int = 0) -> bool:
    """Whether ``expr`` is surely an asyncio event loop (``asyncio.get_running_loop()``)."""
    if isinstance(expr, ast.Call):
        return resolve_expr(expr.func, scope) in LOOP_FACTORIES
    if isinstance(expr, ast.Name) and depth <= _MAX_DEPTH:
        return _name_is(expr.id, scope, depth, is_loop, lambda _a, _s: False)
    return False


def is_module_generator(name: ast.Name, scope: Scope) -> bool:
    """Whether ``name`` is a module-level ``random.Random(...)`` (seeded or not)."""
    owner = binding_scope(name.id, scope)
    if owner is None or owner.kind != "module":
        return False
    values = owner.bindings.get(name.id)
    return bool(values) and all(
        isinstance(v, ast.Call) and resolve_expr(v.func, owner) in GENERATOR_CLASSES
        for v in values or ()
    )


def is_path(expr: ast.expr, scope: Scope, depth: int = 0) -> bool:
    """Whether ``expr`` surely evaluates to a ``pathlib.Path`` (not a pure path)."""
    if depth > _MAX_DEPTH:
        return False
    if isinstance(expr, ast.Call):
        func = expr.func
        if isinstance(func, ast.Attribute) and func.attr in _PATH_METHODS:
            return is_path(func.value, scope, depth + 1)
        return resolve_expr(func, scope) in _PATH_FACTORIES
    if isinstance(expr, ast.BinOp) and isinstance(expr.op, ast.Div):
        return is_path(expr.left, scope, depth + 1)
    if isinstance(expr, ast.Attribute) and expr.attr == "parent":
        return is_path(expr.value, scope, depth + 1)
    if isinstance(expr, ast.Name):
        return _name_is(expr.id, scope, depth, is_path, _is_path_annotation)
    return False


def _name_is(
    name: str,
    scope: Scope,
    depth: int,
    predicate: _Predicate,
    annotation_says: Callable[[ast.expr, Scope], bool],
) -> bool:
    owner = binding_scope(name, scope)
    if owner is None:
        return False
    annotation = owner.annotations.get(name) or owner.param_annotations.get(name)
    if annotation is not None:
        return annotation_says(annotation, owner)
    values = owner.bindings.get(name)
    if not values or name in owner.params or any(value is None for value in values):
        return False
    return all(predicate(value, owner, depth + 1) for value in values if value is not None)


def _is_set_annotation(annotation: ast.expr, scope: Scope) -> bool:
    if isinstance(annotation, ast.Subscript):
        annotation = annotation.value
    if isinstance(annotation, ast.Name):
        return annotation.id in _SET_TYPES
    if isinstance(annotation, ast.Attribute):
        return annotation.attr in _SET_TYPES
    if isinstance(annotation, ast.Constant) and isinstance(annotation.value, str):
        return annotation.value.partition("[")[0].strip() in _SET_TYPES
    return False


def _is_path_annotation(annotation: ast.expr, scope: Scope) -> bool:
    return resolve_expr(annotation, scope) in PATH_CLASSES
