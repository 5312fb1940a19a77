"""Tagged JSON: how wf stores inputs, step results, hook payloads and outputs so they round-trip.

``encode`` turns a Python value into JSON-able data (``dict`` with ``str`` keys, ``list``, ``str``,
``int``, ``float``, ``bool``, ``None``); ``decode`` is its exact inverse, giving back a value of the
same type and equal to the original. ``dumps``/``loads`` turn encoded data into compact JSON bytes
and back (one journal line).

Plain JSON stays plain, so stored journals remain readable: a ``str``, a ``bool``, ``None``, an
``int`` within signed 64 bits, a finite ``float``, a ``list``, and a ``dict`` whose keys are all
``str`` (none of them ``"$t"``) encode as themselves (containers are copied, their items encoded).

Every other supported value becomes a *tagged object*: a JSON object whose ``"$t"`` member names
the type. Because a user dict that has a ``"$t"`` key is always escaped (see ``dict`` below), a
``"$t"`` member can only ever come from the encoder. The tags:

==============  ==============================================================================
``$t``          other members
==============  ==============================================================================
``int``         ``v``: the integer in decimal (``"0x…"`` hex beyond Python's 4300-digit limit);
                for ints outside ``[-2**63, 2**63)``, which JSON readers (and orjson) lose
``float``       ``v``: ``"nan"``, ``"inf"`` or ``"-inf"`` (``-0.0`` is plain JSON and stays so)
``datetime``    ``v``: ``isoformat()`` (offset included when aware); ``tz``: the IANA key when the
                tzinfo is a ``zoneinfo.ZoneInfo``; ``fold``: ``1`` when ``fold`` is set.
                Other tzinfo classes are stored as their fixed UTC offset (same instant and wall
                time, a ``datetime.timezone`` on the way back)
``date``        ``v``: ``isoformat()``
``time``        ``v``: ``isoformat()``; ``tz`` and ``fold`` as for ``datetime``
``timedelta``   ``v``: ``[days, seconds, microseconds]`` (exact integers)
``decimal``     ``v``: ``str(value)`` (exact: digits, exponent, sign, NaN, Infinity)
``uuid``        ``v``: the canonical hyphenated string
``bytes``       ``v``: standard base64 (``bytearray`` likewise, tagged ``bytearray``)
``str``         ``v``: base64 of the text's UTF-8 with lone surrogates kept (``surrogatepass``):
                only for a ``str`` holding lone surrogates (as ``os.fsdecode`` gives for an
                undecodable file name), which is not valid UTF-8 and no JSON store takes;
                a dict key holding them makes the dict a ``map``
``tuple``       ``v``: list of encoded items (``set``, ``frozenset`` likewise; their items are
                sorted when they are mutually orderable, so equal sets encode identically)
``map``         ``v``: list of ``[key, value]`` pairs, both encoded: a dict with a non-str key
``dict``        ``v``: an object whose keys are taken literally (never read as a tag) and whose
                values are encoded: the escape for a user dict that has a ``"$t"`` key
``enum``        ``cls``: ``"module:qualname"``; ``v``: the encoded member value
``dataclass``   ``cls``; ``v``: object of the encoded fields (rebuilt by calling the class with its
                ``init`` fields, then setting ``init=False`` fields as recorded)
``namedtuple``  ``cls``; ``v``: object of the encoded fields
``model``       ``cls``; ``v``: the encoded ``model_dump(mode="python", round_trip=True)``, rebuilt
                with ``model_validate``. A model holding a value only pydantic can serialize
                (``HttpUrl``, ``Path``, …) is stored instead as ``json``: its encoded
                ``model_dump(mode="json", round_trip=True)``, rebuilt with
                ``model_validate_json`` — provided that form rebuilds an equal model (a
                ``SecretStr`` dumps masked, so such a model is refused, not stored lossily)
==============  ==============================================================================

Example: ``{"at": datetime(2026, 1, 2, 3, 4, 5, 1, tzinfo=UTC), "n": 1}`` encodes as
``{"at": {"$t": "datetime", "v": "2026-01-02T03:04:05.000001+00:00"}, "n": 1}``.

Types are matched exactly: a subclass of a builtin (an ``OrderedDict``, a ``numpy.float64``) is not
silently stored as its base type, because the replayed value would then differ in type from the
original. Enums, named tuples, dataclasses and pydantic models are the supported user classes;
their class must be importable as ``module:qualname``, which is checked when encoding, so that a
class that could never be found again fails at once rather than at replay.

Decoding resolves a class reference only to a module this process has imported already (or one
trusted with ``trust_modules`` / ``WF_TRUSTED_MODULES``): stored data never makes wf import a
module of its choosing. Any other reference decodes to plain data, with a warning.

Anything else — functions, sockets, locks, generators, arbitrary objects — raises
``ValueEncodingError`` at once, naming where the value came from and its type. Reference cycles and
nesting deeper than orjson can store (about 255 levels of output) raise it too. Nothing is ever
pickled, and
decoding only ever instantiates enum, dataclass, named-tuple and pydantic-model classes.
"""

from __future__ import annotations

import base64
import dataclasses
import datetime as _dt
import enum
import importlib
import json
import logging
import os
import re
import sys
import uuid
from collections.abc import Callable, Coroutine
from decimal import Decimal
from typing import Any, NoReturn
from zoneinfo import ZoneInfo

import orjson

from wf._exceptions import ValueEncodingError

__all__ = ["decode", "dumps", "encode", "loads"]

_TAG = "$t"


def _orjson_max_depth() -> int:
    """How many nested containers the installed orjson serializes (255 in 3.8, 254 in 3.13)."""
    low, high = 1, 1024  # low always works; find the largest depth that still does
    while low < high:
        middle = (low + high + 1) // 2
        value: Any = 0
        for _ in range(middle):
            value = [value]
        try:
            orjson.dumps(value)
        except orjson.JSONEncodeError:
            high = middle - 1
        else:
            low = middle
    return low


# orjson refuses to serialize containers nested beyond a fixed limit, which changed between
# versions: encode enforces the installed one, so that whatever encodes can also be dumped.
_MAX_DEPTH = _orjson_max_depth()

# Positions of a path segment shown in error messages; a cycle's path repeats forever.
_MAX_PATH_SHOWN = 12


# --------------------------------------------------------------------------------------------------
# Encoding errors. The recursive encoder raises _Unencodable, which collects the path on its way up
# (zero cost on the happy path: try/except is free in 3.11 until something raises); ``encode`` turns
# it into a ValueEncodingError naming ``where``.


class _Unencodable(Exception):
    def __init__(self, kind: str, type_name: str = "", reason: str = "") -> None:
        super().__init__(type_name)
        self.kind = kind  # "type": a value wf cannot store; "deep": the depth limit was reached
        self.type_name = type_name
        self.reason = reason
        self.path: list[str] = []  # innermost first
        self.ids: list[int] = []  # ids of the containers on the path, to tell a cycle from depth

    def push(self, segment: str, container: object) -> None:
        self.path.append(segment)
        self.ids.append(id(container))

    def message(self, where: str) -> str:
        path = self.path[::-1]
        if self.kind == "deep":
            # Outermost first: segment k leads out of container ids[k]. A container met twice on
            # one path contains itself; show the shortest such loop.
            ids = self.ids[::-1]
            seen: dict[int, int] = {}
            for j, ident in enumerate(ids):
                i = seen.setdefault(ident, j)
                if i != j:
                    at = _show(path[:i]) or "the top level"
                    loop = _show(path[i:j])
                    return (
                        f"{where} contains a reference cycle (the container at {at} contains "
                        f"itself through {loop}), which wf cannot store"
                    )
            return (
                f"{where} is nested more than {_MAX_DEPTH} levels deep once encoded, "
                "which wf cannot store"
            )
        article = "an" if self.type_name[:1].lower() in "aeiou" else "a"
        if not path:
            return f"{where} is {article} {self.type_name}, which wf cannot store: {self.reason}"
        return (
            f"{where} contains {article} {self.type_name} at {_show(path)}, which wf cannot store: "
            f"{self.reason}"
        )


def _show(path: list[str]) -> str:
    if len(path) > _MAX_PATH_SHOWN:
        path = [*path[:_MAX_PATH_SHOWN], "…"]
    return "".join(path)


def _type_name(tp: type) -> str:
    # Fully qualified, except for builtins ("function", not "builtins.function").
    if tp.__module__ == "builtins":
        return tp.__qualname__
    return f"{tp.__module__}.{tp.__qualname__}"


_BUILTIN_BASES = (str, int, float, dict, list, tuple, set, frozenset, bytes, bytearray)


def _unsupported(value: object) -> NoReturn:
    if isinstance(value, Coroutine):
        # Almost always a step or workflow called without `await`: say so, not "a coroutine".
        label = getattr(value, "wf_label", None) or f"coroutine ({_type_name(type(value))})"
        value.close()  # reported here; no second "never awaited" warning when it is collected
        raise _Unencodable(
            "type",
            f"un-awaited {label}",
            "did you forget `await`? (wf help await)",
        )
    reason = (
        "store plain data instead (JSON types, datetime, date, time, timedelta, Decimal, UUID, "
        "bytes, tuple, set, frozenset, enums, dataclasses, named tuples or pydantic models)"
    )
    for base in _BUILTIN_BASES:
        if isinstance(value, base):
            # Exact types only: a subclass would come back as its base type on replay.
            reason = f"convert it to a plain {base.__name__} first"
            break
    raise _Unencodable("type", _type_name(type(value)), reason)


def _too_deep() -> NoReturn:
    raise _Unencodable("deep")


# --------------------------------------------------------------------------------------------------
# Class references ("module:qualname"), checked once per class when encoding so that a class that
# could never be found again (defined in a function, not reachable by its name) fails now, with the
# step that produced it, rather than at replay in another process.

_CLASS_REFS: dict[type, str] = {}


def _class_ref(cls: type) -> str:
    ref = _CLASS_REFS.get(cls)
    if ref is not None:
        return ref
    module_name, qualname = cls.__module__, cls.__qualname__
    if "<locals>" in qualname:
        problem = "it is defined inside a function; define it at module level"
    else:
        found: Any = sys.modules.get(module_name)
        try:
            for part in qualname.split("."):
                found = getattr(found, part)
        except Exception:  # a module __getattr__ may raise anything
            found = None
        if found is cls:
            ref = _CLASS_REFS[cls] = f"{module_name}:{qualname}"
            return ref
        problem = f"it cannot be found again as {module_name}:{qualname}"
    raise _Unencodable("type", _type_name(cls), problem)


# --------------------------------------------------------------------------------------------------
# Which modules stored data may name. A class reference is data: whoever can write to the store
# (or hand wf a journal) chooses it. Importing the module it names would run that module's code
# — a ``shop.py`` planted in the directory a command runs from, say. So a reference resolves only
# to a module this process has imported already (the workflow's own modules, imported when its
# code was loaded, and everything they import), or to one the program trusts explicitly
# (``trust_modules``, or ``WF_TRUSTED_MODULES=pkg,other.pkg``). Anything else decodes to plain
# data (a dataclass to the dict of its fields, an enum to its value) with a warning.

TRUSTED_ENV = "WF_TRUSTED_MODULES"
_trusted: set[str] = set()
_warned: set[str] = set()
log = logging.getLogger("wf")


def trust_modules(*names: str) -> None:
    """Let stored class references import these modules (and their submodules) when this
    process has not imported them yet. Without it, only modules already imported resolve."""
    _trusted.update(names)


def _is_trusted(name: str) -> bool:
    names = _trusted | {n.strip() for n in os.environ.get(TRUSTED_ENV, "").split(",") if n.strip()}
    return any(name == n or name.startswith(n + ".") for n in names)


def trusted_module(name: str) -> Any:
    """The module ``name`` if this process imported it already, or imports it if it is
    trusted (``trust_modules``); None otherwise. Raises what the import of a trusted module
    raises."""
    module = sys.modules.get(name)
    if module is not None or not _is_trusted(name):
        return module
    return importlib.import_module(name)


def untrusted(ref: str, what: str) -> None:
    """Warn (once per reference) that a stored ``ref`` was not resolved: its module is not
    imported here and not trusted."""
    if ref in _warned:
        return
    _warned.add(ref)
    log.warning(
        "warning: %s of type %s decoded as plain data: its module is not imported by this "
        "process (import it first, or trust it with %s)",
        what,
        ref,
        TRUSTED_ENV,
    )


class _Untrusted(Exception):
    """A class reference to a module that is neither imported nor trusted."""


def _resolve(ref: str, kind: str, check: Callable[[Any], bool]) -> Any:
    module_name, sep, qualname = ref.partition(":") if isinstance(ref, str) else ("", "", "")
    if not sep or not module_name or not qualname:
        raise ValueEncodingError(
            f"cannot decode a stored {kind}: malformed class reference {ref!r}"
        )
    try:
        module = trusted_module(module_name)
    except Exception as exc:
        raise ValueEncodingError(
            f"cannot decode a stored {kind} of type {ref}: module {module_name!r} cannot be "
            f"imported ({type(exc).__name__}: {exc})"
        ) from exc
    if module is None:
        untrusted(ref, f"a stored {kind}")
        raise _Untrusted(ref)
    obj: Any = module
    try:
        for part in qualname.split("."):
            obj = getattr(obj, part)
    except AttributeError:
        raise ValueEncodingError(
            f"cannot decode a stored {kind} of type {ref}: module {module_name!r} has no "
            f"{qualname!r} (was it renamed or removed?)"
        ) from None
    if not check(obj):
        from wf.store._limits import with_article

        raise ValueEncodingError(
            f"cannot decode a stored {kind} of type {ref}: {ref} is no longer "
            f"{with_article(kind)} class"
        )
    return obj


# --------------------------------------------------------------------------------------------------
# Encoding


def encode(value: Any, *, where: str = "a value") -> Any:
    """Encode ``value`` as tagged JSON-able data (see the module docstring for the format).

    ``where`` says where the value comes from, for error messages (e.g. ``"result of step
    'charge'"``). Raises ``ValueEncodingError`` naming ``where`` and the offending type for a value
    wf cannot store, a reference cycle, or nesting too deep for JSON.
    """
    try:
        return _enc(value, 0)
    except _Unencodable as exc:
        raise ValueEncodingError(exc.message(where)) from None
    except RecursionError:
        # Only reachable when encode is itself called near the interpreter's recursion limit.
        raise ValueEncodingError(f"{where} is nested too deeply to store") from None


def _enc(v: Any, d: int) -> Any:
    # ``d`` counts the output containers that will enclose the result (at most _MAX_DEPTH).
    # The plain-JSON cases come first and are tested by exact type: this is every step's hot path.
    t = type(v)
    if t is str:
        # isascii() is O(1); only non-ASCII text is searched for lone surrogates.
        if v.isascii() or _SURROGATE.search(v) is None:
            return v
        return _enc_surrogates(v, d)
    if t is bool or v is None:
        return v
    if t is int:
        if -0x8000000000000000 <= v <= 0x7FFFFFFFFFFFFFFF:
            return v
        return _enc_bigint(v, d)
    if t is float:
        if v - v == 0.0:  # finite (nan - nan and inf - inf are nan); cheaper than math.isfinite
            return v
        return _enc_float(v, d)
    if t is dict:
        if d >= _MAX_DEPTH:
            _too_deep()
        if _TAG in v:
            return _enc_escaped(v, d)
        out = {}
        d1 = d + 1
        k: Any = None
        try:
            for k, x in v.items():
                if type(k) is not str or (not k.isascii() and _SURROGATE.search(k)):
                    break
                tx = type(x)
                # Leaves inlined (int included: it is common) to save a call per item.
                if (
                    (tx is str and x.isascii())
                    or tx is bool
                    or x is None
                    or (tx is int and -0x8000000000000000 <= x <= 0x7FFFFFFFFFFFFFFF)
                ):
                    out[k] = x
                else:
                    out[k] = _enc(x, d1)
            else:
                return out
        except _Unencodable as exc:
            exc.push(f"[{k!r}]", v)
            raise
        # A non-str key (or one with lone surrogates): the dict becomes a list of pairs.
        return _enc_map(v, d)
    if t is list:
        if d >= _MAX_DEPTH:
            _too_deep()
        res: list[Any] = []
        append = res.append
        d1 = d + 1
        try:
            for x in v:
                tx = type(x)
                if (
                    (tx is str and x.isascii())
                    or tx is bool
                    or x is None
                    or (tx is int and -0x8000000000000000 <= x <= 0x7FFFFFFFFFFFFFFF)
                ):
                    append(x)
                else:
                    append(_enc(x, d1))
        except _Unencodable as exc:
            exc.push(f"[{len(res)}]", v)
            raise
        return res
    enc = _ENCODERS.get(t)
    if enc is not None:
        return enc(v, d)
    return _enc_object(v, d)


def _enc_bigint(v: int, d: int) -> Any:
    if d >= _MAX_DEPTH:
        _too_deep()
    try:
        text = str(v)
    except ValueError:
        # Beyond sys.get_int_max_str_digits(); hex conversion has no such limit.
        text = hex(v)
    return {_TAG: "int", "v": text}


def _enc_float(v: float, d: int) -> Any:
    if d >= _MAX_DEPTH:
        _too_deep()
    if v != v:
        return {_TAG: "float", "v": "nan"}
    return {_TAG: "float", "v": "inf" if v > 0 else "-inf"}


def _enc_items(items: Any, d: int, container: object) -> list[Any]:
    # Items of a tagged sequence; they sit two levels down (the tag object, then its list).
    out: list[Any] = []
    try:
        for x in items:
            out.append(_enc(x, d))
    except _Unencodable as exc:
        exc.push(f"[{len(out)}]", container)
        raise
    return out


def _enc_tuple(v: tuple[Any, ...], d: int) -> Any:
    if d + 1 >= _MAX_DEPTH:
        _too_deep()
    return {_TAG: "tuple", "v": _enc_items(v, d + 2, v)}


def _sorted_if_possible(v: set[Any] | frozenset[Any]) -> list[Any]:
    # Set iteration order depends on hashing (randomised for str), so sort when possible to make
    # equal sets encode to identical JSON; mixed, unorderable members keep iteration order.
    try:
        return sorted(v)
    except TypeError:
        return list(v)


def _enc_set(v: set[Any], d: int) -> Any:
    if d + 1 >= _MAX_DEPTH:
        _too_deep()
    return {_TAG: "set", "v": _enc_items(_sorted_if_possible(v), d + 2, v)}


def _enc_frozenset(v: frozenset[Any], d: int) -> Any:
    if d + 1 >= _MAX_DEPTH:
        _too_deep()
    return {_TAG: "frozenset", "v": _enc_items(_sorted_if_possible(v), d + 2, v)}


def _enc_map(v: dict[Any, Any], d: int) -> Any:
    if d + 2 >= _MAX_DEPTH:
        _too_deep()
    pairs = []
    d3 = d + 3
    k: Any = None
    try:
        for k, x in v.items():
            pairs.append([_enc(k, d3), _enc(x, d3)])
    except _Unencodable as exc:
        exc.push(f"[{k!r}]", v)
        raise
    return {_TAG: "map", "v": pairs}


def _enc_surrogates(v: str, d: int) -> Any:
    if d >= _MAX_DEPTH:
        _too_deep()
    # Lone surrogates (``os.fsdecode`` of an undecodable file name) are not UTF-8, so no JSON
    # writer or PostgreSQL jsonb takes them: store the exact code points as bytes instead.
    return {_TAG: "str", "v": _b64(v.encode("utf-8", "surrogatepass"))}


def _enc_escaped(v: dict[Any, Any], d: int) -> Any:
    if any(type(k) is not str or _SURROGATE.search(k) for k in v):
        return _enc_map(v, d)
    if d + 1 >= _MAX_DEPTH:
        _too_deep()
    out = {}
    d2 = d + 2
    k: Any = None
    try:
        for k, x in v.items():
            out[k] = _enc(x, d2)
    except _Unencodable as exc:
        exc.push(f"[{k!r}]", v)
        raise
    return {_TAG: "dict", "v": out}


def _leaf(tag: str, text: Callable[[Any], Any]) -> Callable[[Any, int], Any]:
    def enc(v: Any, d: int) -> Any:
        if d >= _MAX_DEPTH:
            _too_deep()
        return {_TAG: tag, "v": text(v)}

    return enc


def _tz_extras(out: dict[str, Any], v: _dt.datetime | _dt.time) -> dict[str, Any]:
    tz = v.tzinfo
    if isinstance(tz, ZoneInfo) and tz.key is not None:
        out["tz"] = tz.key
    if v.fold:
        out["fold"] = 1
    return out


def _enc_datetime(v: _dt.datetime, d: int) -> Any:
    if d >= _MAX_DEPTH:
        _too_deep()
    return _tz_extras({_TAG: "datetime", "v": v.isoformat()}, v)


def _enc_time(v: _dt.time, d: int) -> Any:
    if d >= _MAX_DEPTH:
        _too_deep()
    return _tz_extras({_TAG: "time", "v": v.isoformat()}, v)


def _enc_timedelta(v: _dt.timedelta, d: int) -> Any:
    if d + 1 >= _MAX_DEPTH:
        _too_deep()
    return {_TAG: "timedelta", "v": [v.days, v.seconds, v.microseconds]}


def _b64(v: bytes | bytearray) -> str:
    return base64.b64encode(v).decode("ascii")


_ENCODERS: dict[type, Callable[[Any, int], Any]] = {
    tuple: _enc_tuple,
    set: _enc_set,
    frozenset: _enc_frozenset,
    _dt.datetime: _enc_datetime,
    _dt.date: _leaf("date", _dt.date.isoformat),
    _dt.time: _enc_time,
    _dt.timedelta: _enc_timedelta,
    Decimal: _leaf("decimal", str),
    uuid.UUID: _leaf("uuid", str),
    bytes: _leaf("bytes", _b64),
    bytearray: _leaf("bytearray", _b64),
}


def stores_class(cls: Any) -> bool:
    """Whether ``encode`` stores instances of the class ``cls``: plain JSON types, the types it
    tags (``bytearray``, ``datetime``, ``Decimal``, ``UUID``, ``set``, …), enums, named tuples,
    dataclasses and pydantic models."""
    if not isinstance(cls, type):
        return False
    if cls in _ENCODERS or cls in (str, int, float, bool, type(None), list, dict):
        return True
    if issubclass(cls, enum.Enum) or hasattr(cls, "__dataclass_fields__"):
        return True
    if issubclass(cls, tuple) and hasattr(cls, "_fields") and hasattr(cls, "_make"):
        return True
    pydantic = sys.modules.get("pydantic")
    return pydantic is not None and issubclass(cls, pydantic.BaseModel)


# Per dataclass: (class ref, names of init fields, names of init=False fields).
_DATACLASS_INFO: dict[type, tuple[str, tuple[str, ...], tuple[str, ...]]] = {}


def _dataclass_info(cls: type) -> tuple[str, tuple[str, ...], tuple[str, ...]]:
    info = _DATACLASS_INFO.get(cls)
    if info is None:
        fields = dataclasses.fields(cls)
        info = (
            _class_ref(cls),
            tuple(f.name for f in fields if f.init),
            tuple(f.name for f in fields if not f.init),
        )
        _DATACLASS_INFO[cls] = info
    return info


def _enc_fields(v: object, names: tuple[str, ...], d: int) -> dict[str, Any]:
    out: dict[str, Any] = {}
    name = ""
    try:
        for name in names:
            try:
                x = getattr(v, name)
            except AttributeError:
                continue  # an init=False field never set: leave it unset on the way back too
            out[name] = _enc(x, d)
    except _Unencodable as exc:
        exc.push(f".{name}", v)
        raise
    return out


def _enc_object(v: Any, d: int) -> Any:
    # Everything that is not an exact builtin type: the user classes wf knows how to rebuild.
    t = type(v)
    if d + 1 >= _MAX_DEPTH:
        _too_deep()
    if isinstance(v, enum.Enum):
        ref = _class_ref(t)
        try:
            value = _enc(v.value, d + 1)
        except _Unencodable as exc:
            exc.push(".value", v)
            raise
        return {_TAG: "enum", "cls": ref, "v": value}
    if isinstance(v, tuple) and hasattr(t, "_fields") and hasattr(t, "_make"):
        ref = _class_ref(t)
        return {_TAG: "namedtuple", "cls": ref, "v": _enc_fields(v, t._fields, d + 2)}
    if hasattr(t, "__dataclass_fields__") and not isinstance(v, type):
        ref, init_names, other_names = _dataclass_info(t)
        fields = _enc_fields(v, init_names + other_names, d + 2)
        return {_TAG: "dataclass", "cls": ref, "v": fields}
    # pydantic is imported lazily by wf (it is slow to import); if it is not imported yet, no
    # model instance can exist.
    pydantic = sys.modules.get("pydantic")
    if pydantic is not None and isinstance(v, pydantic.BaseModel):
        return _enc_model(v, d)
    _unsupported(v)


def _model_validate_kwargs() -> dict[str, Any]:
    # pydantic >= 2.11 can validate by field name even when fields have aliases; older versions
    # need the data dumped by alias instead.
    import inspect

    from pydantic import BaseModel

    if "by_name" in inspect.signature(BaseModel.model_validate).parameters:
        return {"by_name": True}
    return {}


_MODEL_VALIDATE_KW: dict[str, Any] | None = None


def _validate_kw() -> dict[str, Any]:
    global _MODEL_VALIDATE_KW
    if _MODEL_VALIDATE_KW is None:
        _MODEL_VALIDATE_KW = _model_validate_kwargs()
    return _MODEL_VALIDATE_KW


def _enc_model(v: Any, d: int) -> Any:
    ref = _class_ref(type(v))
    by_alias = not _validate_kw()
    try:
        # round_trip=True: Json[...] fields dump as JSON text and computed fields are left out,
        # so that model_validate accepts what model_dump gives.
        dumped = v.model_dump(mode="python", round_trip=True, by_alias=by_alias)
    except Exception as exc:
        raise _Unencodable(
            "type", _type_name(type(v)), f"pydantic could not dump it ({exc})"
        ) from None
    try:
        return {_TAG: "model", "cls": ref, "v": _enc(dumped, d + 1)}
    except _Unencodable as exc:
        if exc.kind != "type":
            raise
        # A field holds something only pydantic knows how to serialize (HttpUrl, SecretStr, …):
        # fall back to pydantic's own JSON round trip for this model.
        try:
            as_json = v.model_dump(mode="json", round_trip=True, by_alias=by_alias)
            # Check the round trip now rather than lose data at replay: a SecretStr, for one,
            # dumps as "**********".
            same = _model_from_json(type(v), as_json) == v
        except Exception:
            raise exc from None
        if not same:
            exc.reason = "pydantic cannot store it exactly: its JSON form does not round-trip"
            raise exc from None
        return {_TAG: "model", "cls": ref, "json": _enc(as_json, d + 1)}


# --------------------------------------------------------------------------------------------------
# Decoding


def decode(data: Any) -> Any:
    """Rebuild the value that ``encode`` turned into ``data``; the inverse of ``encode``.

    Raises ``ValueEncodingError`` for an unknown or malformed tag, or when a stored class cannot be
    imported or rebuilt any more (the message names the type, e.g. ``shop:Order``).
    """
    kind = type(data)
    if kind is not dict and kind is not list:
        return data  # a JSON scalar stands for itself (most step results): no walk, no call
    try:
        return _dec(data)
    except RecursionError:
        raise ValueEncodingError("cannot decode a stored value: nested too deeply") from None


def _dec(x: Any) -> Any:
    t = type(x)
    if t is dict:
        tag = x.get(_TAG)
        if tag is None:
            out = {}
            for k, y in x.items():
                ty = type(y)
                if ty is str or ty is int or ty is bool or y is None or ty is float:
                    out[k] = y
                else:
                    out[k] = _dec(y)
            return out
        dec = _DECODERS.get(tag) if type(tag) is str else None
        if dec is None:
            raise ValueEncodingError(f"cannot decode a stored value: unknown type tag {tag!r}")
        try:
            return dec(x)
        except ValueEncodingError:
            raise
        except Exception as exc:
            what = f"{tag} {x['cls']}" if isinstance(x.get("cls"), str) else tag
            raise ValueEncodingError(
                f"cannot decode a stored {what}: {type(exc).__name__}: {exc}"
            ) from exc
    if t is list:
        res: list[Any] = []
        append = res.append
        for y in x:
            ty = type(y)
            if ty is str or ty is int or ty is bool or y is None or ty is float:
                append(y)
            else:
                append(_dec(y))
        return res
    return x


def _dec_float(x: dict[str, Any]) -> float:
    text = x["v"]
    if text not in ("nan", "inf", "-inf"):
        raise ValueError(f"not a special float: {text!r}")
    return float(text)


def _with_tz(value: Any, x: dict[str, Any]) -> Any:
    key = x.get("tz")
    if key is not None:
        # The stored text carries the wall time; put the named zone back in place of the offset.
        value = value.replace(tzinfo=ZoneInfo(key))
    if x.get("fold"):
        value = value.replace(fold=1)
    return value


def _dec_timedelta(x: dict[str, Any]) -> _dt.timedelta:
    days, seconds, micros = x["v"]
    return _dt.timedelta(days=days, seconds=seconds, microseconds=micros)


def _dec_int(x: dict[str, Any]) -> int:
    text = x["v"]
    if not isinstance(text, str):
        raise TypeError("int text must be a string")
    return int(text, 0)  # accepts both the decimal and the "0x…" spelling


def _dec_dict(x: dict[str, Any]) -> dict[str, Any]:
    return {k: _dec(y) for k, y in x["v"].items()}


def _dec_map(x: dict[str, Any]) -> dict[Any, Any]:
    return {_dec(k): _dec(y) for k, y in x["v"]}


def _dec_enum(x: dict[str, Any]) -> Any:
    try:
        cls = _resolve(x["cls"], "enum", lambda c: isinstance(c, type) and issubclass(c, enum.Enum))
    except _Untrusted:
        return _dec(x["v"])  # the member's value
    return cls(_dec(x["v"]))


def _is_namedtuple(c: Any) -> bool:
    return isinstance(c, type) and issubclass(c, tuple) and hasattr(c, "_fields")


def _dec_namedtuple(x: dict[str, Any]) -> Any:
    fields = {k: _dec(y) for k, y in x["v"].items()}
    try:
        cls = _resolve(x["cls"], "named tuple", _is_namedtuple)
    except _Untrusted:
        return fields
    return cls(**fields)


def _is_dataclass_class(c: Any) -> bool:
    return isinstance(c, type) and hasattr(c, "__dataclass_fields__")


_DATACLASS_INIT: dict[type, frozenset[str]] = {}


def _dec_dataclass(x: dict[str, Any]) -> Any:
    try:
        cls = _resolve(x["cls"], "dataclass", _is_dataclass_class)
    except _Untrusted:
        return {k: _dec(y) for k, y in x["v"].items()}
    init = _DATACLASS_INIT.get(cls)
    if init is None:
        init = _DATACLASS_INIT[cls] = frozenset(f.name for f in dataclasses.fields(cls) if f.init)
    fields = {k: _dec(y) for k, y in x["v"].items()}
    # Call the class (so __post_init__ and its invariants run, as model_validate does for a
    # pydantic model), then put back init=False fields exactly as recorded; object.__setattr__
    # also works for frozen and slotted classes.
    obj = cls(**{k: y for k, y in fields.items() if k in init})
    for k, y in fields.items():
        if k not in init:
            object.__setattr__(obj, k, y)
    return obj


def _is_model(c: Any) -> bool:
    pydantic = sys.modules.get("pydantic")
    return pydantic is not None and isinstance(c, type) and issubclass(c, pydantic.BaseModel)


def _dec_model(x: dict[str, Any]) -> Any:
    try:
        cls = _resolve(x["cls"], "pydantic model", _is_model)
    except _Untrusted:
        return _dec(x["json"] if "json" in x else x["v"])
    if "json" in x:
        return _model_from_json(cls, _dec(x["json"]))
    return cls.model_validate(_dec(x["v"]), **_validate_kw())


def _model_from_json(cls: Any, data: Any) -> Any:
    # stdlib json: the data may hold ints beyond 64 bits, which orjson refuses.
    text = json.dumps(data, ensure_ascii=False)
    return cls.model_validate_json(text, **_validate_kw())


_DECODERS: dict[str, Callable[[dict[str, Any]], Any]] = {
    "int": _dec_int,
    "float": _dec_float,
    "datetime": lambda x: _with_tz(_dt.datetime.fromisoformat(x["v"]), x),
    "date": lambda x: _dt.date.fromisoformat(x["v"]),
    "time": lambda x: _with_tz(_dt.time.fromisoformat(x["v"]), x),
    "timedelta": _dec_timedelta,
    "decimal": lambda x: Decimal(x["v"]),
    "uuid": lambda x: uuid.UUID(x["v"]),
    "str": lambda x: base64.b64decode(x["v"], validate=True).decode("utf-8", "surrogatepass"),
    "bytes": lambda x: base64.b64decode(x["v"], validate=True),
    "bytearray": lambda x: bytearray(base64.b64decode(x["v"], validate=True)),
    "tuple": lambda x: tuple(_dec(y) for y in x["v"]),
    "set": lambda x: {_dec(y) for y in x["v"]},
    "frozenset": lambda x: frozenset(_dec(y) for y in x["v"]),
    "map": _dec_map,
    "dict": _dec_dict,
    "enum": _dec_enum,
    "namedtuple": _dec_namedtuple,
    "dataclass": _dec_dataclass,
    "model": _dec_model,
}


# --------------------------------------------------------------------------------------------------
# Bytes


def dumps(data: Any) -> bytes:
    """Serialize already-encoded data to compact UTF-8 JSON bytes (one journal line, no newline).

    NUL and other control characters are escaped and non-ASCII text is written as UTF-8. A ``str``
    holding lone surrogates (as ``os.fsdecode`` produces for undecodable file names), which orjson
    refuses, is written with ``\\udXXX`` escapes instead. Raises ``ValueEncodingError`` for data
    that is not plain JSON (call ``encode`` first).
    """
    error: Exception
    try:
        return orjson.dumps(data)
    except TypeError as exc:  # orjson.JSONEncodeError is a TypeError
        error = exc
    if _has_surrogates(data):
        try:
            return json.dumps(
                data, ensure_ascii=True, allow_nan=False, separators=(",", ":")
            ).encode("ascii")
        except (TypeError, ValueError) as exc:
            error = exc
    raise ValueEncodingError(f"cannot serialize data as JSON: {error}") from None


_SURROGATE = re.compile("[\ud800-\udfff]")


def _has_surrogates(data: Any) -> bool:
    # Only called after orjson failed; also refuses non-str keys, which stdlib json would coerce.
    t = type(data)
    if t is str:
        return _SURROGATE.search(data) is not None
    if t is list:
        return any([_has_surrogates(x) for x in data])
    if t is dict:
        found = False
        for k, x in data.items():
            if type(k) is not str:
                raise ValueEncodingError(f"cannot serialize data as JSON: key {k!r} is not a str")
            found = found or _SURROGATE.search(k) is not None or _has_surrogates(x)
        return found
    return False


_SURROGATE_ESCAPE_B = re.compile(rb"\\u[dD][89a-fA-F][0-9a-fA-F]{2}")
_SURROGATE_ESCAPE_S = re.compile(r"\\u[dD][89a-fA-F][0-9a-fA-F]{2}|[\ud800-\udfff]")


def _reject_constant(name: str) -> Any:
    raise ValueError(f"invalid JSON constant {name}")


def loads(raw: bytes | str) -> Any:
    """Parse JSON bytes (or text) written by ``dumps``; the result is still encoded data.

    Raises ``ValueError`` (a ``json.JSONDecodeError``) when ``raw`` is not valid JSON.
    """
    try:
        return orjson.loads(raw)
    except orjson.JSONDecodeError:
        # orjson refuses lone surrogates, which dumps may have written as escapes.
        pattern: Any = _SURROGATE_ESCAPE_B if isinstance(raw, bytes | bytearray) else None
        if pattern is None and isinstance(raw, str):
            pattern = _SURROGATE_ESCAPE_S
        if pattern is None or pattern.search(raw) is None:
            raise
    return json.loads(raw, parse_constant=_reject_constant)
