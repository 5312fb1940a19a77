"""The rules for workflow code (WF1xx–WF3xx and WF404), applied to one scope at a time.

A scope here is a workflow body, a helper reachable from one, or a function or lambda nested in
either. Everything a rule needs was filed under the scope by the indexer.
"""

from __future__ import annotations

import ast
from collections.abc import Collection, Iterator
from contextlib import contextmanager

from wf.check._config import suppressed
from wf.check._index import ModuleIndex, Scope
from wf.check._infer import (
    hashes_alike,
    is_hash_ordered_set,
    is_loop,
    is_module_generator,
    is_path,
)
from wf.check._model import Finding
from wf.check._resolve import Project, binding_scope, resolve_expr, resolve_name
from wf.check._rules import (
    CANCELLATION_CATCHERS,
    CLOCK_RULE,
    CLOCK_WITHOUT_ARGS,
    FILE_RULE,
    METHOD_CALLS,
    ORDERED_CONSUMERS,
    PATH_IO_METHODS,
    RULES,
    SEEDABLE,
    UNORDERED_CONSUMERS,
    WATCHED_ATTRS,
    CallRule,
    lookup_call,
)

_SET_MESSAGE = (
    "`{name}` iterates a set; set order follows string hashes, which differ between "
    "processes, so replay can take another path"
)


class Sink:
    """Collects findings, dropping duplicates and those silenced by ``# wf: ignore``."""

    def __init__(self) -> None:
        self._found: dict[tuple[str, int, int, str], Finding] = {}
        self._notes: dict[tuple[str, int, int], Finding] = {}

    def too_deep(self, scope: Scope) -> None:
        """Note that ``scope`` holds code nested too deeply to analyse (Python runs it)."""
        node = scope.node
        if isinstance(node, ast.stmt | ast.expr):
            module = scope.module
            why = (
                f"`{scope.qualname}` partly analysed: nested too deeply for "
                "wf check (Python runs it); the rules past that point are skipped for it"
            )
            col = module.column(node.lineno, node.col_offset)
            note = Finding(module.path, node.lineno, col, "note", why, "")
            self._notes.setdefault((note.path, note.line, note.col), note)

    @contextmanager
    def guarded(self, scope: Scope) -> Iterator[None]:
        """Run a pass over ``scope``; running out of stack there is a note on it, not a crash."""
        try:
            yield
        except RecursionError:
            self.too_deep(scope)

    def notes(self) -> list[Finding]:
        """The notes recorded, in report order."""
        return sorted(self._notes.values(), key=Finding.sort_key)

    def add(
        self,
        module: ModuleIndex,
        node: ast.expr | ast.stmt | ast.arg | ast.excepthandler,
        code: str,
        message: str,
        hint: str | None = None,
    ) -> None:
        """Record ``code`` at ``node`` unless its line suppresses it."""
        line = node.lineno
        text = module.lines[line - 1] if line <= len(module.lines) else ""
        if suppressed(text, code):
            return
        col = module.column(line, node.col_offset)
        key = (module.path, line, col, code)
        if key not in self._found:
            rule_hint = hint if hint is not None else RULES[code].hint
            self._found[key] = Finding(module.path, line, col, code, message, rule_hint)

    def findings(self) -> list[Finding]:
        """Everything recorded, in report order."""
        return sorted(self._found.values(), key=Finding.sort_key)


def spell(expr: ast.expr, limit: int = 60) -> str:
    """Source text of ``expr`` for a message, shortened if long."""
    text = ast.unparse(expr)
    return text if len(text) <= limit else text[: limit - 3] + "..."


def check_workflow_code(
    scope: Scope,
    sink: Sink,
    context: str,
    project: Project,
    workflow_bodies: Collection[Scope] = (),
) -> None:
    """Apply the workflow-code rules to the statements filed directly under ``scope``.

    ``context`` is appended to messages, naming the workflow when ``scope`` is a helper, so
    that a finding far from any ``@wf.workflow`` explains why it is there. ``project``: the
    checked modules, to tell what an imported name holds (WF404). ``workflow_bodies``: the
    workflows and the functions nested in them, whose locals every run makes afresh
    (``nonlocal`` on one is fine).
    """
    module = scope.module
    # Arguments of sorted(), len(), set()...: a set consumed there cannot leak its order.
    # Calls are filed outermost first, so a consumer is seen before the calls in its arguments.
    unordered: set[int] = set()
    for call in scope.calls:
        _check_call(call, scope, sink, context, unordered)
    for attr in scope.watched_attrs:
        watched = WATCHED_ATTRS.get(resolve_expr(attr, scope) or "")
        if watched is not None:
            message = watched.message.format(name=spell(attr)) + context
            sink.add(module, attr, watched.code, message)
    if module.watched_names:
        for name in scope.loads:
            if name.id in module.watched_names:
                watched = WATCHED_ATTRS.get(resolve_name(name.id, scope) or "")
                if watched is not None:
                    message = watched.message.format(name=name.id) + context
                    sink.add(module, name, watched.code, message)
    for iterable, comprehension in scope.iters:
        if isinstance(comprehension, ast.SetComp) or id(comprehension) in unordered:
            continue  # `{f(x) for x in s}` is itself unordered
        if is_hash_ordered_set(iterable, scope):
            message = _SET_MESSAGE.format(name=spell(iterable))
            sink.add(module, iterable, "WF304", message + context)
    for stmt in scope.scope_stmts:
        names = stmt.names
        if isinstance(stmt, ast.Nonlocal):
            # A local of the workflow (or of a function nested in its body) is run state:
            # every replay makes it afresh. A helper's local is not: the helper may be a
            # factory also called at import time (or cached), whose closure outlives the run.
            names = [n for n in names if _enclosing_binder(n, scope) not in workflow_bodies]
            if not names:
                continue
        keyword = "global" if isinstance(stmt, ast.Global) else "nonlocal"
        message = (
            f"`{keyword} {', '.join(names)}` shares state outside the run; it is not "
            "recorded, so a replay in another process starts from a different value"
        )
        sink.add(module, stmt, "WF404", message + context)
    for root, node in scope.mutations:
        _check_mutation(root, node, scope, sink, context, project)
    for try_ in scope.tries:
        _check_try(try_, scope, sink, context)
    for with_ in scope.withs:
        _check_suppress(with_, scope, sink, context)


def _enclosing_binder(name: str, scope: Scope) -> Scope | None:
    """The enclosing function scope a ``nonlocal name`` in ``scope`` refers to."""
    current = scope.parent
    while current is not None and current.kind != "module":
        if current.kind != "class" and current.binds(name):
            return current
        current = current.parent
    return None


def _check_mutation(
    root: ast.Name,
    node: ast.Subscript | ast.Attribute | ast.Call,
    scope: Scope,
    sink: Sink,
    context: str,
    project: Project,
) -> None:
    """WF404 for a change to an object a module-level name holds: a name of the module, one
    imported (anywhere), or ``cls`` in a classmethod of a module-level class."""
    owner = binding_scope(root.id, scope)
    if owner is None:
        return
    changed = _changed(node)
    if _is_class_of_classmethod(root.id, owner):
        if isinstance(node, ast.Call) and changed is root:
            return  # `cls.add(x)` calls a method of the class: it may be a classmethod
        assert owner.parent is not None
        held = f"class `{owner.parent.qualname}` (through `{root.id}`)"
    elif root.id in owner.imports and root.id not in owner.bindings:
        # A method call on an imported name may be a module's function (`registry.add(x)`),
        # and an attribute of one a submodule: only what a checked module holds at its top
        # level (a variable, a class's attribute) is known to be state.
        if isinstance(node, ast.Call) and not _module_state(changed, scope, project):
            return
        held = f"imported `{root.id}`"
        if changed is not root:
            held = f"`{spell(changed)}`, held by {held}"
    elif owner.kind == "module":
        # A method call on a name the module imported is handled above; only objects the
        # module itself creates (and classes) count.
        if isinstance(node, ast.Call) and (
            root.id not in owner.bindings and root.id not in owner.classes
        ):
            return
        held = f"module-level `{root.id}`"
    else:
        return
    if isinstance(node, ast.Call):
        what = f"`{spell(node.func)}(...)`"
    else:
        what = (
            f"`del {spell(node)}`"
            if isinstance(node.ctx, ast.Del)
            else f"assigning `{spell(node)}`"
        )
    message = (
        f"{what} changes {held}, which every run in the process shares and "
        "no journal records; a replay in another process starts from its initial value"
    )
    sink.add(scope.module, node, "WF404", message + context)


def _changed(node: ast.Subscript | ast.Attribute | ast.Call) -> ast.expr:
    """The object a mutation changes: ``xs`` in ``xs.append(v)``, ``d`` in ``d[k] = v``."""
    if isinstance(node, ast.Call):
        func = node.func
        assert isinstance(func, ast.Attribute)  # filed so by the indexer
        return func.value
    return node.value


def _is_class_of_classmethod(name: str, owner: Scope) -> bool:
    """Whether ``name`` is the first parameter of a ``@classmethod`` of a module-level class
    (an object every run shares, as the class is)."""
    fn = owner.function
    parent = owner.parent
    return (
        fn is not None
        and parent is not None
        and parent.kind == "class"
        and parent.parent is not None
        and parent.parent.kind == "module"
        and bool(owner.params)
        and owner.params[0] == name
        and any(isinstance(d, ast.Name) and d.id == "classmethod" for d in fn.decorator_list)
    )


def _module_state(expr: ast.expr, scope: Scope, project: Project) -> bool:
    """Whether ``expr`` (``config.items``, ``items`` after ``from config import items``)
    names an object a checked module holds at its top level: a variable of the module, or
    what a class of it holds (``Counter.seen``). A module, a function, a class itself and
    anything of code not checked are not known to be state."""
    qualname = resolve_expr(expr, scope)
    if qualname is None:
        return False
    parts = qualname.split(".")
    for cut in range(len(parts) - 1, 0, -1):
        module = project.module(".".join(parts[:cut]), scope.module)
        if module is None:
            continue
        top, rest = module.scope, parts[cut:]
        if rest[0] in top.bindings:
            return True
        return len(rest) >= 2 and rest[0] in top.classes
    return False


def _check_try(try_: ast.Try | ast.TryStar, scope: Scope, sink: Sink, context: str) -> None:
    """WF306 for a handler that can catch the run's suspension and does not re-raise it."""
    for handler in try_.handlers:
        if not _catches_cancellation(handler.type, scope) or _reraises(handler.body, handler.name):
            continue
        if not _contains(try_.body, (ast.Await, ast.AsyncFor, ast.AsyncWith)):
            return  # nothing in the body can be suspended or cancelled
        caught = "" if handler.type is None else f" {spell(handler.type)}"
        message = (
            f"`except{caught}:` catches, at an `await`, the cancellation wf suspends and "
            "cancels runs with, and does not re-raise it: wf suspends the run anyway and "
            "discards what the handler did" + context
        )
        sink.add(scope.module, handler, "WF306", message)


def _check_suppress(with_: ast.With, scope: Scope, sink: Sink, context: str) -> None:
    """WF306 for ``with contextlib.suppress(CancelledError):`` around an ``await``."""
    for item in with_.items:
        call = item.context_expr
        if (
            isinstance(call, ast.Call)
            and resolve_expr(call.func, scope) == "contextlib.suppress"
            and any(_catches_cancellation(arg, scope) for arg in call.args)
            and _contains(with_.body, (ast.Await, ast.AsyncFor, ast.AsyncWith))
        ):
            message = (
                f"`{spell(call)}` swallows, at an `await`, the cancellation wf suspends and "
                "cancels runs with: wf suspends the run anyway and discards what the code "
                "after it did" + context
            )
            sink.add(scope.module, call, "WF306", message)
            return


def _reraises(stmts: list[ast.stmt], name: str | None) -> bool:
    """Whether every path through a handler's ``stmts`` ends in ``raise`` or ``raise <name>``
    (the exception caught): a raise only in some branches (``if isinstance(e, ValueError):
    raise``) lets the cancellation through those others."""
    for stmt in stmts:
        if isinstance(stmt, ast.Raise) and (
            stmt.exc is None or (isinstance(stmt.exc, ast.Name) and stmt.exc.id == name)
        ):
            return True
        if isinstance(stmt, ast.If) and _reraises(stmt.body, name) and _reraises(stmt.orelse, name):
            return True
        if isinstance(stmt, ast.With | ast.AsyncWith) and _reraises(stmt.body, name):
            return True
    return False


def _catches_cancellation(caught: ast.expr | None, scope: Scope) -> bool:
    if caught is None:
        return True  # a bare `except:`
    names = caught.elts if isinstance(caught, ast.Tuple) else [caught]
    return any(resolve_expr(name, scope) in CANCELLATION_CATCHERS for name in names)


_NESTED = (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda, ast.ClassDef)


def _contains(stmts: list[ast.stmt], kind: tuple[type[ast.AST], ...]) -> bool:
    """Whether ``stmts`` hold a ``kind`` node outside functions and classes nested in them."""
    stack: list[ast.AST] = list(stmts)
    while stack:
        node = stack.pop()
        if isinstance(node, kind):
            return True
        if not isinstance(node, _NESTED):
            stack.extend(ast.iter_child_nodes(node))
    return False


def _check_call(
    call: ast.Call, scope: Scope, sink: Sink, context: str, unordered: set[int]
) -> None:
    module = scope.module
    func = call.func
    qualname = resolve_expr(func, scope)
    if qualname in UNORDERED_CONSUMERS:
        unordered.update(id(arg) for arg in call.args)
        return
    if qualname is not None:
        if qualname == "wf" or qualname.startswith("wf."):
            return  # wf's own API is the deterministic replacement
        rule = _call_rule(qualname, call, scope)
        if rule is not None:
            message = rule.message.format(name=spell(func)) + context
            sink.add(module, call, rule.code, message, rule.hint)
            return
        if (
            qualname in ORDERED_CONSUMERS
            and id(call) not in unordered
            and call.args
            and is_hash_ordered_set(call.args[0], scope)
        ):
            sink.add(module, call, "WF304", _SET_MESSAGE.format(name=spell(call)) + context)
            return
    if not isinstance(func, ast.Attribute):
        return
    method = func.attr
    if method in METHOD_CALLS:
        rule = METHOD_CALLS[method]
        sink.add(module, call, rule.code, rule.message.format(name=spell(func)) + context)
    elif method == "time" and not call.args and is_loop(func.value, scope):
        message = CLOCK_RULE.message.format(name=spell(func)) + context
        sink.add(module, call, CLOCK_RULE.code, message)
    elif isinstance(func.value, ast.Name) and is_module_generator(func.value, scope):
        message = (
            f"`{spell(func)}()` draws from `{func.value.id}`, a generator every run in the "
            "process shares and no journal records; on replay it gives other numbers"
        )
        sink.add(module, call, "WF102", message + context)
    elif method in PATH_IO_METHODS and is_path(func.value, scope):
        message = FILE_RULE.message.format(name=spell(func)) + context
        sink.add(module, call, FILE_RULE.code, message)
    elif method == "pop" and not call.args and is_hash_ordered_set(func.value, scope):
        message = f"`{spell(call)}` removes an arbitrary element of a set" + _SET_TAIL + context
        sink.add(module, call, "WF304", message)
    elif (
        method == "join"
        and isinstance(func.value, ast.Constant)
        and call.args
        and is_hash_ordered_set(call.args[0], scope)
    ):
        sink.add(module, call, "WF304", _SET_MESSAGE.format(name=spell(call)) + context)


_SET_TAIL = "; which one follows string hashes, which differ between processes"


def _call_rule(qualname: str, call: ast.Call, scope: Scope) -> CallRule | None:
    rule = lookup_call(qualname)
    if rule is not None:
        if qualname == "asyncio.sleep" and _literal_zero(call):
            return None  # `await asyncio.sleep(0)` only yields to the loop; nothing to record
        if qualname == "builtins.hash" and _number(call, scope):
            return None  # numbers (and tuples of them) hash alike in every process
        if qualname in SEEDABLE and _seeded(call):
            return None  # a private generator with a seed replays exactly
        return rule
    if qualname in CLOCK_WITHOUT_ARGS and not call.args and not call.keywords:
        return CLOCK_RULE
    return None


def _number(call: ast.Call, scope: Scope) -> bool:
    """``hash()`` of an int, float or bool, or of a tuple of them (literals, or names surely
    of those types): hashed alike everywhere."""
    return len(call.args) == 1 and not call.keywords and hashes_alike(call.args[0], scope)


def _seeded(call: ast.Call) -> bool:
    """``random.Random(42)`` or ``random.Random(order_id)``: not ``random.Random(None)``.

    A seed computed from something that differs on replay is flagged where it is computed."""
    seeds = [*call.args, *(k.value for k in call.keywords)]
    return bool(seeds) and not (isinstance(seeds[0], ast.Constant) and seeds[0].value is None)


def _literal_zero(call: ast.Call) -> bool:
    if len(call.args) != 1 or call.keywords:
        return False
    arg = call.args[0]
    return isinstance(arg, ast.Constant) and arg.value == 0
