"""What of a module runs when it is imported, not only as a script: the ``if __name__ ==
"__main__":`` guards (however spelled) and the calls outside them. Shared by ``wf check``'s
rule WF506 and the loader's naming of a script's workflows, so that both read a guard alike.
Imports nothing of wf."""

from __future__ import annotations

import ast
from collections.abc import Iterator

_SKIPPED = (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef, ast.Lambda)


def main_guard(test: ast.expr) -> bool | None:
    """For an ``if`` test: True if its body runs only as a script (``__name__ == "__main__"``
    either way round, ``__name__ in {"__main__", ...}`` or a tuple or list, either of them
    ``and`` anything), False if its ``else`` does (``__name__ != "__main__"``,
    ``not __name__ == "__main__"``, ...), None if neither."""
    if isinstance(test, ast.UnaryOp) and isinstance(test.op, ast.Not):
        inner = main_guard(test.operand)
        return None if inner is None else not inner
    if isinstance(test, ast.BoolOp):
        # `a and b` is true only if each is: a guard among them guards the body. `a or b` is
        # false only if each is: an inverted guard among them guards the else.
        want = isinstance(test.op, ast.And)
        return want if any(main_guard(v) is want for v in test.values) else None
    if not (isinstance(test, ast.Compare) and len(test.ops) == 1):
        return None
    op, left, right = test.ops[0], test.left, test.comparators[0]
    if isinstance(op, ast.Eq | ast.NotEq):
        sides = [left, right]
        names = [s for s in sides if isinstance(s, ast.Name) and s.id == "__name__"]
        texts = [s for s in sides if isinstance(s, ast.Constant) and s.value == "__main__"]
        if len(names) == 1 and len(texts) == 1:
            return isinstance(op, ast.Eq)
        return None
    if isinstance(op, ast.In | ast.NotIn):
        if not (isinstance(left, ast.Name) and left.id == "__name__"):
            return None
        if not isinstance(right, ast.Set | ast.Tuple | ast.List):
            return None
        if any(isinstance(e, ast.Constant) and e.value == "__main__" for e in right.elts):
            return isinstance(op, ast.In)
    return None


def import_time_calls(body: list[ast.stmt]) -> Iterator[ast.Call]:
    """The calls the statements ``body`` make when they run, outside functions, classes and
    lambdas (which run only when called), and outside the part of an ``if`` that runs only as
    a script (see ``main_guard``; the other part runs on import)."""
    stack: list[ast.AST] = list(reversed(body))
    while stack:
        node = stack.pop()
        if isinstance(node, _SKIPPED):
            continue
        if isinstance(node, ast.If):
            guard = main_guard(node.test)
            if guard is not None:
                stack.extend(reversed(node.orelse if guard else node.body))
                continue
        if isinstance(node, ast.Call):
            yield node
        stack.extend(reversed(list(ast.iter_child_nodes(node))))
