"""Tagged JSON codec: exact round trips, readable plain JSON, clear errors."""

from __future__ import annotations

import collections
import dataclasses
import datetime as dt
import enum
import json
import math
import socket
import sys
import threading
import uuid
from decimal import Decimal
from typing import Any, NamedTuple
from zoneinfo import ZoneInfo

import orjson
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from pydantic import BaseModel, Field, HttpUrl, SecretStr

from wf import ValueEncodingError, decode, encode
from wf.engine._codec import _MAX_DEPTH, dumps, loads

WHERE = "result of step 'charge'"


# -- user classes (module level: they must be importable by module:qualname) ----------------------


class Color(enum.Enum):
    RED = 1
    GREEN = "green"
    PAIR = (1, 2)


class Status(str, enum.Enum):  # noqa: UP042 - the shape of wf.RunStatus, on purpose
    OK = "ok"


class Mode(enum.StrEnum):
    FAST = "fast"


class Level(enum.IntEnum):
    LOW = 1


class Perm(enum.Flag):
    R = 4
    W = 2


@dataclasses.dataclass
class Point:
    x: int
    y: int


@dataclasses.dataclass(frozen=True)
class Line:
    start: Point
    end: Point
    tags: frozenset[str] = frozenset()
    length2: int = dataclasses.field(init=False)

    def __post_init__(self) -> None:
        dx, dy = self.end.x - self.start.x, self.end.y - self.start.y
        object.__setattr__(self, "length2", dx * dx + dy * dy)


@dataclasses.dataclass(slots=True)
class Slotted:
    when: dt.datetime
    data: bytes


@dataclasses.dataclass
class Node:
    name: str
    children: list[Node] = dataclasses.field(default_factory=list)


class Pair(NamedTuple):
    left: Any
    right: Any


OldPair = collections.namedtuple("OldPair", "a b")


class Item(BaseModel):
    sku: str
    qty: int = 1


class Order(BaseModel):
    id: uuid.UUID
    items: list[Item]
    at: dt.datetime
    dims: tuple[int, int]
    flags: set[str] = set()
    extra: Any = None


class Aliased(BaseModel):
    full_name: str = Field(alias="fullName")
    age: int = Field(validation_alias="years", default=0)


class Site(BaseModel):
    url: HttpUrl
    count: int


class Login(BaseModel):
    user: str
    password: SecretStr


class Deleted:
    """Stands in for a class whose module is gone, via a doctored class reference."""


# -- helpers -------------------------------------------------------------------------------------


def same(a: Any, b: Any) -> bool:
    """Equal *and* of the same types all the way down (== alone says 1 == 1.0 == True)."""
    if type(a) is not type(b):
        return False
    if isinstance(a, float):
        if math.isnan(a):
            return math.isnan(b)
        return a == b and math.copysign(1, a) == math.copysign(1, b)
    if isinstance(a, Decimal):
        return bool(a.as_tuple() == b.as_tuple())
    if isinstance(a, dt.datetime | dt.time):
        return (
            a == b
            and a.fold == b.fold
            and a.isoformat() == b.isoformat()
            and (a.tzinfo is None) == (b.tzinfo is None)
            and getattr(a.tzinfo, "key", None) == getattr(b.tzinfo, "key", None)
        )
    if isinstance(a, dict):
        return a.keys() == b.keys() and all(
            same(ka, kb) and same(a[ka], b[kb]) for ka, kb in zip(a.keys(), b.keys(), strict=True)
        )
    if isinstance(a, list | tuple):
        return len(a) == len(b) and all(same(x, y) for x, y in zip(a, b, strict=True))
    if isinstance(a, set | frozenset):
        # Members are hashable and compared by ==; check each member's twin has the same type.
        twins = {x: x for x in b}
        return a == b and all(same(x, twins[x]) for x in a)
    if dataclasses.is_dataclass(a):
        return all(same(getattr(a, f.name), getattr(b, f.name)) for f in dataclasses.fields(a))
    return bool(a == b)


def roundtrip(value: Any) -> Any:
    """Through every layer a stored value goes through: encode, dumps, loads, decode."""
    return decode(loads(dumps(encode(value, where=WHERE))))


def check(value: Any) -> None:
    back = roundtrip(value)
    assert same(back, value), (value, back)


# -- plain JSON ----------------------------------------------------------------------------------


PLAIN = [
    None,
    True,
    False,
    0,
    -1,
    2**63 - 1,
    -(2**63),
    1.5,
    -0.0,
    1e300,
    "",
    "héllo ✓ 😀",
    "nul\x00inside",
    [],
    {},
    [1, "a", None, [2.5, {"k": [True]}]],
    {"a": 1, "b": {"c": [1, 2, {"d": None}]}, "": "empty key"},
]


def stable_repr(value: Any) -> str:
    """``repr``, with sets' elements in a fixed order: test ids must not depend on the hash
    seed (the suite's worker processes each have their own, and must collect the same ids)."""
    if isinstance(value, set | frozenset):
        inner = ", ".join(sorted(stable_repr(v) for v in value))
        return f"{type(value).__name__}({{{inner}}})"
    if isinstance(value, tuple):
        return (
            "(" + ", ".join(stable_repr(v) for v in value) + ("," if len(value) == 1 else "") + ")"
        )
    return repr(value)


@pytest.mark.parametrize("value", PLAIN, ids=stable_repr)
def test_plain_json_passes_through_unchanged(value: Any) -> None:
    encoded = encode(value, where=WHERE)
    assert same(encoded, value)
    check(value)


def test_plain_containers_are_copied_not_shared() -> None:
    value = {"a": [1, 2]}
    encoded = encode(value, where=WHERE)
    assert encoded == value
    assert encoded is not value
    assert encoded["a"] is not value["a"]


def test_journal_text_is_readable() -> None:
    raw = dumps(encode({"sku": "A1", "qty": 2, "at": dt.date(2026, 1, 2)}, where=WHERE))
    assert raw == b'{"sku":"A1","qty":2,"at":{"$t":"date","v":"2026-01-02"}}'


# -- tagged values -------------------------------------------------------------------------------

UTC = dt.UTC
PARIS = ZoneInfo("Europe/Paris")

TAGGED = [
    2**63,
    -(2**63) - 1,
    2**64,
    -(10**40),
    float("inf"),
    float("-inf"),
    dt.datetime(2026, 1, 2, 3, 4, 5, 1),
    dt.datetime(2026, 1, 2, 3, 4, 5, 1, tzinfo=UTC),
    dt.datetime(2026, 1, 2, 3, 4, 5, tzinfo=dt.timezone(dt.timedelta(hours=5, minutes=30))),
    dt.datetime(2026, 1, 2, tzinfo=dt.timezone(-dt.timedelta(hours=3, seconds=15, microseconds=7))),
    dt.datetime(2026, 7, 1, 12, 0, 0, 999999, tzinfo=PARIS),
    dt.datetime(2026, 10, 25, 2, 30, tzinfo=PARIS, fold=1),  # the second 02:30 that night
    dt.datetime(2026, 3, 29, 2, 30, tzinfo=PARIS),  # a wall time that does not exist
    dt.date(1999, 12, 31),
    dt.time(23, 59, 59, 999999),
    dt.time(1, 2, tzinfo=dt.timezone(dt.timedelta(hours=-2))),
    dt.time(1, 2, tzinfo=PARIS),
    dt.timedelta(0),
    dt.timedelta(days=-1, microseconds=1),
    dt.timedelta(days=999999999, seconds=86399, microseconds=999999),
    Decimal("1.10"),
    Decimal("-0"),
    Decimal("1E+2"),
    Decimal("-Infinity"),
    Decimal("NaN"),
    Decimal("3.141592653589793238462643383279502884197"),
    uuid.UUID("12345678-1234-5678-1234-567812345678"),
    b"",
    b"\x00\x01\xff binary",
    bytearray(b"\x00abc"),
    (),
    (1,),
    (1, (2, (3, ())), [4, (5,)]),
    set(),
    {1, 2, 3},
    frozenset({"a", "b"}),
    frozenset({frozenset({1}), frozenset()}),
    {(1, 2), (3, 4)},
    {1: "int key", "1": "str key"},
    {True: "bool key", None: "none key", 2.5: "float key"},
    {(1, "a"): [1], frozenset({2}): {3}},
    {"$t": "datetime", "v": "not really a tag"},
    {"$t": {"$t": "int", "v": "5"}, "other": [{"$t": 1}]},
    Color.RED,
    Color.GREEN,
    Color.PAIR,
    Status.OK,
    Mode.FAST,
    Level.LOW,
    Perm.R | Perm.W,
    Point(1, 2),
    Line(Point(0, 0), Point(3, 4), frozenset({"x"})),
    Slotted(dt.datetime(2026, 1, 1, tzinfo=UTC), b"\x00"),
    Node("root", [Node("a"), Node("b", [Node("c")])]),
    Pair(1, (2, 3)),
    Pair(Point(1, 1), {4}),
    OldPair(a=[1], b=None),
]


@pytest.mark.parametrize("value", TAGGED, ids=stable_repr)
def test_round_trip_exact(value: Any) -> None:
    check(value)


@pytest.mark.parametrize("value", TAGGED, ids=stable_repr)
def test_round_trip_nested_in_containers(value: Any) -> None:
    check({"value": value, "list": [value, (value,)], "map": {1: value}})


def test_big_int_beyond_str_digit_limit() -> None:
    huge = 7**20000  # ~17,000 digits: str() refuses it (sys.get_int_max_str_digits)
    encoded = encode(huge, where=WHERE)
    assert encoded["$t"] == "int"
    assert roundtrip(huge) == huge
    assert roundtrip(-huge) == -huge


def test_ints_at_the_64_bit_boundary() -> None:
    assert encode(2**63 - 1, where=WHERE) == 2**63 - 1
    assert encode(2**63, where=WHERE) == {"$t": "int", "v": str(2**63)}
    assert encode(-(2**63), where=WHERE) == -(2**63)
    assert encode(-(2**63) - 1, where=WHERE) == {"$t": "int", "v": str(-(2**63) - 1)}


def test_nan_and_negative_zero() -> None:
    assert encode(float("nan"), where=WHERE) == {"$t": "float", "v": "nan"}
    assert math.isnan(roundtrip(float("nan")))
    zero = roundtrip(-0.0)
    assert zero == 0.0 and math.copysign(1, zero) == -1


def test_datetime_tag_format() -> None:
    value = dt.datetime(2026, 1, 2, 3, 4, 5, 1, tzinfo=UTC)
    assert encode(value, where=WHERE) == {
        "$t": "datetime",
        "v": "2026-01-02T03:04:05.000001+00:00",
    }


def test_zoneinfo_key_is_kept() -> None:
    value = dt.datetime(2026, 7, 1, 12, tzinfo=PARIS)
    encoded = encode(value, where=WHERE)
    assert encoded == {"$t": "datetime", "v": "2026-07-01T12:00:00+02:00", "tz": "Europe/Paris"}
    back = roundtrip(value)
    assert back.tzinfo is PARIS  # ZoneInfo caches instances by key
    assert back.utcoffset() == dt.timedelta(hours=2)


def test_ambiguous_wall_time_keeps_fold() -> None:
    first = dt.datetime(2026, 10, 25, 2, 30, tzinfo=PARIS)
    second = first.replace(fold=1)
    assert roundtrip(first).fold == 0
    assert roundtrip(second).fold == 1
    assert roundtrip(second).utcoffset() == dt.timedelta(hours=1)


def test_tuple_and_set_tags() -> None:
    assert encode((1, (2,)), where=WHERE) == {
        "$t": "tuple",
        "v": [1, {"$t": "tuple", "v": [2]}],
    }
    # Sets encode sorted, so equal sets always give the same journal text.
    assert encode({"b", "c", "a"}, where=WHERE) == {"$t": "set", "v": ["a", "b", "c"]}


def test_unorderable_set_members_still_round_trip() -> None:
    check({1, "a", (2, "b"), None})


def test_dict_with_non_str_keys_is_tagged_as_pairs() -> None:
    assert encode({1: "a", "b": 2}, where=WHERE) == {"$t": "map", "v": [[1, "a"], ["b", 2]]}


def test_user_dict_with_tag_key_is_escaped() -> None:
    value = {"$t": "datetime", "v": "2026-01-02T00:00:00"}
    encoded = encode(value, where=WHERE)
    assert encoded == {"$t": "dict", "v": {"$t": "datetime", "v": "2026-01-02T00:00:00"}}
    back = roundtrip(value)
    assert back == value and type(back["v"]) is str


def test_enum_tag_names_class_and_value() -> None:
    assert encode(Status.OK, where=WHERE) == {
        "$t": "enum",
        "cls": f"{__name__}:Status",
        "v": "ok",
    }
    assert roundtrip(Status.OK) is Status.OK


def test_dataclass_tag_and_rebuild() -> None:
    encoded = encode(Point(1, 2), where=WHERE)
    assert encoded == {"$t": "dataclass", "cls": f"{__name__}:Point", "v": {"x": 1, "y": 2}}
    line = Line(Point(0, 0), Point(3, 4))
    back = roundtrip(line)
    assert back == line and back.length2 == 25
    assert type(back.start) is Point


def test_pydantic_model_round_trip() -> None:
    order = Order(
        id=uuid.uuid4(),
        items=[Item(sku="A"), Item(sku="B", qty=3)],
        at=dt.datetime(2026, 1, 2, tzinfo=UTC),
        dims=(2, 3),
        flags={"gift"},
        extra={"when": dt.date(2026, 1, 1), "raw": b"\x00"},
    )
    encoded = encode(order, where=WHERE)
    assert encoded["$t"] == "model" and encoded["cls"] == f"{__name__}:Order"
    back = roundtrip(order)
    assert type(back) is Order
    assert back == order
    assert type(back.extra["when"]) is dt.date  # an Any field keeps its exact type too


def test_pydantic_model_with_aliases() -> None:
    value = Aliased.model_validate({"fullName": "Ada", "years": 36})
    back = roundtrip(value)
    assert back == value and back.age == 36


def test_pydantic_model_with_pydantic_only_types_uses_json_form() -> None:
    site = Site.model_validate({"url": "https://example.com/x", "count": 2**70})
    encoded = encode(site, where=WHERE)
    assert "json" in encoded
    back = roundtrip(site)
    assert back == site and str(back.url) == "https://example.com/x"


def test_pydantic_model_that_cannot_round_trip_is_refused() -> None:
    # SecretStr dumps masked: storing it would silently lose the secret.
    with pytest.raises(ValueEncodingError, match=r"SecretStr at \['password'\]"):
        encode(Login(user="ada", password=SecretStr("hunter2")), where=WHERE)


def test_named_tuples() -> None:
    assert encode(Pair(1, 2), where=WHERE) == {
        "$t": "namedtuple",
        "cls": f"{__name__}:Pair",
        "v": {"left": 1, "right": 2},
    }
    assert type(roundtrip(OldPair(1, 2))) is OldPair


# -- decoding failures ---------------------------------------------------------------------------


def test_decode_class_from_a_missing_trusted_module_names_the_type(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("WF_TRUSTED_MODULES", "no_such_module_wf_test")
    data = {"$t": "dataclass", "cls": "no_such_module_wf_test:Thing", "v": {}}
    with pytest.raises(ValueEncodingError, match=r"no_such_module_wf_test:Thing.*cannot be imp"):
        decode(data)


def test_stored_class_references_never_import_a_module(
    tmp_path: Any, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    """A reference is data anyone with access to the store chooses: a module planted where a
    command runs must not be imported (and run) by decoding it."""
    planted = tmp_path / "planted_wf_module.py"
    planted.write_text(
        "import pathlib, dataclasses, enum\n"
        "pathlib.Path(__file__).with_suffix('.ran').touch()\n"
        "@dataclasses.dataclass\nclass Thing:\n    n: int\n"
    )
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.chdir(tmp_path)
    stored = {
        "d": {"$t": "dataclass", "cls": "planted_wf_module:Thing", "v": {"n": 1}},
        "e": {"$t": "enum", "cls": "planted_wf_module:Color", "v": "red"},
        "t": {"$t": "namedtuple", "cls": "planted_wf_module:Pt", "v": {"x": 1}},
        "m": {"$t": "model", "cls": "planted_wf_module:M", "v": {"a": [1]}},
    }
    assert decode(stored) == {"d": {"n": 1}, "e": "red", "t": {"x": 1}, "m": {"a": [1]}}
    assert not planted.with_suffix(".ran").exists()
    assert "planted_wf_module:Thing decoded as plain data" in caplog.text

    monkeypatch.setenv("WF_TRUSTED_MODULES", "planted_wf_module")  # an explicit allow list
    try:
        thing = decode(stored["d"])
        assert type(thing).__name__ == "Thing" and thing.n == 1
        assert planted.with_suffix(".ran").exists()
    finally:
        sys.modules.pop("planted_wf_module", None)


def test_decode_class_missing_from_module_names_the_type() -> None:
    data = {"$t": "enum", "cls": f"{__name__}:Vanished", "v": 1}
    with pytest.raises(ValueEncodingError, match="Vanished"):
        decode(data)


def test_decode_class_of_the_wrong_kind() -> None:
    data = {"$t": "dataclass", "cls": f"{__name__}:Deleted", "v": {}}
    with pytest.raises(ValueEncodingError, match="no longer a dataclass"):
        decode(data)


def test_decode_unknown_tag() -> None:
    with pytest.raises(ValueEncodingError, match="unknown type tag 'frobnicate'"):
        decode({"$t": "frobnicate", "v": 1})


def test_decode_malformed_tag() -> None:
    with pytest.raises(ValueEncodingError, match="datetime"):
        decode({"$t": "datetime", "v": "yesterday"})


def test_decode_rebuild_failure_names_the_type() -> None:
    data = {"$t": "model", "cls": f"{__name__}:Item", "v": {"sku": 1}}
    with pytest.raises(ValueEncodingError, match=f"{__name__}:Item"):
        decode(data)


# -- encoding failures ---------------------------------------------------------------------------


def _generator() -> Any:
    yield 1


@pytest.mark.parametrize(
    ("make", "type_name"),
    [
        (lambda: socket.socket(), "socket.socket"),
        (lambda: _generator(), "generator"),
        (lambda: threading.Lock(), "_thread.lock"),
        (lambda: lambda: 1, "function"),
        (lambda: object(), "object"),
        (lambda: Deleted(), f"{__name__}.Deleted"),
        (lambda: collections.OrderedDict(a=1), "collections.OrderedDict"),
    ],
)
def test_unsupported_values_name_where_and_type(make: Any, type_name: str) -> None:
    value = make()
    try:
        with pytest.raises(ValueEncodingError) as info:
            encode(value, where=WHERE)
        message = str(info.value)
        article = "an" if type_name[0] in "aeiou" else "a"
        assert message.startswith(f"{WHERE} is {article} {type_name},")
        assert "\n" not in message
        with pytest.raises(ValueEncodingError, match=r"at \['items'\]\[1\]\.y"):
            encode({"items": [Point(1, 1), Point(1, value)]}, where=WHERE)
    finally:
        if isinstance(value, socket.socket):
            value.close()


def test_builtin_subclass_gets_a_conversion_hint() -> None:
    with pytest.raises(ValueEncodingError, match="convert it to a plain dict"):
        encode(collections.defaultdict(list), where=WHERE)


def test_class_defined_in_a_function_is_refused_at_encode_time() -> None:
    @dataclasses.dataclass
    class Local:
        x: int

    with pytest.raises(ValueEncodingError, match="defined inside a function") as info:
        encode(Local(1), where=WHERE)
    assert WHERE in str(info.value)


def test_list_cycle() -> None:
    value: list[Any] = [1]
    value.append(value)
    with pytest.raises(ValueEncodingError, match="reference cycle") as info:
        encode(value, where=WHERE)
    assert "the top level contains itself through [1]" in str(info.value)


def test_dict_cycle_through_a_tuple() -> None:
    inner: dict[str, Any] = {}
    value = {"a": [(inner,)]}
    inner["back"] = value
    with pytest.raises(ValueEncodingError, match="reference cycle"):
        encode(value, where=WHERE)


def test_dataclass_cycle() -> None:
    node = Node("loop")
    node.children.append(node)
    with pytest.raises(ValueEncodingError, match="reference cycle"):
        encode({"tree": node}, where=WHERE)


def test_deep_but_acyclic_nesting() -> None:
    value: Any = "leaf"
    for _ in range(400):
        value = [value]
    with pytest.raises(ValueEncodingError, match=rf"nested more than {_MAX_DEPTH} levels"):
        encode(value, where=WHERE)


@pytest.mark.parametrize(
    "wrap", [lambda v: [v], lambda v: (v,), lambda v: {"k": v}, lambda v: {1: v}]
)
def test_whatever_encodes_can_be_dumped(wrap: Any) -> None:
    # The depth limit of encode matches orjson's, tags included: no value gets past encode only
    # to fail at dumps.
    value: Any = dt.date(2026, 1, 1)
    encodable = 0
    for depth in range(1, 300):
        value = wrap(value)
        try:
            encoded = encode(value, where=WHERE)
        except ValueEncodingError:
            break
        encodable = depth
        assert same(decode(loads(dumps(encoded))), value)
    assert 50 < encodable < 300


# -- dumps / loads -------------------------------------------------------------------------------


def test_dumps_is_compact_utf8_and_escapes_nul() -> None:
    raw = dumps({"s": "a\x00é😀", "n": [1, 2]})
    assert raw == '{"s":"a\\u0000é😀","n":[1,2]}'.encode()
    assert b"\n" not in dumps("line\nbreak")
    assert loads(raw) == {"s": "a\x00é😀", "n": [1, 2]}
    assert loads(raw.decode()) == loads(raw)


def test_lone_surrogates_are_tagged_so_every_json_writer_takes_them() -> None:
    name = b"caf\xe9.txt".decode("utf-8", "surrogateescape")  # as os.fsdecode gives
    value = {"file": name, "other": "ok ✓", "keys": {name: [name]}, "t": (name,)}
    encoded = encode(value, where=WHERE)
    assert encoded["file"] == {"$t": "str", "v": "Y2Fm7bOpLnR4dA=="}
    assert encoded["other"] == "ok ✓"  # other text stays plain
    assert encoded["keys"]["$t"] == "map"  # a key with lone surrogates: a dict of pairs
    raw = orjson.dumps(encoded)  # plain UTF-8 JSON: a store needs no special writer
    assert decode(loads(raw)) == value
    assert decode(json.loads(json.dumps(encoded))) == value


def test_lone_surrogates_already_in_json_survive() -> None:
    name = "caf\udce9.txt"
    raw = dumps({"file": name, "other": "ok ✓"})
    assert b"\\udce9" in raw
    assert loads(raw) == {"file": name, "other": "ok ✓"}
    assert loads(raw.decode("ascii")) == {"file": name, "other": "ok ✓"}


def test_dumps_refuses_unencoded_data() -> None:
    with pytest.raises(ValueEncodingError):
        dumps({"s": {1, 2}})
    with pytest.raises(ValueEncodingError):
        dumps({1: "non-str key"})


def test_loads_rejects_malformed_json() -> None:
    with pytest.raises(ValueError):
        loads(b'{"a": ')
    with pytest.raises(ValueError):
        loads(b"NaN")


# -- property ------------------------------------------------------------------------------------

_leaves = (
    st.none()
    | st.booleans()
    | st.integers()
    | st.integers(min_value=-(2**200), max_value=2**200)
    | st.floats(allow_nan=False)
    | st.text()
    | st.binary(max_size=20)
    | st.datetimes(timezones=st.none() | st.timezones())
    | st.dates()
    | st.timedeltas()
    | st.decimals(allow_nan=True)
    | st.uuids()
)

_values = st.recursive(
    _leaves,
    lambda children: (
        st.lists(children, max_size=4)
        | st.lists(children, max_size=4).map(tuple)
        | st.dictionaries(st.text(max_size=5), children, max_size=4)
        | st.dictionaries(st.integers() | st.tuples(st.integers()), children, max_size=3)
        | st.frozensets(st.integers(), max_size=4)
        | st.sets(st.integers(), max_size=4)
        | st.sets(st.tuples(st.integers(), st.text(max_size=3)), max_size=3)
        | st.fixed_dictionaries({"$t": st.text(max_size=8)}, optional={"v": children})
    ),
    max_leaves=20,
)


@settings(max_examples=300, deadline=None)
@given(_values)
def test_property_round_trip(value: Any) -> None:
    encoded = encode(value, where=WHERE)
    raw = dumps(encoded)
    assert b"\n" not in raw
    back = decode(loads(raw))
    assert same(back, value), (value, back)


def test_encode_and_decode_are_public_and_inverse() -> None:
    import wf

    value = {"when": dt.date(2026, 12, 1), "amount": Decimal("12.50"), "tags": {"a", "b"}}
    data = wf.encode(value)
    assert data["when"] == {"$t": "date", "v": "2026-12-01"}  # tagged, plain JSON
    assert wf.decode(data) == value
    with pytest.raises(wf.ValueEncodingError, match="a value"):
        wf.encode(object())
