"""Workflow input: binding ``wf run --input`` JSON to parameters, and validating it with pydantic.

Binding (``bind_input``) turns the decoded ``--input`` JSON into ``(args, kwargs)``:

- no input (``None``) means no arguments;
- an object maps parameters by name, an array gives them by position;
- any other value (a string, number or boolean) is the single argument of a one-parameter
  workflow.

One exception makes the common case natural. When the workflow has a *sole parameter* — exactly
one parameter, and no ``*args`` or ``**kwargs`` — and that parameter's annotation says it *is* an
object or an array, the whole input is its value:

- an object is the sole parameter's value when the annotation accepts an object (a ``dict`` or
  ``Mapping``, a ``TypedDict``, a dataclass or a pydantic model, or a union including one) **and**
  the object has no key named after the parameter. So for ``async def order(o: Order)`` both
  ``{"sku": "A1", "qty": 2}`` and ``{"o": {"sku": "A1", "qty": 2}}`` work;
- an array is the sole parameter's value when the annotation accepts an array (``list``,
  ``tuple``, ``set``, ``frozenset``, ``Sequence``, ``Iterable``, a named tuple, …). So for
  ``async def total(prices: list[float])``, ``[1.5, 2]`` means ``prices=[1.5, 2]``.

The rule looks only at the signature, never at whether a reading would validate, so the same input
always binds the same way. An unannotated (or ``Any``) sole parameter gets the plain rules; naming
the parameter (``{"name": value}``) always works.

Validation (``validate_arguments``) checks and coerces bound arguments against the annotations
with pydantic (lax mode): a JSON string becomes a ``datetime``, an object a dataclass or model, an
array a ``tuple``. Unannotated parameters accept anything; an annotation that cannot be resolved
(a ``from __future__ import annotations`` name that does not exist at run time, say) or that
pydantic cannot handle at all also accepts anything, rather than making the workflow unusable;
arbitrary classes pydantic has no schema for are checked with ``isinstance``. Validators are built
once per function (and once per type for ``validate_value``) and cached.

A workflow's output is validated the same way against its return annotation
(``validate_output``): ``async def total() -> int`` that returns ``"nope"`` fails its run with
``OutputValidationError``.

pydantic is imported on first use, not at import time: ``wf --help`` must start fast.
"""

from __future__ import annotations

import collections
import collections.abc as abc
import contextlib
import dataclasses
import functools
import inspect
import sys
import types
import typing
import weakref
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from wf._exceptions import InputValidationError, OutputValidationError
from wf.store._limits import shown

if TYPE_CHECKING:
    from pydantic import TypeAdapter, ValidationError

__all__ = [
    "bind_input",
    "json_schema",
    "validate_arguments",
    "validate_output",
    "validate_value",
]

_P = inspect.Parameter

# --------------------------------------------------------------------------------------------------
# Type adapters


class _Unvalidated:
    """Marker: the parameter accepts anything (unannotated, ``Any``, or not resolvable)."""


_ANYTHING = _Unvalidated()


def _build_adapter(tp: Any) -> TypeAdapter[Any] | _Unvalidated:
    if tp is Any or tp is object:
        return _ANYTHING
    from pydantic import ConfigDict, PydanticUserError, TypeAdapter

    try:
        adapter: TypeAdapter[Any] = TypeAdapter(tp)
    except PydanticUserError:
        # No pydantic schema for some class in there (a socket, a user class that is not a
        # model): allow arbitrary types, which pydantic checks with isinstance.
        try:
            adapter = TypeAdapter(tp, config=ConfigDict(arbitrary_types_allowed=True))
        except Exception:
            return _ANYTHING
    except Exception:
        return _ANYTHING
    if getattr(adapter, "pydantic_complete", True) is False:
        # A forward reference pydantic cannot resolve: validating would raise on every call.
        return _ANYTHING
    return adapter


# validate_value/json_schema: one adapter per type. Types are few and long-lived (annotations), so a
# plain dict is fine; unhashable types (Annotated with unhashable metadata) are built each time.
_TYPE_ADAPTERS: dict[Any, TypeAdapter[Any] | _Unvalidated] = {}


def _adapter_for(tp: Any) -> TypeAdapter[Any] | _Unvalidated:
    try:
        cached = _TYPE_ADAPTERS.get(tp)
    except TypeError:
        return _build_adapter(tp)
    if cached is None:
        cached = _TYPE_ADAPTERS[tp] = _build_adapter(tp)
    return cached


# --------------------------------------------------------------------------------------------------
# Error messages


def _loc(loc: tuple[int | str, ...]) -> str:
    out = ""
    for part in loc:
        out += f"[{part}]" if isinstance(part, int) else (f".{part}" if out else str(part))
    return out


def _describe(exc: ValidationError) -> str:
    """One line for a pydantic ValidationError naming every failing field (up to ten)."""
    errors = exc.errors(include_url=False)
    if not errors:
        return str(exc).splitlines()[0]
    parts = []
    for error in errors[:10]:
        where = _loc(error["loc"])
        text = f"{where}: {error['msg']}" if where else error["msg"]
        if error["type"] != "missing":  # for a missing field the input is the enclosing object
            text += f" (got {shown(error['input'])})"
        parts.append(text)
    if len(errors) > 10:
        parts.append(f"and {len(errors) - 10} more")
    return " ".join("; ".join(parts).splitlines())  # a custom validator's message may span lines


# --------------------------------------------------------------------------------------------------
# Per-function validators


@dataclasses.dataclass(frozen=True, slots=True)
class _Param:
    name: str
    kind: inspect._ParameterKind
    required: bool
    adapter: TypeAdapter[Any] | _Unvalidated


def _unwrap(fn: Any) -> Any:
    # The object whose annotations and globals describe ``fn``'s parameters.
    fn = inspect.unwrap(fn)
    while isinstance(fn, functools.partial):
        fn = inspect.unwrap(fn.func)
    if isinstance(fn, types.MethodType):
        fn = fn.__func__
    if not inspect.isfunction(fn) and not isinstance(fn, type) and callable(fn):
        fn = type(fn).__call__
    return fn


def _param_types(fn: Callable[..., Any], sig: inspect.Signature) -> dict[str, Any]:
    """The resolved annotation of each annotated parameter, and of the result under
    ``"return"`` (never a parameter's name); ``Any`` where one cannot be resolved."""
    target = _unwrap(fn)
    try:
        hints: dict[str, Any] | None = typing.get_type_hints(target, include_extras=True)
    except Exception:
        hints = None  # one bad annotation: resolve the others one by one below
    globalns = getattr(target, "__globals__", None)
    if globalns is None:
        module = sys.modules.get(getattr(target, "__module__", "") or "")
        globalns = vars(module) if module is not None else {}
    out: dict[str, Any] = {}
    annotations = [(name, param.annotation) for name, param in sig.parameters.items()]
    annotations.append(("return", sig.return_annotation))
    for name, ann in annotations:
        if ann is _P.empty:
            continue
        if hints is not None and name in hints:
            out[name] = hints[name]
        elif isinstance(ann, str):
            try:
                out[name] = eval(ann, globalns)  # what get_type_hints does, for one annotation
            except Exception:
                out[name] = Any
        else:
            out[name] = ann
    return out


class _Validator:
    """Everything needed to bind and validate a call of one function, built once."""

    __slots__ = ("by_name", "names", "positional", "returns", "types", "var_args", "var_kwargs")

    def __init__(self, fn: Callable[..., Any]) -> None:
        sig = inspect.signature(fn)
        self.types = _param_types(fn, sig)
        returns = self.types.pop("return", None)
        self.returns = _ANYTHING if returns is None else _build_adapter(returns)
        """What the function's result must fit (its return annotation)."""
        self.positional: list[_Param] = []
        self.by_name: dict[str, _Param] = {}
        self.names: list[_Param] = []  # every named parameter, in order
        self.var_args: _Param | None = None
        self.var_kwargs: _Param | None = None
        for name, p in sig.parameters.items():
            tp = self.types.get(name)
            adapter = _ANYTHING if tp is None else _build_adapter(tp)
            param = _Param(name, p.kind, p.default is _P.empty, adapter)
            if p.kind is _P.VAR_POSITIONAL:
                self.var_args = param
            elif p.kind is _P.VAR_KEYWORD:
                self.var_kwargs = param
            else:
                self.names.append(param)
                if p.kind is not _P.KEYWORD_ONLY:
                    self.positional.append(param)
                if p.kind is not _P.POSITIONAL_ONLY:
                    self.by_name[name] = param

    def validate(
        self, args: tuple[Any, ...], kwargs: dict[str, Any], where: str
    ) -> tuple[tuple[Any, ...], dict[str, Any]]:
        prefix = f"input for {where}"
        npos = len(self.positional)
        # Shape first (too many, unknown, duplicate, missing), then types: the shape errors are
        # the ones a user fixes first.
        if len(args) > npos and self.var_args is None:
            takes = _count(npos, "positional argument")
            names = ", ".join(repr(p.name) for p in self.positional)
            given = f"{len(args)} {'was' if len(args) == 1 else 'were'} given"
            raise InputValidationError(
                f"{prefix}: takes {takes}{f' ({names})' if names else ''} but {given}"
            )
        for p in self.positional[: len(args)]:
            if p.name in kwargs and p.kind is not _P.POSITIONAL_ONLY:
                raise InputValidationError(
                    f"{prefix}: parameter {p.name!r} is given both by position and by name"
                )
        for name in kwargs:
            if name not in self.by_name and self.var_kwargs is None:
                if any(p.name == name for p in self.positional):
                    raise InputValidationError(
                        f"{prefix}: parameter {name!r} is positional-only; give it by position"
                    )
                known = ", ".join(repr(p.name) for p in self.names) or "none"
                raise InputValidationError(
                    f"{prefix}: unknown parameter {name!r} (parameters: {known})"
                )
        given_by_position = {p.name for p in self.positional[: len(args)]}
        missing = [
            p.name
            for p in self.names
            if p.required
            and p.name not in given_by_position
            and (p.name not in kwargs or p.kind is _P.POSITIONAL_ONLY)
        ]
        if missing:
            listed = ", ".join(repr(n) for n in missing)
            word = "parameter" if len(missing) == 1 else "parameters"
            raise InputValidationError(f"{prefix}: missing required {word} {listed}")

        out_args = []
        for i, value in enumerate(args):
            if i < npos:
                p, label = self.positional[i], repr(self.positional[i].name)
            else:
                assert self.var_args is not None
                p, label = self.var_args, f"'*{self.var_args.name}'[{i - npos}]"
            out_args.append(_check(p.adapter, value, prefix, label))
        out_kwargs = {}
        for name, value in kwargs.items():
            target = self.by_name.get(name) or self.var_kwargs
            assert target is not None  # unknown names were refused above
            out_kwargs[name] = _check(target.adapter, value, prefix, repr(name))
        return tuple(out_args), out_kwargs


def _count(n: int, noun: str) -> str:
    return f"{'no' if n == 0 else n} {noun}{'' if n == 1 else 's'}"


def _check(adapter: TypeAdapter[Any] | _Unvalidated, value: Any, prefix: str, label: str) -> Any:
    return _validated(adapter, value, InputValidationError, f"{prefix}: parameter {label}")


def _validated(
    adapter: TypeAdapter[Any] | _Unvalidated,
    value: Any,
    error: type[InputValidationError | OutputValidationError],
    where: str,
) -> Any:
    """``value`` validated (and coerced) by ``adapter``; ``error`` naming ``where`` if it does
    not fit."""
    if isinstance(adapter, _Unvalidated):
        return value
    try:
        return adapter.validate_python(value)
    except Exception as exc:
        # Imported on a failure only: a value that fits (every start's) pays no import lookup.
        from pydantic import ValidationError

        if isinstance(exc, ValidationError):
            raise error(f"{where}: {_describe(exc)}") from None
        raise


# One validator per function. Weak keys: hot reloading (wf dev) replaces functions, and the old
# ones must not be kept alive. Callables that cannot be weakly referenced get a plain dict.
_VALIDATORS: weakref.WeakKeyDictionary[Any, _Validator] = weakref.WeakKeyDictionary()
_STRONG_VALIDATORS: dict[Any, _Validator] = {}


def _validator_for(fn: Callable[..., Any]) -> _Validator:
    try:
        validator = _VALIDATORS.get(fn)
        weak = True
    except TypeError:
        validator = _STRONG_VALIDATORS.get(fn)
        weak = False
    if validator is None:
        validator = _Validator(fn)
        if weak:
            _VALIDATORS[fn] = validator
        else:
            _STRONG_VALIDATORS[fn] = validator
    return validator


# --------------------------------------------------------------------------------------------------
# Public API


def prepare_validator(fn: Callable[..., Any]) -> None:
    """Build ``fn``'s validator now rather than at its first call (a worker before it serves:
    the first validator of a process also pays for pydantic's start-up). A signature that
    cannot be prepared is left to the first call, which reports it."""
    with contextlib.suppress(Exception):
        _validator_for(fn)


def validate_arguments(
    fn: Callable[..., Any], args: tuple[Any, ...], kwargs: dict[str, Any], *, where: str
) -> tuple[tuple[Any, ...], dict[str, Any]]:
    """Validate and coerce a call's arguments against ``fn``'s annotations; return new ones.

    ``where`` names the workflow, e.g. ``"workflow 'shop:order'"``. The result has the same shape
    as the input (positional stays positional, defaults are not filled in), with every annotated
    argument validated by pydantic in lax mode. ``*args`` and ``**kwargs`` parameters take the
    extra arguments, validated against their annotation. Raises ``InputValidationError`` with a
    one-line message — too many positional arguments, an unknown or missing parameter, or a value
    that does not fit, e.g. ``input for workflow 'shop:order': parameter 'qty': Input should be a
    valid integer, unable to parse string as an integer (got 'abc')``.
    """
    return _validator_for(fn).validate(tuple(args), dict(kwargs), where)


def validate_output(fn: Callable[..., Any], value: Any, *, where: str) -> Any:
    """Validate and coerce ``fn``'s result against its return annotation, as
    ``validate_arguments`` does its arguments (lax mode; an unannotated or unresolvable result
    accepts anything). Raises ``OutputValidationError`` with a one-line message naming each
    failing field, e.g. ``output of workflow 'shop:order': total: Input should be a valid
    number (got 'n/a')``.
    """
    returns = _validator_for(fn).returns
    return _validated(returns, value, OutputValidationError, f"output of {where}")


def validate_value(tp: Any, value: Any, *, where: str) -> Any:
    """Validate and coerce one value against type ``tp`` (e.g. a hook's payload type).

    ``where`` names the value, e.g. ``"payload of hook 'approve'"``. The validator is cached per
    type. Raises ``InputValidationError`` on a mismatch.
    """
    return _validated(_adapter_for(tp), value, InputValidationError, where)


def unschemed(tp: Any) -> Any | None:
    """The class in ``tp`` (``tp`` itself, or a type inside it) that neither pydantic has a
    schema for nor wf's codec stores (a plain class): no payload can be validated into it, nor
    an instance of it stored. None when there is none. A class the codec stores that pydantic
    only checks with ``isinstance`` (``bytearray``) is carried: a payload of it is sent as one
    (``wf.resume_hook``) and stored tagged."""
    if tp is Any or tp is object:
        return None
    try:
        cached = _UNSCHEMED.get(tp, _UNKNOWN)
    except TypeError:
        return _unschemed(tp, 0, set())
    if cached is _UNKNOWN:
        cached = _UNSCHEMED[tp] = _unschemed(tp, 0, set())
    return cached


_UNKNOWN = object()
_UNSCHEMED: dict[Any, Any] = {}


def _unschemed(tp: Any, depth: int, seen: set[int]) -> Any | None:
    import typing

    from pydantic import PydanticSchemaGenerationError, TypeAdapter

    from wf.engine._codec import stores_class

    if tp is Any or tp is object or tp is Ellipsis or depth > 8:
        return None
    try:
        TypeAdapter(tp)
    except PydanticSchemaGenerationError:
        pass
    except Exception:  # an unresolved forward reference, …: validated as anything, not refused
        return None
    else:
        return None
    if isinstance(tp, type) and typing.get_origin(tp) is None:
        if not stores_class(tp):
            return tp
        if id(tp) in seen:
            return None  # a type that holds itself: looked into already
        seen.add(id(tp))
        # A dataclass or named tuple the codec stores only if its fields can be: look into them.
        return _unschemed_parts(_field_types(tp), depth, seen)
    parts = typing.get_args(tp)
    origin = typing.get_origin(tp)
    if origin is typing.Annotated:
        parts = parts[:1]
    found = _unschemed_parts(parts, depth, seen)
    if found is not None:
        return found
    if not parts and origin is None:
        return tp  # pydantic refuses it and it holds no part wf could name: as itself
    return None


def _unschemed_parts(parts: Any, depth: int, seen: set[int]) -> Any | None:
    import typing

    for part in parts:
        if isinstance(part, type) or typing.get_origin(part) is not None:
            found = _unschemed(part, depth + 1, seen)
            if found is not None:
                return found
    return None


def _field_types(cls: type) -> tuple[Any, ...]:
    """The annotated types of the fields of the dataclass or named tuple ``cls`` (none for
    other classes, or if its annotations do not resolve: then they are not looked into)."""
    import dataclasses
    import typing

    if dataclasses.is_dataclass(cls):
        names = [f.name for f in dataclasses.fields(cls)]
    elif issubclass(cls, tuple) and hasattr(cls, "_fields"):
        names = list(cls._fields)
    else:
        return ()
    try:
        hints = typing.get_type_hints(cls)
    except Exception:  # a forward reference that does not resolve, …
        return ()
    return tuple(hints[name] for name in names if name in hints)


def json_schema(tp: Any) -> dict[str, Any] | None:
    """The pydantic JSON schema of type ``tp``, or ``None`` if none can be produced."""
    if tp is Any or tp is object:
        return {}  # the schema that accepts anything
    adapter = _adapter_for(tp)
    if isinstance(adapter, _Unvalidated):
        return None
    try:
        return adapter.json_schema()
    except Exception:  # arbitrary classes, callables, …: no JSON schema
        return None


def bind_input(fn: Callable[..., Any], data: Any) -> tuple[tuple[Any, ...], dict[str, Any]]:
    """Turn ``wf run --input`` JSON (already decoded) into ``(args, kwargs)`` for ``fn``.

    ``None`` gives no arguments, an object maps parameters by name, an array gives them by
    position, and any other value is the single argument. A *sole* parameter (the only one, with
    no ``*args``/``**kwargs``) annotated as an object type takes a whole object that has no key
    named after it; one annotated as an array type takes a whole array. See the module docstring.
    Nothing is validated here: pass the result to ``validate_arguments``.
    """
    if data is None:
        return (), {}
    validator = _validator_for(fn)
    sole = _sole_parameter(validator)
    sole_type = validator.types.get(sole.name, Any) if sole is not None else Any
    if isinstance(data, dict):
        if sole is not None and sole.name not in data and _accepts(sole_type, _is_object_type):
            return _single(sole, data)
        return (), dict(data)
    if isinstance(data, list):
        if sole is not None and _accepts(sole_type, _is_array_type):
            return _single(sole, data)
        return tuple(data), {}
    if sole is not None:
        return _single(sole, data)
    return (data,), {}


def _sole_parameter(validator: _Validator) -> _Param | None:
    if len(validator.names) != 1 or validator.var_args or validator.var_kwargs:
        return None
    return validator.names[0]


def _single(param: _Param, value: Any) -> tuple[tuple[Any, ...], dict[str, Any]]:
    if param.kind is _P.KEYWORD_ONLY:
        return (), {param.name: value}
    return (value,), {}


def _accepts(tp: Any, test: Callable[[Any], bool]) -> bool:
    # Look through Annotated[...], Optional[...] and unions: any member that passes counts.
    origin = typing.get_origin(tp)
    if origin is typing.Annotated:
        return _accepts(typing.get_args(tp)[0], test)
    if origin is typing.Union or origin is types.UnionType:
        return any(_accepts(arg, test) for arg in typing.get_args(tp))
    return test(tp)


_OBJECT_ORIGINS = (dict, abc.Mapping, abc.MutableMapping, collections.OrderedDict)
_ARRAY_ORIGINS = (
    list,
    tuple,
    set,
    frozenset,
    collections.deque,
    abc.Sequence,
    abc.MutableSequence,
    abc.Set,
    abc.MutableSet,
    abc.Collection,
    abc.Iterable,
)


def _is_object_type(tp: Any) -> bool:
    origin = typing.get_origin(tp) or tp
    if origin in _OBJECT_ORIGINS:
        return True
    if not isinstance(tp, type):
        return False
    if issubclass(tp, abc.Mapping) or typing.is_typeddict(tp) or dataclasses.is_dataclass(tp):
        return True
    pydantic = sys.modules.get("pydantic")
    return pydantic is not None and issubclass(tp, pydantic.BaseModel)


def _is_array_type(tp: Any) -> bool:
    origin = typing.get_origin(tp) or tp
    if origin in _ARRAY_ORIGINS:
        return True
    # A named tuple (or other tuple/list subclass), but never str or bytes, which are sequences
    # too yet arrive as JSON strings.
    return isinstance(tp, type) and issubclass(tp, tuple | list)
