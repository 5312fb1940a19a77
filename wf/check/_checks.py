"""The rules for workflow code (WF1xx–WF3xx and WF404), applied to one scope at a time.

A scope here is a workflow body, a helper reachable from one, or a function or lambda nested in
either. Everything a rule needs was filed under the scope by the indexer.
"""

from __future__ import annotations

import ast

from wf.check._config import suppressed
from wf.check._index import ModuleIndex, Scope
from wf.check._infer import is_path, is_set
from wf.check._model import Finding
from wf.check._resolve import resolve_expr, resolve_name
from wf.check._rules import (
    CLOCK_RULE,
    CLOCK_WITHOUT_ARGS,
    ENVIRON,
    ENVIRON_MESSAGE,
    FILE_RULE,
    METHOD_CALLS,
    ORDERED_CONSUMERS,
    PATH_IO_METHODS,
    RULES,
    SEEDABLE,
    UNORDERED_CONSUMERS,
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

    def add(
        self,
        module: ModuleIndex,
        node: ast.expr | ast.stmt | ast.arg,
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


def check_workflow_code(scope: Scope, sink: Sink, context: str) -> None:
    """Apply the workflow-code rules to the statements filed directly under ``scope``.

    ``context`` is appended to messages, naming the workflow when ``scope`` is a helper, so
    that a finding far from any ``@wf.workflow`` explains why it is there.
    """
    module = scope.module
    # Arguments of sorted(), len(), set()...: a set consumed there cannot leak its order.
    # Calls are filed outermost first, so a consumer is seen before the calls in its arguments.
    unordered: set[int] = set()
    for call in scope.calls:
        _check_call(call, scope, sink, context, unordered)
    for attr in scope.environ_attrs:
        if resolve_expr(attr, scope) == ENVIRON:
            sink.add(module, attr, "WF205", ENVIRON_MESSAGE.format(name=spell(attr)) + context)
    if module.environ_names:
        for name in scope.loads:
            if name.id in module.environ_names and resolve_name(name.id, scope) == ENVIRON:
                sink.add(module, name, "WF205", ENVIRON_MESSAGE.format(name=name.id) + context)
    for iterable, comprehension in scope.iters:
        if isinstance(comprehension, ast.SetComp) or id(comprehension) in unordered:
            continue  # `{f(x) for x in s}` is itself unordered
        if is_set(iterable, scope):
            message = _SET_MESSAGE.format(name=spell(iterable))
            sink.add(module, iterable, "WF304", message + context)
    for stmt in scope.scope_stmts:
        keyword = "global" if isinstance(stmt, ast.Global) else "nonlocal"
        message = (
            f"`{keyword} {', '.join(stmt.names)}` shares state outside the run; it is not "
            "recorded, so a replay in another process starts from a different value"
        )
        sink.add(module, stmt, "WF404", message + context)


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
        rule = _call_rule(qualname, call)
        if rule is not None:
            message = rule.message.format(name=spell(func)) + context
            sink.add(module, call, rule.code, message, rule.hint)
            return
        if (
            qualname in ORDERED_CONSUMERS
            and id(call) not in unordered
            and call.args
            and is_set(call.args[0], scope)
        ):
            sink.add(module, call, "WF304", _SET_MESSAGE.format(name=spell(call)) + context)
            return
    if not isinstance(func, ast.Attribute):
        return
    method = func.attr
    if method in METHOD_CALLS:
        rule = METHOD_CALLS[method]
        sink.add(module, call, rule.code, rule.message.format(name=spell(func)) + context)
    elif method in PATH_IO_METHODS and is_path(func.value, scope):
        message = FILE_RULE.message.format(name=spell(func)) + context
        sink.add(module, call, FILE_RULE.code, message)
    elif method == "pop" and not call.args and is_set(func.value, scope):
        message = f"`{spell(call)}` removes an arbitrary element of a set" + _SET_TAIL + context
        sink.add(module, call, "WF304", message)
    elif (
        method == "join"
        and isinstance(func.value, ast.Constant)
        and call.args
        and is_set(call.args[0], scope)
    ):
        sink.add(module, call, "WF304", _SET_MESSAGE.format(name=spell(call)) + context)


_SET_TAIL = "; which one follows string hashes, which differ between processes"


def _call_rule(qualname: str, call: ast.Call) -> CallRule | None:
    rule = lookup_call(qualname)
    if rule is not None:
        if qualname == "asyncio.sleep" and _literal_zero(call):
            return None  # `await asyncio.sleep(0)` only yields to the loop; nothing to record
        if qualname in SEEDABLE and call.args and all(_constant(a) for a in call.args):
            return None  # a generator with a literal seed replays exactly
        return rule
    if qualname in CLOCK_WITHOUT_ARGS and not call.args and not call.keywords:
        return CLOCK_RULE
    return None


def _constant(expr: ast.expr) -> bool:
    return isinstance(expr, ast.Constant)


def _literal_zero(call: ast.Call) -> bool:
    if len(call.args) != 1 or call.keywords:
        return False
    arg = call.args[0]
    return isinstance(arg, ast.Constant) and arg.value == 0
