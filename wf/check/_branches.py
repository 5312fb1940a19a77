"""WF305: a concurrent branch that runs several durable operations one after the other.

``asyncio.gather(helper(0), helper(1))`` (also ``*coros`` of a local list of such calls, and
``obj.helper()`` after ``obj = Class()``; or ``TaskGroup.create_task``, ``asyncio.create_task``,
``asyncio.ensure_future``, ``wf.map``) where ``helper`` is a plain coroutine function of the
checked code that performs more than one durable operation (or one in a loop): live, the
branch's later operations take their ids as its earlier ones end, which a replay cannot
reproduce, so the run fails with ``wf.NondeterminismError`` once it has to be replayed.

Durable operations are counted along each path through the helper (the arms of an ``if`` are
alternatives, a ``return`` ends the path, anything in a loop or comprehension counts as many):
step calls, ``wf.start``, ``wf.sleep`` / ``sleep_until``, ``wf.select`` / ``first`` /
``timeout``, ``wf.now`` / ``random`` / ``uuid4``, ``wf.create_hook`` and a hook's ``next()``,
``wf.rollback``, ``wf.progress``, and what the helpers it calls perform. ``wf.patched`` and a
child handle's ``result()`` are not counted. A gather or ``wf.map`` inside the helper counts
once: its calls all take their ids when it is made.
"""

from __future__ import annotations

import ast
from dataclasses import dataclass

from wf.check._checks import Sink, spell
from wf.check._declared import Declarations
from wf.check._index import Scope
from wf.check._resolve import Project, binding_scope, method_of_instance, resolve_expr

_OPERATIONS = frozenset(
    "wf." + name
    for name in [
        "sleep",
        "sleep_until",
        "start",
        "select",
        "first",
        "timeout",
        "deadline",
        "now",
        "random",
        "uuid4",
        "create_hook",
        "create_webhook",
        "rollback",
        "progress",
        "map",
    ]
)
_GATHERS = frozenset({"asyncio.gather", "wf.map", "wf.select", "wf.first"})
_SPAWNS = frozenset({"asyncio.create_task", "asyncio.ensure_future"})


@dataclass(frozen=True)
class Flow:
    """What a stretch of code does, as far as op ids go.

    ``starts``: it starts a durable operation (which takes the next id when it is made);
    ``waits``: it awaits one (or a child's result): other branches run meanwhile, for as long
    as the operation takes; ``late``: it starts an operation after such a wait, so that
    operation's id depends on timing when the code runs as a concurrent branch.
    Or-ing two flows is exact for ``late`` of what follows, so alternatives merge by or.
    """

    starts: bool = False
    waits: bool = False
    late: bool = False

    def then(self, after: Flow) -> Flow:
        """This, then ``after``."""
        return Flow(
            self.starts or after.starts,
            self.waits or after.waits,
            self.late or after.late or (self.waits and after.starts),
        )

    def either(self, other: Flow) -> Flow:
        """This or ``other``: one of two paths."""
        return Flow(self.starts or other.starts, self.waits or other.waits, self.late or other.late)

    def repeated(self) -> Flow:
        """This, any number of times: a wait in one pass precedes the next pass's starts."""
        return self.then(self)


NONE = Flow()
START = Flow(starts=True)
Paths = tuple[Flow | None, Flow | None]  # (paths that reach the end, paths that leave early)


def _seq(flows: list[Flow]) -> Flow:
    result = NONE
    for flow in flows:
        result = result.then(flow)
    return result


def _any(flows: list[Flow | None]) -> Flow | None:
    found = [f for f in flows if f is not None]
    if not found:
        return None
    result = found[0]
    for flow in found[1:]:
        result = result.either(flow)
    return result


class _Flows:
    """The :class:`Flow` of helpers of the checked code, memoised per scope."""

    def __init__(self, project: Project, declarations: Declarations) -> None:
        self.project = project
        self.declarations = declarations
        self.memo: dict[Scope, Flow] = {}

    def function(self, scope: Scope) -> Flow:
        if scope in self.memo:
            return self.memo[scope]
        self.memo[scope] = NONE  # a recursive call adds nothing while it is being read
        fn = scope.function
        flow = NONE
        if fn is not None:
            cont, left = self.stmts(fn.body, scope)
            flow = _any([cont, left]) or NONE
        self.memo[scope] = flow
        return flow

    def call_target(self, call: ast.Call, scope: Scope) -> Scope | None:
        """The plain function or workflow of the checked code ``call`` runs inline, if any."""
        qualname = resolve_expr(call.func, scope)
        if qualname is not None:
            target = self.project.lookup(qualname, scope.module)
        else:  # `obj.method()` after `obj = Class(...)`, or `Class().method()`
            target = method_of_instance(call.func, scope, self.project)
        if target is None or target.function is None:
            return None
        return None if self.declarations.kind(target) == "step" else target

    # --- statements -----------------------------------------------------------------------

    def stmts(self, body: list[ast.stmt], scope: Scope) -> Paths:
        done = NONE
        left: Flow | None = None
        for stmt in body:
            cont, exit_ = self.stmt(stmt, scope)
            if exit_ is not None:
                left = _any([left, done.then(exit_)])
            if cont is None:
                return None, left
            done = done.then(cont)
        return done, left

    def stmt(self, stmt: ast.stmt, scope: Scope) -> Paths:
        if isinstance(stmt, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
            return NONE, None
        if isinstance(stmt, ast.Return | ast.Raise):
            return None, self.exprs(_children_exprs(stmt), scope)
        if isinstance(stmt, ast.If):
            # An `elif` chain, in a loop (hundreds of arms would overflow a recursion).
            chain = [stmt]
            while len(chain[-1].orelse) == 1 and isinstance(chain[-1].orelse[0], ast.If):
                chain.append(chain[-1].orelse[0])
            tested = [(self.expr(n.test, scope), self.stmts(n.body, scope)) for n in chain]
            paths = self.stmts(chain[-1].orelse, scope)
            for test, taken in reversed(tested):
                paths = _after(test, [taken, paths])
            return paths
        if isinstance(stmt, ast.For | ast.AsyncFor | ast.While):
            head = self.expr(stmt.test if isinstance(stmt, ast.While) else stmt.iter, scope)
            body = _any(list(self.stmts(stmt.body, scope))) or NONE
            if isinstance(stmt, ast.AsyncFor):
                # Each pass awaits the iterator: a hook's next payload, in particular.
                body = Flow(starts=self.is_hook(stmt.iter, scope), waits=True).then(body)
            if isinstance(stmt, ast.While):
                body = head.then(body)
            loop = head.then(body.repeated())
            return loop.then(_any(list(self.stmts(stmt.orelse, scope))) or NONE), None
        if isinstance(stmt, ast.Try | ast.TryStar):
            # A handler may run after any part of the body did.
            cont, left = self.stmts([*stmt.body, *stmt.orelse], scope)
            before = _any([cont, left]) or NONE
            arms: list[Paths] = [(cont, left)]
            for handler in stmt.handlers:
                c, e = self.stmts(handler.body, scope)
                arms.append(
                    (None if c is None else before.then(c), None if e is None else before.then(e))
                )
            final = _any(list(self.stmts(stmt.finalbody, scope))) or NONE
            conts = _any([c for c, _ in arms])
            lefts = _any([e for _, e in arms])
            return (
                None if conts is None else conts.then(final),
                None if lefts is None else lefts.then(final),
            )
        if isinstance(stmt, ast.Match):
            subject = self.expr(stmt.subject, scope)
            return _after(subject, [*(self.stmts(c.body, scope) for c in stmt.cases), (NONE, None)])
        if isinstance(stmt, ast.With | ast.AsyncWith):
            items = self.exprs([item.context_expr for item in stmt.items], scope)
            cont, left = self.stmts(stmt.body, scope)
            return (
                None if cont is None else items.then(cont),
                None if left is None else items.then(left),
            )
        return self.exprs(_children_exprs(stmt), scope), None

    # --- expressions ----------------------------------------------------------------------

    def exprs(self, exprs: list[ast.expr], scope: Scope) -> Flow:
        return _seq([self.expr(e, scope) for e in exprs])

    def expr(self, expr: ast.expr, scope: Scope) -> Flow:
        if isinstance(expr, ast.Lambda):
            return NONE
        if isinstance(expr, ast.Await):
            inner = self.expr(expr.value, scope)
            durable = (
                inner.starts
                or inner.waits
                or _awaits_durably(expr.value)
                or self.gathers_made(expr.value, scope)
            )
            return inner.then(Flow(waits=True)) if durable else inner
        if isinstance(expr, ast.ListComp | ast.SetComp | ast.GeneratorExp | ast.DictComp):
            first = self.expr(expr.generators[0].iter, scope)
            return first.then(self.exprs(_comprehension_parts(expr), scope).repeated())
        if isinstance(expr, ast.IfExp):
            test = self.expr(expr.test, scope)
            return test.then(self.expr(expr.body, scope).either(self.expr(expr.orelse, scope)))
        if isinstance(expr, ast.Call):
            return self.call(expr, scope)
        if isinstance(expr, ast.BinOp):
            # `a + b + c + ...` nests to the left: its operands in order, without recursing.
            operands = []
            while isinstance(expr, ast.BinOp):
                operands.append(expr.right)
                expr = expr.left
            operands.append(expr)
            return self.exprs(operands[::-1], scope)
        return self.exprs(_children_exprs(expr), scope)

    def call(self, call: ast.Call, scope: Scope) -> Flow:
        args = [*call.args, *(k.value for k in call.keywords)]
        qualname = resolve_expr(call.func, scope)
        if qualname in _GATHERS:
            # Its branches start at once, each taking its ids as it is made; a branch that
            # starts late is flagged where it is gathered.
            starts = any(self.branch(a, scope).starts for a in args)
            return Flow(starts=starts or qualname != "asyncio.gather")
        before = NONE if isinstance(call.func, ast.Name) else self.expr(call.func, scope)
        before = before.then(self.exprs(args, scope))
        if qualname in _OPERATIONS:
            return before.then(START)
        if isinstance(call.func, ast.Attribute) and call.func.attr == "next" and not args:
            return before.then(START)  # a hook's next()
        target = self.call_target(call, scope)
        if target is not None:
            return before.then(self.function(target))
        found = None if qualname is None else self.project.lookup(qualname, scope.module)
        if found is not None and self.declarations.kind(found) == "step":
            return before.then(START)
        return before

    def branch(self, arg: ast.expr, scope: Scope) -> Flow:
        """The flow of one argument of a gather (a starred generator: of one element)."""
        if isinstance(arg, ast.Starred):
            value = arg.value
            if isinstance(value, ast.ListComp | ast.GeneratorExp | ast.SetComp):
                return self.expr(value.elt, scope)
            return self.expr(value, scope)
        return self.expr(arg, scope)

    def gathers_made(self, value: ast.expr, scope: Scope) -> bool:
        """``await asyncio.gather(*calls)`` over operations made before (``calls = [...]``)."""
        if not isinstance(value, ast.Call) or resolve_expr(value.func, scope) not in _GATHERS:
            return False
        return any(self.made_durably(a, scope) for a in value.args)

    def made_durably(self, arg: ast.expr, scope: Scope) -> bool:
        """Whether ``arg`` (``xs`` or ``*xs``) of a gather names operations made before: the
        calls the name was bound to (or the list collected) start one; a name whose values are
        not known here is taken to (a task handed in)."""
        starred = _starred_name(arg)
        if starred is not None:
            made = _collected(starred, scope)
        elif isinstance(arg, ast.Name):
            owner = binding_scope(arg.id, scope)
            made = []
            if owner is not None and arg.id not in owner.params:
                made = [v for v in owner.bindings.get(arg.id, []) if v is not None]
        else:
            return False
        if not made:
            return True
        return any(self.expr(e, scope).starts or self.expr(e, scope).waits for e in made)

    def is_hook(self, expr: ast.expr, scope: Scope) -> bool:
        """``async for x in hook`` over ``hook = wf.create_hook(...)`` (or the call itself)."""
        values: list[ast.expr | None] = [expr]
        if isinstance(expr, ast.Name):
            values = list(scope.bindings.get(expr.id, []))
        return any(
            isinstance(v, ast.Call) and resolve_expr(v.func, scope) == "wf.create_hook"
            for v in values
        )


def _starred_name(arg: ast.expr) -> ast.Name | None:
    """``xs`` of ``*xs``."""
    if isinstance(arg, ast.Starred) and isinstance(arg.value, ast.Name):
        return arg.value
    return None


def _elements(value: ast.expr | None) -> list[ast.expr]:
    """The calls a collection expression holds: ``[f(x) for x in xs]``, ``[f(a), g(b)]``,
    ``list(f(x) for x in xs)``."""
    if (
        isinstance(value, ast.Call)
        and isinstance(value.func, ast.Name)
        and value.func.id in ("list", "tuple")
        and len(value.args) == 1
        and not value.keywords
    ):
        value = value.args[0]
    if isinstance(value, ast.ListComp | ast.GeneratorExp | ast.SetComp):
        return [value.elt]
    if isinstance(value, ast.List | ast.Tuple):
        return [e for e in value.elts if not isinstance(e, ast.Starred)]
    return []


def _collected(name: ast.Name, scope: Scope) -> list[ast.expr]:
    """What ``*name`` in a gather holds: the calls collected in the local list it names,
    by assignment (``coros = [helper(x) for x in xs]``) or by ``coros.append(helper(x))``."""
    owner = binding_scope(name.id, scope)
    if owner is None or name.id in owner.params:
        return []
    found = [e for value in owner.bindings.get(name.id, []) for e in _elements(value)]
    for root, node in owner.mutations:
        if root.id != name.id or not isinstance(node, ast.Call) or not node.args:
            continue
        method = node.func.attr if isinstance(node.func, ast.Attribute) else ""
        if method in ("append", "insert"):
            found.append(node.args[-1])
        elif method == "extend":
            found.extend(_elements(node.args[0]))
    return found


def _awaits_durably(value: ast.expr) -> bool:
    """``await task`` / ``await child.result()``: a wait on something started before."""
    if isinstance(value, ast.Name):
        return True
    return (
        isinstance(value, ast.Call)
        and isinstance(value.func, ast.Attribute)
        and value.func.attr == "result"
    )


def _after(before: Flow, arms: list[Paths]) -> Paths:
    conts = _any([c for c, _ in arms])
    lefts = _any([e for _, e in arms])
    return (
        None if conts is None else before.then(conts),
        None if lefts is None else before.then(lefts),
    )


def _children_exprs(node: ast.AST) -> list[ast.expr]:
    return [c for c in ast.iter_child_nodes(node) if isinstance(c, ast.expr)]


def _comprehension_parts(
    node: ast.ListComp | ast.SetComp | ast.GeneratorExp | ast.DictComp,
) -> list[ast.expr]:
    """What a comprehension evaluates on every pass (its first iterable is evaluated once)."""
    parts: list[ast.expr] = []
    for index, generator in enumerate(node.generators):
        if index:
            parts.append(generator.iter)
        parts.extend(generator.ifs)
    parts.extend([node.key, node.value] if isinstance(node, ast.DictComp) else [node.elt])
    return parts


def check_branches(
    scopes: dict[Scope, str], project: Project, declarations: Declarations, sink: Sink
) -> None:
    """Flag concurrent branches of workflow code that start an operation after awaiting one."""
    flows = _Flows(project, declarations)
    for scope, context in scopes.items():
        try:
            _check_scope(scope, context, flows, project, declarations, sink)
        except RecursionError:
            sink.too_deep(scope)


def _check_scope(
    scope: Scope,
    context: str,
    flows: _Flows,
    project: Project,
    declarations: Declarations,
    sink: Sink,
) -> None:
    for call in scope.calls:
        for how, branch in _branches(call, scope):
            target = (
                flows.call_target(branch, scope)
                if isinstance(branch, ast.Call)
                else _function_ref(branch, scope, project, declarations)
            )
            if target is None or not flows.function(target).late:
                continue
            message = (
                f"`{spell(branch)}` runs durable operations one after the other in a "
                f"concurrent branch of {how}: the later ones take their ids as the earlier "
                "ones end, so once the run has to be replayed (a crash, a deploy, a "
                "suspension) it fails with `wf.NondeterminismError` and cannot be resumed "
                "(wf help WF305)"
            )
            sink.add(scope.module, branch, "WF305", message + context)


def _branches(call: ast.Call, scope: Scope) -> list[tuple[str, ast.expr]]:
    """(``asyncio.gather``..., branch expression) for each branch ``call`` starts."""
    qualname = resolve_expr(call.func, scope)
    if qualname == "asyncio.gather":
        found: list[tuple[str, ast.expr]] = []
        for arg in call.args:
            if isinstance(arg, ast.Starred):
                value = arg.value
                if isinstance(value, ast.ListComp | ast.GeneratorExp | ast.SetComp):
                    found.append(("`asyncio.gather`", value.elt))
                elif isinstance(value, ast.List | ast.Tuple):
                    found.extend(("`asyncio.gather`", e) for e in value.elts)
                elif isinstance(value, ast.Name):
                    found.extend(("`asyncio.gather`", e) for e in _collected(value, scope))
            else:
                found.append(("`asyncio.gather`", arg))
        return found
    if qualname in _SPAWNS or (
        qualname is None
        and isinstance(call.func, ast.Attribute)
        and call.func.attr == "create_task"
    ):
        what = f"`{qualname or spell(call.func)}`"
        return [(what, call.args[0])] if call.args else []
    if qualname == "wf.map" and call.args:
        return [("`wf.map`", call.args[0])]
    return []


def _function_ref(
    expr: ast.expr, scope: Scope, project: Project, declarations: Declarations
) -> Scope | None:
    """The plain function (or workflow) ``wf.map(helper, ...)`` is handed, if checked."""
    if not isinstance(expr, ast.Name | ast.Attribute):
        return None
    qualname = resolve_expr(expr, scope)
    target = None if qualname is None else project.lookup(qualname, scope.module)
    if target is None or target.function is None or declarations.kind(target) == "step":
        return None
    return target
