"""Binding ``--input`` JSON to workflow parameters, and validating arguments with pydantic.

This module uses string annotations on purpose: ``from __future__ import annotations`` is how many
users write workflows.
"""

from __future__ import annotations

import dataclasses
import datetime as dt
import functools
import threading
from collections.abc import Mapping, Sequence
from typing import Annotated, Any, NamedTuple, TypedDict

import pydantic
import pytest
from pydantic import BaseModel, Field

from wf import InputValidationError
from wf.engine import _signature
from wf.engine._signature import bind_input, json_schema, validate_arguments, validate_value

WHERE = "workflow 'shop:order'"


class Item(BaseModel):
    sku: str
    qty: int = 1


class Order(BaseModel):
    items: list[Item]
    note: str = ""


@dataclasses.dataclass
class Point:
    x: int
    y: int


class Box(TypedDict):
    w: int
    h: int


class Span(NamedTuple):
    start: int
    end: int


# -- workflows -------------------------------------------------------------------------------------


async def no_params() -> None: ...


async def one_int(qty: int) -> None: ...


async def one_untyped(value): ...  # type: ignore[no-untyped-def]


async def one_any(value: Any) -> None: ...


async def one_model(order: Order) -> None: ...


async def one_optional_model(order: Order | None = None) -> None: ...


async def one_dataclass(p: Point) -> None: ...


async def one_dict(config: dict[str, int]) -> None: ...


async def one_mapping(config: Mapping[str, Any]) -> None: ...


async def one_typeddict(box: Box) -> None: ...


async def one_annotated_model(order: Annotated[Order, Field(description="the order")]) -> None: ...


async def one_list(prices: list[float]) -> None: ...


async def one_tuple(span: tuple[int, ...]) -> None: ...


async def one_sequence(names: Sequence[str]) -> None: ...


async def one_namedtuple(span: Span) -> None: ...


async def one_str(name: str) -> None: ...


async def keyword_only(*, order: Order) -> None: ...


async def shop(qty: int, when: dt.datetime, where: Point, sizes: tuple[int, ...] = ()) -> None: ...


async def two(a: int, b: str = "x") -> None: ...


async def variadic(first: int, *rest: int, **extra: float) -> None: ...


async def positional_only(a: int, /, b: int = 0) -> None: ...


async def unresolvable(a: NoSuchType, b: int) -> None: ...  # type: ignore[name-defined] # noqa: F821


async def forward_ref_in_list(items: list[Item]) -> None: ...


async def arbitrary(lock: threading.Event) -> None: ...


def _decorator(fn: Any) -> Any:
    @functools.wraps(fn)
    async def wrapper(*args: Any, **kwargs: Any) -> Any:
        return await fn(*args, **kwargs)

    return wrapper


@_decorator
async def wrapped(qty: int, when: dt.date) -> None: ...


# -- bind_input ------------------------------------------------------------------------------------


def test_no_input_means_no_arguments() -> None:
    assert bind_input(no_params, None) == ((), {})
    assert bind_input(one_int, None) == ((), {})


def test_object_maps_by_name() -> None:
    assert bind_input(two, {"a": 1, "b": "y"}) == ((), {"a": 1, "b": "y"})
    assert bind_input(one_int, {"qty": 3}) == ((), {"qty": 3})


def test_array_maps_by_position() -> None:
    assert bind_input(two, [1, "y"]) == ((1, "y"), {})
    assert bind_input(variadic, [1, 2, 3]) == ((1, 2, 3), {})


@pytest.mark.parametrize("value", [5, "text", 2.5, True, False])
def test_scalar_is_the_single_argument(value: Any) -> None:
    assert bind_input(one_int, value) == ((value,), {})
    assert bind_input(two, value) == ((value,), {})


@pytest.mark.parametrize(
    "fn", [one_model, one_optional_model, one_dataclass, one_dict, one_mapping, one_typeddict]
)
def test_whole_object_is_the_sole_object_parameter(fn: Any) -> None:
    data = {"items": [{"sku": "A"}], "x": 1}
    assert bind_input(fn, data) == ((data,), {})


def test_object_with_the_parameter_name_binds_by_name() -> None:
    data: dict[str, Any] = {"order": {"items": []}}
    assert bind_input(one_model, data) == ((), {"order": {"items": []}})
    assert bind_input(one_dict, {"config": {"a": 1}}) == ((), {"config": {"a": 1}})


def test_empty_object_for_a_sole_object_parameter() -> None:
    assert bind_input(one_dict, {}) == (({},), {})
    assert bind_input(one_int, {}) == ((), {})  # so validation reports 'qty' missing


def test_annotated_object_parameter() -> None:
    assert bind_input(one_annotated_model, {"items": []}) == (({"items": []},), {})


def test_object_for_a_scalar_or_untyped_sole_parameter_binds_by_name() -> None:
    # Only an annotation that says "object" takes a whole object; otherwise keys are names.
    assert bind_input(one_int, {"q": 1}) == ((), {"q": 1})
    assert bind_input(one_untyped, {"a": 1}) == ((), {"a": 1})
    assert bind_input(one_any, {"value": 1}) == ((), {"value": 1})


@pytest.mark.parametrize("fn", [one_list, one_tuple, one_sequence, one_namedtuple])
def test_whole_array_is_the_sole_array_parameter(fn: Any) -> None:
    assert bind_input(fn, [1, 2]) == (([1, 2],), {})
    assert bind_input(fn, []) == (([],), {})


def test_array_for_a_non_array_sole_parameter_is_positional() -> None:
    assert bind_input(one_int, [7]) == ((7,), {})
    assert bind_input(one_str, ["x"]) == (("x",), {})  # str is a sequence, but not an array
    assert bind_input(one_untyped, [1]) == ((1,), {})


def test_keyword_only_sole_parameter() -> None:
    assert bind_input(keyword_only, {"items": []}) == ((), {"order": {"items": []}})


def test_bound_input_validates() -> None:
    args, kwargs = bind_input(one_model, {"items": [{"sku": "A", "qty": "2"}]})
    args, kwargs = validate_arguments(one_model, args, kwargs, where=WHERE)
    assert args == (Order(items=[Item(sku="A", qty=2)]),)
    args, kwargs = validate_arguments(one_tuple, *bind_input(one_tuple, ["1", 2]), where=WHERE)
    assert args == ((1, 2),)


# -- validate_arguments: coercion ----------------------------------------------------------------


def test_coercions() -> None:
    args, kwargs = validate_arguments(
        shop,
        ("3",),
        {"when": "2026-01-02T03:04:05+00:00", "where": {"x": 1, "y": "2"}, "sizes": [1, "2"]},
        where=WHERE,
    )
    assert args == (3,)
    assert kwargs["when"] == dt.datetime(2026, 1, 2, 3, 4, 5, tzinfo=dt.UTC)
    assert kwargs["where"] == Point(1, 2)
    assert kwargs["sizes"] == (1, 2)
    assert type(kwargs["sizes"]) is tuple


def test_shape_is_kept_and_defaults_not_filled() -> None:
    assert validate_arguments(two, (1,), {}, where=WHERE) == ((1,), {})
    assert validate_arguments(two, (), {"a": "1"}, where=WHERE) == ((), {"a": 1})


def test_already_typed_values_pass() -> None:
    order = Order(items=[Item(sku="A")])
    assert validate_arguments(one_model, (order,), {}, where=WHERE)[0][0] == order


def test_untyped_and_any_accept_anything() -> None:
    marker = object()
    assert validate_arguments(one_untyped, (marker,), {}, where=WHERE) == ((marker,), {})
    assert validate_arguments(one_any, (), {"value": marker}, where=WHERE) == (
        (),
        {"value": marker},
    )


def test_unresolvable_annotation_accepts_anything_for_that_parameter_only() -> None:
    marker = object()
    assert validate_arguments(unresolvable, (marker, "2"), {}, where=WHERE) == ((marker, 2), {})
    with pytest.raises(InputValidationError, match="parameter 'b'"):
        validate_arguments(unresolvable, (marker, "x"), {}, where=WHERE)


def test_forward_reference_inside_a_generic() -> None:
    args, _ = validate_arguments(forward_ref_in_list, ([{"sku": "A"}],), {}, where=WHERE)
    assert args == ([Item(sku="A")],)


def test_arbitrary_class_is_checked_by_isinstance() -> None:
    event = threading.Event()
    assert validate_arguments(arbitrary, (event,), {}, where=WHERE) == ((event,), {})
    with pytest.raises(InputValidationError, match="parameter 'lock'"):
        validate_arguments(arbitrary, ("no",), {}, where=WHERE)


def test_variadic_parameters_take_and_validate_extras() -> None:
    assert validate_arguments(variadic, ("1", "2", 3), {"z": "1.5"}, where=WHERE) == (
        (1, 2, 3),
        {"z": 1.5},
    )
    with pytest.raises(InputValidationError, match=r"parameter '\*rest'\[1\]: Input should"):
        validate_arguments(variadic, (1, 2, "x"), {}, where=WHERE)
    with pytest.raises(InputValidationError, match="parameter 'z': Input should be a valid number"):
        validate_arguments(variadic, (1,), {"z": "x"}, where=WHERE)


def test_wrapped_function_uses_the_wrapped_signature() -> None:
    assert validate_arguments(wrapped, ("2", "2026-01-02"), {}, where=WHERE) == (
        (2, dt.date(2026, 1, 2)),
        {},
    )


# -- validate_arguments: errors ------------------------------------------------------------------


def _error(fn: Any, args: tuple[Any, ...] = (), kwargs: dict[str, Any] | None = None) -> str:
    with pytest.raises(InputValidationError) as info:
        validate_arguments(fn, args, kwargs or {}, where=WHERE)
    message = str(info.value)
    assert "\n" not in message
    return message


def test_type_mismatch_message() -> None:
    assert _error(one_int, kwargs={"qty": "abc"}) == (
        "input for workflow 'shop:order': parameter 'qty': Input should be a valid integer, "
        "unable to parse string as an integer (got 'abc')"
    )


def test_nested_mismatch_names_the_location() -> None:
    message = _error(one_model, ({"items": [{"sku": "A"}, {"sku": "B", "qty": "many"}]},))
    assert message.startswith(
        "input for workflow 'shop:order': parameter 'order': items[1].qty: Input should be a "
        "valid integer"
    )
    assert message.endswith("(got 'many')")


def test_several_errors_name_every_field_on_one_line() -> None:
    message = _error(one_model, ({"items": [{"qty": "x"}, {}]},))
    assert "\n" not in message and "more error" not in message
    assert "items[0].sku: Field required" in message
    assert "items[0].qty: Input should be a valid integer" in message
    assert "items[1].sku: Field required" in message


def test_missing_required_parameter() -> None:
    assert _error(shop, (1,)) == (
        "input for workflow 'shop:order': missing required parameters 'when', 'where'"
    )
    assert _error(one_int) == "input for workflow 'shop:order': missing required parameter 'qty'"


def test_unknown_parameter() -> None:
    assert _error(two, kwargs={"a": 1, "c": 2}) == (
        "input for workflow 'shop:order': unknown parameter 'c' (parameters: 'a', 'b')"
    )


def test_too_many_positional_arguments() -> None:
    assert _error(two, (1, "b", 3)) == (
        "input for workflow 'shop:order': takes 2 positional arguments ('a', 'b') but 3 were given"
    )
    assert _error(no_params, (1,)) == (
        "input for workflow 'shop:order': takes no positional arguments but 1 was given"
    )


def test_given_twice() -> None:
    assert "given both by position and by name" in _error(two, (1,), {"a": 2})


def test_positional_only_by_name() -> None:
    assert "'a' is positional-only" in _error(positional_only, kwargs={"a": 1})


def test_error_is_an_input_validation_error_and_a_value_error() -> None:
    with pytest.raises(ValueError):
        validate_arguments(one_int, ("x",), {}, where=WHERE)


# -- caching -------------------------------------------------------------------------------------


def test_validator_is_built_once_per_function(monkeypatch: pytest.MonkeyPatch) -> None:
    built: list[Any] = []
    original = pydantic.TypeAdapter

    class CountingAdapter(original):  # type: ignore[valid-type,misc]
        def __init__(self, tp: Any, *args: Any, **kwargs: Any) -> None:
            built.append(tp)
            super().__init__(tp, *args, **kwargs)

    monkeypatch.setattr(pydantic, "TypeAdapter", CountingAdapter)

    async def fresh(a: int, b: dt.date) -> None: ...

    for _ in range(5):
        validate_arguments(fresh, (1, "2026-01-01"), {}, where=WHERE)
    # One per annotated parameter and one for the result (``-> None``), on first use only.
    assert sorted(map(repr, built)) == sorted(map(repr, [int, dt.date, type(None)]))
    assert _signature._validator_for(fresh) is _signature._validator_for(fresh)


def test_validate_value_adapter_is_cached_per_type() -> None:
    tp = list[tuple[int, str]]
    validate_value(tp, [[1, "a"]], where="payload of hook 'h'")
    first = _signature._adapter_for(tp)
    validate_value(tp, [[2, "b"]], where="payload of hook 'h'")
    assert _signature._adapter_for(tp) is first
    assert _signature._adapter_for(list[tuple[int, str]]) is first  # equal types share it


# -- validate_value / json_schema ----------------------------------------------------------------


def test_validate_value_coerces() -> None:
    assert validate_value(Point, {"x": "1", "y": 2}, where="payload of hook 'h'") == Point(1, 2)
    assert validate_value(tuple[int, ...], ["1"], where="payload of hook 'h'") == (1,)


def test_validate_value_error() -> None:
    with pytest.raises(InputValidationError) as info:
        validate_value(Item, {"sku": "A", "qty": "lots"}, where="payload of hook 'approve'")
    assert str(info.value) == (
        "payload of hook 'approve': qty: Input should be a valid integer, unable to parse string "
        "as an integer (got 'lots')"
    )


def test_validate_value_with_unhashable_type() -> None:
    tp = Annotated[int, {"unhashable": "metadata"}]
    assert validate_value(tp, "3", where="payload") == 3


def test_json_schema() -> None:
    schema = json_schema(Item)
    assert schema is not None
    assert schema["properties"]["qty"]["type"] == "integer"
    assert json_schema(list[int]) == {"items": {"type": "integer"}, "type": "array"}
    assert json_schema(threading.Event) is None
    assert json_schema(Any) == {}
    unresolvable = list["NoSuchType"]  # type: ignore[name-defined]  # noqa: F821 - on purpose
    assert json_schema(unresolvable) is None
