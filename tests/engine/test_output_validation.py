"""A run's output is validated against its workflow's return annotation, like its input."""

from __future__ import annotations

import dataclasses

import pytest

import wf
from wf import Engine

compensated: list[str] = []


@dataclasses.dataclass
class Receipt:
    order: str
    total: float


@wf.workflow
async def returns_text_for_int() -> int:
    return "nope"  # type: ignore[return-value]


@wf.workflow(max_attempts=3)
async def returns_a_bad_receipt() -> Receipt:
    wf.rollback(undo, "charge")
    return {"order": "o-1", "total": "n/a"}  # type: ignore[return-value]


@wf.step
def undo(what: str) -> None:
    compensated.append(what)


@wf.workflow
async def returns_receipt_fields() -> Receipt:
    return {"order": "o-2", "total": "12.5"}  # type: ignore[return-value]


@wf.workflow
async def unannotated():  # type: ignore[no-untyped-def]
    return {"anything": object.__name__}


@wf.workflow
async def returns_none_as_declared() -> None:
    return None


async def test_an_output_that_does_not_fit_fails_the_run(wf_engine: Engine) -> None:
    run = await wf.start(returns_text_for_int)
    with pytest.raises(wf.RunFailed) as caught:
        await run.result()
    error = caught.value
    assert error.error_type == "wf.OutputValidationError"
    assert isinstance(error.original, wf.OutputValidationError)
    assert isinstance(error.original, wf.UsageError)
    assert error.message.startswith(
        "output of workflow 'tests.engine.test_output_validation:returns_text_for_int': "
        "Input should be a valid integer"
    )
    assert "(got 'nope')" in error.message
    assert (await run.status()) is wf.RunStatus.FAILED


async def test_an_output_error_names_the_field_and_allows_no_further_attempt(
    wf_engine: Engine,
) -> None:
    compensated.clear()
    run = await wf.start(returns_a_bad_receipt)
    with pytest.raises(wf.RunFailed, match=r"total: Input should be a valid number") as caught:
        await run.result()
    assert "(got 'n/a')" in caught.value.message
    record = await run.record()
    assert (record.attempt, record.max_attempts) == (1, 3)  # failed at once, like FatalError
    journal = await wf_engine.store.read_journal(run.id)
    assert not [e for e in journal if e["type"] == "run_retrying"]
    assert compensated == ["charge"]  # a failed run: its compensations ran


async def test_an_output_that_fits_is_coerced_like_the_input(wf_engine: Engine) -> None:
    run = await wf.start(returns_receipt_fields)
    assert await run.result() == Receipt(order="o-2", total=12.5)
    run = await wf.start(returns_none_as_declared)
    assert await run.result() is None


async def test_an_unannotated_output_is_not_checked(wf_engine: Engine) -> None:
    run = await wf.start(unannotated)
    assert await run.result() == {"anything": "object"}
