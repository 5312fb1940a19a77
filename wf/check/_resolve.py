"""Name resolution: what a name or dotted expression refers to, across the checked modules.

Names resolve to dotted strings: ``time.time`` for an imported function, ``pkg.mod.helper`` or
``pkg.mod.C.m`` for code in the checked project, ``builtins.open`` for a builtin. Anything bound by
plain assignment or a parameter is a local variable of unknown type and resolves to ``None``, so
shadowing a module (`time = 3`) never produces a finding.
"""

from __future__ import annotations

import ast
import builtins
from collections import defaultdict
from pathlib import PurePath

from wf.check._index import ModuleIndex, Scope
from wf.check._model import Finding
from wf.check._rules import WF_PUBLIC_NAMES, lookup_call

_BUILTINS = frozenset(dir(builtins))
_MAX_DEPTH = 12  # aliases and re-exports are followed this far; cycles stop here
_MAX_MRO = 1000  # classes in one method resolution order: past this, a note says it stops
_MAX_INSTANCE_DEPTH = 4  # `a = B(); c = a; c.m()` is followed this many names deep
# Bases outside the checked code whose order is just themselves and `object`: they bind no
# method of the class's and never come before a checked class, so its order stays known.
_PLAIN_BASES = frozenset(
    {
        "builtins.object",
        "abc.ABC",
        "typing.Generic",
        "typing.Protocol",
        "typing_extensions.Generic",
        "typing_extensions.Protocol",
    }
)


def resolve_name(name: str, scope: Scope, depth: int = 0) -> str | None:
    """The dotted name ``name`` refers to when used in ``scope``, if it can be known."""
    owner = binding_scope(name, scope)
    if owner is not None:
        return _local(name, owner, depth)
    return _star_imported(name, scope) or (f"builtins.{name}" if name in _BUILTINS else None)


def _star_imported(name: str, scope: Scope) -> str | None:
    """``name`` as brought in by ``from x import *``, when that can be told.

    Which names a star import binds is unknown without importing, so a candidate ``x.name`` is
    believed when it is one the rules care about (wf's API, a flagged call), or when there is a
    single star import and ``name`` is no builtin.
    """
    # Python allows `import *` only at module level; the last one imported wins.
    sources = scope.module.scope.star_imports[::-1]
    if not sources:
        return None
    for source in sources:
        candidate = f"{source}.{name}"
        if (source == "wf" and name in WF_PUBLIC_NAMES) or lookup_call(candidate) is not None:
            return candidate
    if len(sources) == 1 and name not in _BUILTINS:
        return f"{sources[0]}.{name}"
    return None


def binding_scope(name: str, scope: Scope) -> Scope | None:
    """The scope whose binding of ``name`` a use in ``scope`` sees (None: global or builtin)."""
    current: Scope | None = scope
    first = True
    while current is not None:
        # A class body is visible to its own statements, not to the methods nested in it.
        if current.kind == "class" and not first:
            current = current.parent
            continue
        if name in current.globals:
            current = current.module.scope
        first = False
        if current.binds(name):
            return current
        current = current.parent
    return None


def _local(name: str, scope: Scope, depth: int) -> str | None:
    module = scope.module.name
    values = scope.bindings.get(name)
    if values is not None:
        # `sleep = asyncio.sleep` makes `sleep` an alias; anything else is a plain variable.
        alias = values[0] if len(values) == 1 else None
        if isinstance(alias, ast.Name | ast.Attribute) and depth < _MAX_DEPTH:
            return resolve_expr(alias, scope, depth + 1)
        return None
    if name in scope.defs:
        return f"{module}.{scope.defs[name].qualname}"
    if name in scope.classes:
        return f"{module}.{scope.classes[name].qualname}"
    if name in scope.imports:
        return scope.imports[name]
    if scope.params and name == scope.params[0] and _is_method(scope):
        # `self` (or `cls`) stands for the class, so `self.helper()` resolves to `C.helper`.
        assert scope.parent is not None
        return f"{module}.{scope.parent.qualname}"
    return None


def _is_method(scope: Scope) -> bool:
    return (
        scope.kind == "function"
        and scope.parent is not None
        and (scope.parent.kind == "class" and not scope.is_static)
    )


def resolve_expr(expr: ast.expr, scope: Scope, depth: int = 0) -> str | None:
    """The dotted name a ``Name`` or ``a.b.c`` attribute chain refers to, if it can be known."""
    # A loop, not a recursion per `.attr`: a chain may be thousands of attributes long.
    attrs: list[str] = []
    while isinstance(expr, ast.Attribute):
        attrs.append(expr.attr)
        expr = expr.value
    if not isinstance(expr, ast.Name):
        return None
    base = resolve_name(expr.id, scope, depth)
    if base is None or not attrs:
        return base
    return ".".join([base, *reversed(attrs)])


def is_wf_api(qualname: str | None, attr: str) -> bool:
    """Whether ``qualname`` is wf's public ``attr`` (e.g. ``wf.workflow``), however re-exported."""
    if qualname is None:
        return False
    head, _, tail = qualname.partition(".")
    return head == "wf" and tail.rpartition(".")[2] == attr


class Project:
    """The checked modules, found by the names other modules import them as."""

    def __init__(self, modules: list[ModuleIndex], aliases: dict[str, list[str]]) -> None:
        self.modules = modules
        self._mros: dict[Scope, list[Scope] | None] = {}
        # Whether every base up a class's hierarchy is a checked class (or a plain one).
        self._whole: dict[Scope, bool] = {}
        self._known: dict[Scope, list[Scope]] = {}  # _known_order's answers
        # Notes on class hierarchies deeper than the analysis follows, by class.
        self.notes: dict[Scope, Finding] = {}
        self._primary: dict[str, list[ModuleIndex]] = defaultdict(list)
        self._alias: dict[str, list[ModuleIndex]] = defaultdict(list)
        for module in modules:
            self._primary[module.name].append(module)
            for alias in aliases.get(module.path, ()):
                self._alias[alias].append(module)

    def module(self, name: str, near: ModuleIndex) -> ModuleIndex | None:
        """The module imported as ``name`` from ``near``.

        Two checked files can claim one name (two top-level scripts called ``flows.py``); then
        the one in ``near``'s directory wins, as it would on ``sys.path``, else none does.
        """
        candidates = self._primary.get(name) or self._alias.get(name)
        if not candidates:
            return None
        if len(candidates) == 1:
            return candidates[0]
        here = PurePath(near.path).parent
        local = [m for m in candidates if PurePath(m.path).parent == here]
        return local[0] if len(local) == 1 else None

    def lookup(self, qualname: str, near: ModuleIndex, depth: int = 0) -> Scope | None:
        """The function or class scope ``qualname`` names in the checked code, if any.

        Follows re-exports (``from .impl import helper`` in a package ``__init__``) and base
        classes (``self.helper()`` defined on a parent class).
        """
        if depth > _MAX_DEPTH:
            return None
        parts = qualname.split(".")
        for cut in range(len(parts) - 1, 0, -1):
            module = self.module(".".join(parts[:cut]), near)
            if module is not None:
                return self._in_module(module, parts[cut:], depth)
        return None

    def _in_module(self, module: ModuleIndex, rest: list[str], depth: int) -> Scope | None:
        found = module.symbols.get(".".join(rest))
        if found is not None:
            return found
        top = module.scope
        if rest[0] in top.imports and rest[0] not in top.bindings:
            target = ".".join([top.imports[rest[0]], *rest[1:]])
            return self.lookup(target, module, depth + 1)
        if len(rest) >= 2:
            owner = self._in_module(module, rest[:-1], depth + 1)
            if owner is not None and owner.kind == "class":
                return self.inherited(owner, rest[-1])
        return None

    def inherited(self, cls: Scope, name: str) -> Scope | None:
        """The function or class ``name`` that ``cls`` inherits: from the first class of its
        method resolution order (C3, as Python computes it from the bases the checked code
        defines) whose body binds ``name``; None when that binding is no ``def`` / ``class``,
        or lies past a point where a base outside the checked code could come first."""
        for ancestor in self._known_order(cls)[1:]:
            if name in ancestor.defs:
                return ancestor.defs[name]
            if name in ancestor.classes:
                return ancestor.classes[name]
            if ancestor.binds(name):
                return None  # `m = other` in a class body: a value, not followed
        return None

    def _known_order(self, cls: Scope) -> list[Scope]:
        """The start of ``cls``'s method resolution order that bases outside the checked code
        cannot change: all of it when every base up its hierarchy is checked. Else a class's
        first base still comes right after it (C3), and the order of a class with one base is
        that base's: further on, an unseen base (or one of its own) may come first and bind
        the name, so what a checked class there binds is no longer a fact but a guess."""
        cached = self._known.get(cls)
        if cached is None:
            cached = self._known[cls] = self._known_prefix(cls)
        return cached

    def _known_prefix(self, cls: Scope) -> list[Scope]:
        if self.mro(cls) is None:
            return []
        known: list[Scope] = []
        current = cls
        while not self._whole.get(current, False):
            known.append(current)
            bases, unseen = self._bases(current)
            assert isinstance(current.node, ast.ClassDef)
            first = next((b for b in current.node.bases if not _plain(b, current)), None)
            if first is None or not bases or self._base_class(first, current) is not bases[0]:
                return known  # its first base is not checked: nothing more is known
            if unseen or len(bases) > 1:
                return [*known, bases[0]]
            current = bases[0]
        return [*known, *(self.mro(current) or [])]

    def mro(self, cls: Scope) -> list[Scope] | None:
        """``cls``'s method resolution order among the checked classes (bases outside the
        checked code are left out); None if Python would refuse it (no consistent order, a
        cycle) or it is longer than wf check follows (then a note says so)."""
        if cls in self._mros:
            return self._mros[cls]
        # Bases first, without recursion (a chain of classes may be thousands long).
        stack = [cls]
        busy: set[Scope] = set()
        while stack:
            current = stack[-1]
            if current in self._mros:
                stack.pop()
                continue
            bases, unseen = self._bases(current)
            todo = [b for b in bases if b not in self._mros]
            if todo and current not in busy:
                busy.add(current)
                stack.extend(b for b in todo if b not in busy)
                continue
            stack.pop()
            if todo:  # a base still being read: a cycle
                self._mros[current] = None
                continue
            found = [self._mros[b] for b in bases]
            if any(m is None for m in found):
                self._mros[current] = None
                continue
            if len(found) == 1 and found[0] is not None:
                merged: list[Scope] | None = found[0]  # one base: its order, as C3 gives it
            else:
                merged = _c3_merge([list(m) for m in found if m is not None] + [list(bases)])
            if merged is not None and len(merged) >= _MAX_MRO:
                self._too_long(current)
                merged = None
            self._mros[current] = None if merged is None else [current, *merged]
            self._whole[current] = not unseen and all(self._whole.get(b, False) for b in bases)
        return self._mros[cls]

    def _bases(self, cls: Scope) -> tuple[list[Scope], bool]:
        """The checked classes among ``cls``'s bases, and whether it has others (unseen)."""
        assert isinstance(cls.node, ast.ClassDef)
        found: list[Scope] = []
        unseen = False
        for base in cls.node.bases:
            target = self._base_class(base, cls)
            if target is None:
                unseen = unseen or not _plain(base, cls)
            elif target not in found:
                found.append(target)
        return found, unseen

    def _base_class(self, base: ast.expr, cls: Scope) -> Scope | None:
        """The checked class ``base`` (in ``cls``'s bases) names, if any."""
        assert cls.parent is not None
        name = resolve_expr(base, cls.parent)
        target = None if name is None else self.lookup(name, cls.module)
        return target if target is not None and target.kind == "class" else None

    def _too_long(self, cls: Scope) -> None:
        module, node = cls.module, cls.node
        assert isinstance(node, ast.ClassDef)
        why = (
            f"`{cls.qualname}` partly analysed: more than {_MAX_MRO} classes in its method "
            "resolution order for wf check (Python runs it); the methods it inherits are "
            "not followed"
        )
        col = module.column(node.lineno, node.col_offset)
        self.notes.setdefault(cls, Finding(module.path, node.lineno, col, "note", why, ""))


def _plain(base: ast.expr, cls: Scope) -> bool:
    """Whether ``base`` is one of the ``_PLAIN_BASES`` (``Generic[T]`` as ``Generic``)."""
    assert cls.parent is not None
    if isinstance(base, ast.Subscript):
        base = base.value
    return resolve_expr(base, cls.parent) in _PLAIN_BASES


def _c3_merge(lists: list[list[Scope]]) -> list[Scope] | None:
    """C3's merge of the bases' orders and the list of bases; None when it has none."""
    out: list[Scope] = []
    lists = [seq for seq in lists if seq]
    starts = [0] * len(lists)
    # How many lists hold each class past their head: a head held in no tail comes next.
    tails: dict[Scope, int] = {}
    for seq in lists:
        for item in seq[1:]:
            tails[item] = tails.get(item, 0) + 1
    while True:
        live = [i for i, seq in enumerate(lists) if starts[i] < len(seq)]
        if not live:
            return out
        head = next((lists[i][starts[i]] for i in live if not tails.get(lists[i][starts[i]])), None)
        if head is None:
            return None
        out.append(head)
        for i in live:
            if lists[i][starts[i]] is head:
                starts[i] += 1
                if starts[i] < len(lists[i]):
                    tails[lists[i][starts[i]]] -= 1


def method_of_instance(func: ast.expr, scope: Scope, project: Project) -> Scope | None:
    """``Timer().read`` or ``t.read`` after ``t = Timer()``: the method, if Timer is checked."""
    if not isinstance(func, ast.Attribute):
        return None
    cls = instance_of(func.value, scope, project, 0)
    if cls is None:
        return None
    return project.lookup(f"{cls.module.name}.{cls.qualname}.{func.attr}", cls.module)


def instance_of(expr: ast.expr, scope: Scope, project: Project, depth: int) -> Scope | None:
    """The checked class ``expr`` is surely an instance of, if any."""
    if isinstance(expr, ast.Call):
        qualname = resolve_expr(expr.func, scope)
        target = None if qualname is None else project.lookup(qualname, scope.module)
        return target if target is not None and target.kind == "class" else None
    if isinstance(expr, ast.Name) and depth < _MAX_INSTANCE_DEPTH:
        owner = binding_scope(expr.id, scope)
        values = None if owner is None else owner.bindings.get(expr.id)
        if owner is None or not values or expr.id in owner.params:
            return None
        classes = {
            instance_of(v, owner, project, depth + 1) if v is not None else None for v in values
        }
        only = classes.pop() if len(classes) == 1 else None
        return only
    return None
