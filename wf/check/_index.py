"""One pass over a module's syntax tree that files away everything the rules look at.

The analyzer walks each tree exactly once, here. Every call, name load, loop and scope
statement is appended to the :class:`Scope` (module, class, function or lambda) it belongs to,
together with the names each scope binds. Later stages resolve names and apply rules by reading
those lists, so analysing a helper reached from ten workflows costs no extra tree walks.
"""

from __future__ import annotations

import ast
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Literal

from wf.check._model import Finding
from wf.check._rules import MUTATING_METHODS, WATCHED_ATTR_NAMES, WATCHED_ATTRS

ScopeKind = Literal["module", "class", "function", "lambda"]
FunctionNode = ast.FunctionDef | ast.AsyncFunctionDef
Comprehension = ast.ListComp | ast.SetComp | ast.GeneratorExp | ast.DictComp


@dataclass(eq=False)
class Scope:
    """A namespace of the module and what happens directly inside it (not in nested scopes)."""

    kind: ScopeKind
    node: ast.AST
    qualname: str
    parent: Scope | None
    module: ModuleIndex
    params: list[str] = field(default_factory=list)
    param_annotations: dict[str, ast.expr] = field(default_factory=dict)
    imports: dict[str, str] = field(default_factory=dict)
    defs: dict[str, Scope] = field(default_factory=dict)
    classes: dict[str, Scope] = field(default_factory=dict)
    # Other bindings: the assigned value for `name = value`, None when it can't be known
    # (tuple unpacking, loop targets, `with ... as name`, `except ... as name`).
    bindings: dict[str, list[ast.expr | None]] = field(default_factory=dict)
    annotations: dict[str, ast.expr] = field(default_factory=dict)
    globals: set[str] = field(default_factory=set)
    calls: list[ast.Call] = field(default_factory=list)
    loads: list[ast.Name] = field(default_factory=list)
    # `x.environ`, `x.argv`: attributes that may be a watched module attribute (`os.environ`).
    watched_attrs: list[ast.Attribute] = field(default_factory=list)
    # Stores into an object (`d[k] = v`, `o.a += 1`, `del d[k]`) and mutating method calls
    # (`xs.append(v)`), each with the name at the root of the object (`d`, `o`, `xs`).
    mutations: list[tuple[ast.Name, ast.Subscript | ast.Attribute | ast.Call]] = field(
        default_factory=list
    )
    tries: list[ast.Try | ast.TryStar] = field(default_factory=list)
    # `with` statements one of whose context managers is made by a call (`suppress(...)`).
    withs: list[ast.With] = field(default_factory=list)
    # Iterated expressions, with the comprehension doing the iterating (None for a `for` loop).
    iters: list[tuple[ast.expr, Comprehension | None]] = field(default_factory=list)
    scope_stmts: list[ast.Global | ast.Nonlocal] = field(default_factory=list)
    children: list[Scope] = field(default_factory=list)
    is_static: bool = False
    # Whether the scope's own code holds a `yield` (a function scope: it is a generator).
    yields: bool = False
    # `from x import *` sources, in import order (module scope only: Python allows no other).
    star_imports: list[str] = field(default_factory=list)
    # Where the definition sits among exclusive branches: ((id of if/try/match, arm), ...).
    branch: tuple[tuple[int, int], ...] = ()

    @property
    def function(self) -> FunctionNode | None:
        """The ``def`` node, for function scopes."""
        node = self.node
        return node if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef) else None

    @property
    def node_line(self) -> int:
        """Line of the ``def``/``class``/``lambda`` (0 for a module)."""
        return getattr(self.node, "lineno", 0)

    def binds(self, name: str) -> bool:
        """Whether ``name`` is a local name of this scope."""
        return (
            name in self.bindings
            or name in self.param_annotations
            or name in self.params
            or name in self.imports
            or name in self.defs
            or name in self.classes
        )

    def __repr__(self) -> str:
        return f"<Scope {self.kind} {self.module.name}:{self.qualname}>"


@dataclass(eq=False)
class ModuleIndex:
    """Everything the analyzer knows about one source file."""

    name: str
    path: str
    is_package: bool
    lines: list[str]
    scope: Scope = field(init=False)
    # Function and class scopes by qualname ("f", "C.m", "f.<locals>.g"); a redefinition
    # replaces the earlier one, as it does at run time.
    symbols: dict[str, Scope] = field(default_factory=dict)
    # Every function scope in source order, redefinitions included (for duplicate names).
    functions: list[Scope] = field(default_factory=list)
    # Calls whose first argument is a lambda or a name: candidates for `wf.step(fn)` and
    # `wf.workflow(fn)` used as plain functions rather than decorators.
    wrapper_calls: list[tuple[ast.Call, Scope]] = field(default_factory=list)
    lambda_scopes: dict[ast.Lambda, Scope] = field(default_factory=dict)
    # Local names bound to a watched attribute by `from os import environ`, so that plain name
    # loads need only be resolved when they could be one.
    watched_names: set[str] = field(default_factory=set)
    # Statements nested too deeply to analyse (Python imports them): said, never an error.
    notes: list[Finding] = field(default_factory=list)

    def column(self, line: int, col_offset: int) -> int:
        """A 1-based character column from ast's 0-based UTF-8 byte offset."""
        text = self.lines[line - 1] if 0 < line <= len(self.lines) else ""
        if text.isascii():
            return col_offset + 1
        return len(text.encode()[:col_offset].decode(errors="replace")) + 1


def index_module(
    tree: ast.Module, source: str, name: str, path: str, is_package: bool
) -> ModuleIndex:
    """Walk ``tree`` once and return its index."""
    module = ModuleIndex(name=name, path=path, is_package=is_package, lines=source.splitlines())
    module.scope = Scope("module", tree, "", None, module)
    _Indexer(module).body(tree.body, module.scope)
    return module


def _child_qualname(parent: Scope, name: str) -> str:
    if parent.kind == "module":
        return name
    if parent.kind == "class":
        return f"{parent.qualname}.{name}"
    return f"{parent.qualname}.<locals>.{name}"


class _Indexer:
    def __init__(self, module: ModuleIndex) -> None:
        self.module = module
        handlers: dict[type[ast.AST], Callable[[Any, Scope], None]] = {
            ast.FunctionDef: self.function,
            ast.AsyncFunctionDef: self.function,
            ast.ClassDef: self.class_def,
            ast.Lambda: self.lambda_,
            ast.Name: self.name,
            ast.Assign: self.assign,
            ast.AnnAssign: self.ann_assign,
            ast.AugAssign: self.aug_assign,
            ast.NamedExpr: self.named_expr,
            ast.Import: self.import_,
            ast.ImportFrom: self.import_from,
            ast.Global: self.global_,
            ast.Nonlocal: self.nonlocal_,
            ast.Call: self.call,
            ast.Attribute: self.attribute,
            ast.Subscript: self.subscript,
            ast.With: self.with_,
            ast.For: self.for_,
            ast.AsyncFor: self.for_,
            ast.ListComp: self.comprehension,
            ast.SetComp: self.comprehension,
            ast.GeneratorExp: self.comprehension,
            ast.DictComp: self.comprehension,
            ast.If: self.if_,
            ast.Yield: self.yield_,
            ast.YieldFrom: self.yield_,
            ast.BinOp: self.bin_op,
            ast.Try: self.try_,
            ast.TryStar: self.try_,
            ast.Match: self.match,
            ast.MatchAs: self.match_capture,
            ast.MatchStar: self.match_capture,
            ast.MatchMapping: self.match_capture,
        }
        self.handlers = handlers
        # `@wf.step(policy)` passes a name to a decorator factory; it does not wrap `policy`.
        self.in_decorator = False
        # The if/try/match arms the walk is inside, for telling apart alternative definitions.
        self.branch: tuple[tuple[int, int], ...] = ()

    def visit(self, node: ast.AST, scope: Scope) -> None:
        handler = self.handlers.get(type(node))
        if handler is not None:
            handler(node, scope)
        else:
            self.generic(node, scope)

    def generic(self, node: ast.AST, scope: Scope) -> None:
        for child in ast.iter_child_nodes(node):
            self.visit(child, scope)

    def body(self, stmts: list[ast.stmt], scope: Scope) -> None:
        for stmt in stmts:
            branch, in_decorator = self.branch, self.in_decorator
            try:
                self.visit(stmt, scope)
            except RecursionError:
                # Valid Python nested deeper than this walk goes (long chains are walked
                # without recursing): the innermost statement is said, the rest is indexed.
                self.branch, self.in_decorator = branch, in_decorator
                self.module.notes.append(too_deep(self.module, stmt))

    def bind_unknown(self, name: str, scope: Scope) -> None:
        scope.bindings.setdefault(name, []).append(None)

    # --- scopes -------------------------------------------------------------------------

    def arguments(self, args: ast.arguments, outer: Scope, inner: Scope) -> None:
        # Defaults and annotations are evaluated in the enclosing scope, at definition time.
        for default in (*args.defaults, *args.kw_defaults):
            if default is not None:
                self.visit(default, outer)
        every = [*args.posonlyargs, *args.args, *args.kwonlyargs]
        if args.vararg is not None:
            every.append(args.vararg)
        if args.kwarg is not None:
            every.append(args.kwarg)
        for arg in every:
            inner.params.append(arg.arg)
            if arg.annotation is not None:
                inner.param_annotations[arg.arg] = arg.annotation
                self.visit(arg.annotation, outer)

    def decorators(self, decorators: list[ast.expr], scope: Scope) -> None:
        self.in_decorator = True
        for decorator in decorators:
            self.visit(decorator, scope)
        self.in_decorator = False

    def function(self, node: FunctionNode, scope: Scope) -> None:
        self.decorators(node.decorator_list, scope)
        if node.returns is not None:
            self.visit(node.returns, scope)
        qualname = _child_qualname(scope, node.name)
        inner = Scope("function", node, qualname, scope, self.module)
        inner.branch = self.branch
        inner.is_static = any(
            isinstance(d, ast.Name) and d.id == "staticmethod" for d in node.decorator_list
        )
        self.arguments(node.args, scope, inner)
        scope.defs[node.name] = inner
        scope.children.append(inner)
        self.module.symbols[qualname] = inner
        self.module.functions.append(inner)
        self.body(node.body, inner)

    def class_def(self, node: ast.ClassDef, scope: Scope) -> None:
        self.decorators(node.decorator_list, scope)
        for expr in (*node.bases, *(k.value for k in node.keywords)):
            self.visit(expr, scope)
        qualname = _child_qualname(scope, node.name)
        inner = Scope("class", node, qualname, scope, self.module)
        scope.classes[node.name] = inner
        scope.children.append(inner)
        self.module.symbols[qualname] = inner
        self.body(node.body, inner)

    def lambda_(self, node: ast.Lambda, scope: Scope) -> None:
        inner = Scope("lambda", node, _child_qualname(scope, "<lambda>"), scope, self.module)
        self.arguments(node.args, scope, inner)
        scope.children.append(inner)
        self.module.lambda_scopes[node] = inner
        self.visit(node.body, inner)

    # --- bindings -------------------------------------------------------------------------

    def name(self, node: ast.Name, scope: Scope) -> None:
        if isinstance(node.ctx, ast.Load):
            scope.loads.append(node)
        elif isinstance(node.ctx, ast.Store):
            self.bind_unknown(node.id, scope)

    def assign(self, node: ast.Assign, scope: Scope) -> None:
        self.visit(node.value, scope)
        for target in node.targets:
            if isinstance(target, ast.Name):
                scope.bindings.setdefault(target.id, []).append(node.value)
            else:
                self.visit(target, scope)

    def ann_assign(self, node: ast.AnnAssign, scope: Scope) -> None:
        self.visit(node.annotation, scope)
        if node.value is not None:
            self.visit(node.value, scope)
        target = node.target
        if isinstance(target, ast.Name):
            scope.annotations[target.id] = node.annotation
            if node.value is not None:
                scope.bindings.setdefault(target.id, []).append(node.value)
        else:
            self.visit(target, scope)

    def aug_assign(self, node: ast.AugAssign, scope: Scope) -> None:
        # `s |= other` keeps whatever type `s` already had: mark it local without a value.
        if isinstance(node.target, ast.Name):
            scope.bindings.setdefault(node.target.id, [])
        else:
            self.visit(node.target, scope)
        self.visit(node.value, scope)

    def named_expr(self, node: ast.NamedExpr, scope: Scope) -> None:
        self.visit(node.value, scope)
        scope.bindings.setdefault(node.target.id, []).append(node.value)

    # --- alternative arms ----------------------------------------------------------------

    def arm(self, node: ast.AST, index: int, stmts: list[ast.stmt], scope: Scope) -> None:
        outer = self.branch
        self.branch = (*outer, (id(node), index))
        self.body(stmts, scope)
        self.branch = outer

    def if_(self, node: ast.If, scope: Scope) -> None:
        # An `elif` is an `if` alone in the `else` arm: walked in a loop, not recursively, so
        # that hundreds of arms are indexed as Python runs them (each inside the previous one's
        # `else` arm, as the tree has it).
        outer = self.branch
        while True:
            self.visit(node.test, scope)
            self.arm(node, 0, node.body, scope)
            self.branch = (*self.branch, (id(node), 1))
            orelse = node.orelse
            if len(orelse) != 1 or not isinstance(orelse[0], ast.If):
                self.body(orelse, scope)
                break
            node = orelse[0]
        self.branch = outer

    def yield_(self, node: ast.Yield | ast.YieldFrom, scope: Scope) -> None:
        scope.yields = True
        self.generic(node, scope)

    def bin_op(self, node: ast.BinOp, scope: Scope) -> None:
        # `a + b + c + ...` nests to the left: walked in a loop, in source order.
        rights = []
        left: ast.expr = node
        while isinstance(left, ast.BinOp):
            rights.append(left.right)
            left = left.left
        self.visit(left, scope)
        for right in reversed(rights):
            self.visit(right, scope)

    def try_(self, node: ast.Try | ast.TryStar, scope: Scope) -> None:
        scope.tries.append(node)
        # `try: <def> except ImportError: <other def>` defines one or the other.
        self.arm(node, 0, [*node.body, *node.orelse], scope)
        for index, handler in enumerate(node.handlers, start=1):
            if handler.type is not None:
                self.visit(handler.type, scope)
            if handler.name:
                self.bind_unknown(handler.name, scope)
            self.arm(node, index, handler.body, scope)
        self.body(node.finalbody, scope)

    def match(self, node: ast.Match, scope: Scope) -> None:
        self.visit(node.subject, scope)
        for index, case in enumerate(node.cases):
            self.visit(case.pattern, scope)
            if case.guard is not None:
                self.visit(case.guard, scope)
            self.arm(node, index, case.body, scope)

    def match_capture(
        self, node: ast.MatchAs | ast.MatchStar | ast.MatchMapping, scope: Scope
    ) -> None:
        name = node.rest if isinstance(node, ast.MatchMapping) else node.name
        if name:
            self.bind_unknown(name, scope)
        self.generic(node, scope)

    def import_(self, node: ast.Import, scope: Scope) -> None:
        for alias in node.names:
            if alias.asname:
                self.bind_import(alias.asname, alias.name, scope)
            else:
                # `import a.b.c` binds `a` to the top-level package.
                top = alias.name.partition(".")[0]
                self.bind_import(top, top, scope)

    def import_from(self, node: ast.ImportFrom, scope: Scope) -> None:
        base = self.absolute_module(node.module, node.level)
        if base is None:
            return
        for alias in node.names:
            if alias.name == "*":
                scope.star_imports.append(base)
            else:
                target = f"{base}.{alias.name}" if base else alias.name
                self.bind_import(alias.asname or alias.name, target, scope)

    def absolute_module(self, module: str | None, level: int) -> str | None:
        if level == 0:
            return module
        package = self.module.name.split(".")
        if not self.module.is_package:
            package = package[:-1]
        if level - 1 > len(package):
            return None
        base = package[: len(package) - (level - 1)]
        if module:
            base.append(module)
        return ".".join(base)

    def bind_import(self, local: str, target: str, scope: Scope) -> None:
        scope.imports[local] = target
        if target in WATCHED_ATTRS:
            self.module.watched_names.add(local)

    def global_(self, node: ast.Global, scope: Scope) -> None:
        scope.scope_stmts.append(node)
        scope.globals.update(node.names)

    def nonlocal_(self, node: ast.Nonlocal, scope: Scope) -> None:
        scope.scope_stmts.append(node)

    # --- uses ------------------------------------------------------------------------------

    def call(self, node: ast.Call, scope: Scope) -> None:
        scope.calls.append(node)
        func = node.func
        if isinstance(func, ast.Attribute) and func.attr in MUTATING_METHODS:
            self.mutation(node, func.value, scope)
        if (
            not self.in_decorator
            and node.args
            and isinstance(node.args[0], ast.Lambda | ast.Name | ast.Attribute)
        ):
            self.module.wrapper_calls.append((node, scope))
        self.generic(node, scope)

    def attribute(self, node: ast.Attribute, scope: Scope) -> None:
        if node.attr in WATCHED_ATTR_NAMES:
            scope.watched_attrs.append(node)
        if not isinstance(node.ctx, ast.Load):
            self.mutation(node, node.value, scope)
        self.visit(node.value, scope)

    def subscript(self, node: ast.Subscript, scope: Scope) -> None:
        if not isinstance(node.ctx, ast.Load):
            self.mutation(node, node.value, scope)
        self.generic(node, scope)

    def mutation(
        self, node: ast.Subscript | ast.Attribute | ast.Call, obj: ast.expr, scope: Scope
    ) -> None:
        # `a.b[c].d = v` changes the object `a` names.
        while isinstance(obj, ast.Attribute | ast.Subscript):
            obj = obj.value
        if isinstance(obj, ast.Name):
            scope.mutations.append((obj, node))

    def with_(self, node: ast.With, scope: Scope) -> None:
        if any(isinstance(item.context_expr, ast.Call) for item in node.items):
            scope.withs.append(node)
        self.generic(node, scope)

    def for_(self, node: ast.For | ast.AsyncFor, scope: Scope) -> None:
        scope.iters.append((node.iter, None))
        self.generic(node, scope)

    def comprehension(self, node: Comprehension, scope: Scope) -> None:
        # Comprehensions are scopes of their own in Python; filing their targets under the
        # enclosing function only makes those names look local there, which errs on the side of
        # not resolving them (no false positives).
        for generator in node.generators:
            scope.iters.append((generator.iter, node))
        self.generic(node, scope)


def too_deep(module: ModuleIndex, node: ast.stmt | ast.expr) -> Finding:
    """The note for a statement nested too deeply to analyse."""
    col = module.column(node.lineno, node.col_offset)
    why = "not analysed: nested too deeply for wf check (Python runs it); the rest is checked"
    return Finding(module.path, node.lineno, col, "note", why, "")
