"""Values round-trip exactly through steps, the journal on disk, replay and the run's output."""

from __future__ import annotations

import dataclasses
import datetime as dt
import decimal
import enum
import os
import uuid
from pathlib import Path
from typing import Any

import pydantic

import wf
from wf import Engine
from wf.store.local import LocalStore
from wf.testing import engine


class Colour(enum.Enum):
    RED = "red"


@dataclasses.dataclass
class Parcel:
    weight: decimal.Decimal
    tags: tuple[str, ...]


class Customer(pydantic.BaseModel):
    name: str
    since: dt.date


VALUES: dict[str, Any] = {
    "aware": dt.datetime(2026, 11, 29, 23, 0, 1, 123456, tzinfo=dt.timezone(dt.timedelta(hours=2))),
    "naive": dt.datetime(2026, 1, 2, 3, 4, 5),
    "date": dt.date(2026, 2, 28),
    "delta": dt.timedelta(days=3, microseconds=7),
    "decimal": decimal.Decimal("12345678901234567890.000000001"),
    "uuid": uuid.UUID("12345678-1234-5678-1234-567812345678"),
    "bytes": b"\x00\xff binary",
    "set": {3, 1, 2},
    "frozenset": frozenset({"a", "b"}),
    "tuple": (1, (2, "three")),
    "big": 2**200 + 1,
    "nul": "before\x00after",
    "enum": Colour.RED,
    "dataclass": Parcel(decimal.Decimal("1.50"), ("fragile",)),
    "model": Customer(name="Ada", since=dt.date(2020, 1, 1)),
    "non_str_keys": {1: "one", (2, 3): "pair"},
    "looks_tagged": {"$t": "not a tag"},
}


@wf.step
def echo(value: Any) -> Any:
    return value


@wf.workflow
async def carry(values: dict[str, Any]) -> dict[str, Any]:
    out = {name: await echo(value) for name, value in values.items()}
    await wf.sleep(86400)  # suspend: the output is rebuilt from the journal on replay
    return {name: (value, type(value).__name__) for name, value in out.items()}


async def test_values_round_trip_through_the_local_store_and_a_replay(tmp_path: Path) -> None:
    async with engine(LocalStore(tmp_path / ".workflows")):
        run = await wf.start(carry, VALUES)
        result = await run.result()
        record = await run.record()
    assert record.resumes == 1  # the steps' results came back from the journal on disk
    for name, expected in VALUES.items():
        value, type_name = result[name]
        assert value == expected, name
        assert type(value) is type(expected), name
        assert type_name == type(expected).__name__


@wf.step
def unstorable() -> Any:
    return lambda: None


@wf.workflow
async def returns_function() -> Any:
    return await unstorable()


async def test_a_value_that_cannot_be_stored_names_the_step_and_the_type(tmp_path: Path) -> None:
    async with engine(LocalStore(tmp_path / ".workflows")):
        run = await wf.start(returns_function)
        try:
            await run.result()
        except wf.RunFailed as failure:
            assert "unstorable" in failure.message
            assert "function" in failure.message
        else:
            raise AssertionError("the run should have failed")


@wf.step
def undecodable_file_name() -> str:
    return os.fsdecode(b"report-\xff.csv")  # lone surrogates, as os.listdir gives odd names


@wf.workflow
async def odd_names(given: str) -> list[str]:
    return [given, await undecodable_file_name()]


async def test_lone_surrogates_round_trip_on_every_store(wf_engine: Engine) -> None:
    run = await wf.start(odd_names, "in\udcff")
    assert await run.result() == ["in\udcff", os.fsdecode(b"report-\xff.csv")]
    assert (await run.status()) is wf.RunStatus.COMPLETED
