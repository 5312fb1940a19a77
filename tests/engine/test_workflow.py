"""Declaring a workflow: what ``@wf.workflow`` refuses, and how it says so."""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterator

import pytest

import wf


def test_a_plain_function_is_refused_as_one() -> None:
    def plain(x: int) -> int:
        return x

    with pytest.raises(
        wf.UsageError, match=r"needs an async def; '[^']*plain' is a plain function$"
    ):
        wf.workflow(plain)


def test_an_async_generator_is_refused_as_one() -> None:
    # Was: "needs an async def; '...gen' is a plain function", of an `async def`.
    async def gen(x: int) -> AsyncIterator[int]:
        yield x

    with pytest.raises(wf.UsageError) as refused:
        wf.workflow(gen)
    message = str(refused.value)
    assert "'test_an_async_generator_is_refused_as_one.<locals>.gen' is an async generator" in (
        message
    )
    assert "plain function" not in message
    assert "return" in message  # what to do instead


def test_a_generator_is_refused_as_one() -> None:
    def gen(x: int) -> Iterator[int]:
        yield x

    with pytest.raises(wf.UsageError, match=r"is a generator function"):
        wf.workflow(gen)
