"""JSON schemas of the API's bodies, derived from the types that make them (pydantic).

A dataclass (``RunRecord``, ``Operation``, ...) stands for its ``to_json()``: an object of
every field (``OMITTED`` names the few fields a ``to_json`` leaves out when empty), each field
described by its attribute docstring. Every class is first rebuilt as a
``typing_extensions.TypedDict`` (pydantic refuses ``typing.TypedDict`` before Python 3.12,
and ``wf._events.Waiting`` is one: the kernel does not import ``typing_extensions``).
"""

from __future__ import annotations

import ast
import dataclasses
import functools
import inspect
import itertools
import operator
import types
import typing
from collections.abc import Callable
from typing import Any, Literal

import typing_extensions
from pydantic import Field, TypeAdapter
from pydantic.json_schema import GenerateJsonSchema

from wf._syntax import parse_source
from wf.admin._model import Operation, Reason
from wf.store._faults import Fault

REF = "#/components/schemas/{model}"

OMITTED: dict[type, Callable[[str], bool]] = {
    Reason: lambda name: name not in ("kind", "tone"),
    Operation: lambda name: name == "spans",
    Fault: lambda name: name == "shown_as",
}
"""Fields a class's ``to_json()`` may leave out: a ``Reason`` gives only the fields its kind
uses, an ``Operation`` its ``spans`` only where asked (the API's detail gives them), a
``Fault`` its ``shown_as`` only when the item is shown all the same."""


class _Generator(GenerateJsonSchema):
    """pydantic's generator without a title on every property (the names say it)."""

    def field_title_should_be_set(self, schema: Any) -> bool:
        return False


def schemas(components: dict[str, Any]) -> dict[str, Any]:
    """``components.schemas`` of an OpenAPI document: each named type's schema, and every
    type they use (a dataclass under its own name)."""
    built = _Builder()
    mode: Literal["serialization"] = "serialization"  # what to_json() gives
    adapters = [
        (name, mode, TypeAdapter(built.portable(tp, name))) for name, tp in components.items()
    ]
    tops, defs = TypeAdapter.json_schemas(adapters, ref_template=REF, schema_generator=_Generator)
    out: dict[str, Any] = dict(defs.get("$defs", {}))
    for (name, _mode), schema in tops.items():  # keyed (name, mode)
        if "$ref" not in schema or schema["$ref"] != REF.format(model=name):
            out[name] = schema
    for schema in out.values():
        schema.pop("title", None)
    return dict(sorted(out.items()))


IN_PROCESS = frozenset({"on_progress"})
"""Keywords that take a callback in the caller's process: never a key of a request."""


def keywords(
    fn: Callable[..., Any], *, query: bool = False
) -> dict[str, tuple[dict[str, Any], Any]]:
    """A function's keyword-only parameters: each one's schema and its default
    (``inspect.Parameter.empty``: required). ``query``: as query parameters, where an absent
    one is None (the schema leaves ``null`` out).

    Names the function's module imports only for type checking are looked up in
    ``wf.store``, where the admin API's come from."""
    import wf.store

    names = {**vars(wf.store), **fn.__globals__}
    out = {}
    for parameter in inspect.signature(fn).parameters.values():
        if parameter.kind is parameter.KEYWORD_ONLY and parameter.name not in IN_PROCESS:
            # One by one: the positional ones may name what only type checking imports.
            hint = parameter.annotation
            tp = eval(hint, names) if isinstance(hint, str) else hint  # annotations: our source
            schema = schema_of(tp)
            out[parameter.name] = (_not_null(schema) if query else schema, parameter.default)
    return out


def _not_null(schema: dict[str, Any]) -> dict[str, Any]:
    options = [s for s in schema.get("anyOf", ()) if s != {"type": "null"}]
    if "anyOf" in schema and len(options) == 1:
        return {**{k: v for k, v in schema.items() if k != "anyOf"}, **options[0]}
    return schema


def schema_of(tp: Any) -> dict[str, Any]:
    """The schema of one plain type (a query parameter's), whole: the types it uses are
    written where they are used, not referred to."""
    schema: dict[str, Any] = TypeAdapter(_Builder().portable(tp)).json_schema(
        mode="serialization", schema_generator=_Generator
    )
    defs = schema.pop("$defs", {})

    def inline(node: Any) -> Any:
        if isinstance(node, dict):
            ref = node.get("$ref", "")
            if ref.startswith("#/$defs/"):
                found = dict(defs[ref.removeprefix("#/$defs/")])
                found.pop("title", None)
                return inline(found)
            return {key: inline(value) for key, value in node.items()}
        if isinstance(node, list):
            return [inline(value) for value in node]
        return node

    inlined: dict[str, Any] = inline(schema)
    return inlined


class _Builder:
    """Rebuilds types with every class in them as a ``typing_extensions.TypedDict`` (one per
    class, so a class used twice is one component)."""

    def __init__(self) -> None:
        self.made: dict[Any, Any] = {}

    def portable(self, tp: Any, name: str | None = None) -> Any:
        """``tp`` with its classes rebuilt; a ``dict`` of fields becomes a TypedDict ``name``."""
        if isinstance(tp, dict):
            assert name is not None, "a dict of fields needs a name"
            return self._typed_dict(name, None, tp, lambda _: False, {})
        if isinstance(tp, type) and (dataclasses.is_dataclass(tp) or typing.is_typeddict(tp)):
            return self._class(tp)
        origin = typing.get_origin(tp)
        args = typing.get_args(tp)
        if origin in (types.UnionType, typing.Union):
            return functools.reduce(operator.or_, [self.portable(a) for a in args])
        if origin is typing.NotRequired:
            return typing_extensions.NotRequired[self.portable(args[0])]
        if origin is typing.Annotated:
            return typing.Annotated[(self.portable(args[0]), *tp.__metadata__)]
        if origin in (list, dict, tuple, set, frozenset) or (
            origin is not None and origin.__module__ == "collections.abc"
        ):
            return origin[tuple(a if a is Ellipsis else self.portable(a) for a in args)]
        return tp

    def _class(self, cls: type) -> Any:
        if cls in self.made:
            return self.made[cls]
        hints = typing.get_type_hints(cls, include_extras=True)
        optional: Callable[[str], bool]
        if dataclasses.is_dataclass(cls):
            fields = {f.name: hints[f.name] for f in dataclasses.fields(cls)}
            owner = next((base for base in cls.__mro__ if base in OMITTED), None)
            optional = OMITTED[owner] if owner is not None else lambda _: False
        else:
            # The keys of a ``total=False`` class, and the NotRequired[...] ones (which 3.11
            # does not count as optional under ``from __future__ import annotations``).
            fields = hints
            keys: frozenset[str] = getattr(cls, "__optional_keys__", frozenset())
            marked = {k for k, tp in hints.items() if typing.get_origin(tp) is typing.NotRequired}
            optional = (keys | marked).__contains__
        return self._typed_dict(cls.__name__, cls, fields, optional, _attribute_docs(cls))

    def _typed_dict(
        self,
        name: str,
        cls: type | None,
        fields: dict[str, Any],
        optional: Callable[[str], bool],
        docs: dict[str, str],
    ) -> Any:
        annotations: dict[str, Any] = {}
        for field, tp in fields.items():
            if typing.get_origin(tp) is typing.NotRequired:
                tp = typing.get_args(tp)[0]
            value = self.portable(tp)
            if field in docs:
                value = typing.Annotated[value, Field(description=docs[field])]
            if optional(field):
                value = typing_extensions.NotRequired[value]
            annotations[field] = value
        made = typing_extensions.TypedDict(name, annotations)  # type: ignore[misc]
        doc = cls.__doc__ if cls is not None else None
        if doc and cls is not None and doc.startswith(cls.__name__ + "("):
            doc = None  # the signature a dataclass without a docstring is given
        made.__doc__ = inspect.cleandoc(doc) if doc else None
        if cls is not None:
            self.made[cls] = made
        return made


def _attribute_docs(cls: type) -> dict[str, str]:
    """The docstrings written under a class's fields (``x: int`` then ``\"\"\"...\"\"\"``)."""
    return _module_docs(cls.__module__).get(cls.__qualname__, {})


@functools.cache
def _module_docs(module: str) -> dict[str, dict[str, str]]:
    """Every class of a module (by qualified name) with its fields' docstrings: the module's
    source is parsed once (``inspect.getsource`` would parse it again for every class)."""
    import sys

    try:
        path = inspect.getsourcefile(sys.modules[module])
        tree = parse_source(open(path or "", encoding="utf-8").read())  # noqa: SIM115
    except (KeyError, OSError, TypeError, SyntaxError):
        return {}
    found: dict[str, dict[str, str]] = {}

    def visit(body: list[ast.stmt], prefix: str) -> None:
        for node in body:
            if isinstance(node, ast.ClassDef):
                name = prefix + node.name
                found[name] = _field_docs(node.body)
                visit(node.body, name + ".")
            elif isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
                visit(node.body, f"{prefix}{node.name}.<locals>.")

    visit(tree.body, "")
    return found


def _field_docs(body: list[ast.stmt]) -> dict[str, str]:
    docs: dict[str, str] = {}
    for first, second in itertools.pairwise(body):
        if (
            isinstance(first, ast.AnnAssign)
            and isinstance(first.target, ast.Name)
            and isinstance(second, ast.Expr)
            and isinstance(second.value, ast.Constant)
            and isinstance(second.value.value, str)
        ):
            docs[first.target.id] = inspect.cleandoc(second.value.value)
    return docs
