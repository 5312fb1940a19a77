"""Starting a run from JSON (``wf.admin.workflow_at`` / ``run_request`` / ``start_run``): the one
way ``wf run``, ``POST /api/v1/runs``, ``wf dev --run`` and ``LocalAdmin.start`` make a run."""

from __future__ import annotations

import datetime as dt

import pytest

import wf
from wf import Engine, admin

TARGET = "tests.admin.test_start:add"


@wf.workflow
async def add(a: int, b: int = 0) -> int:
    return a + b


@wf.step
async def not_a_workflow() -> None:
    pass


def test_a_target_gives_its_workflow_and_the_target_others_import() -> None:
    workflow, target = admin.workflow_at(TARGET)
    assert workflow is add and target == TARGET


def test_a_target_that_is_no_workflow_says_which_workflows_there_are() -> None:
    with pytest.raises(wf.UsageError) as caught:
        admin.workflow_at("tests.admin.test_start:not_a_workflow")
    message = str(caught.value)
    assert "not a workflow (declare it with @wf.workflow)" in message
    assert "add" in message  # the module's workflows, for a mistyped name


NUMBER = 3
ENTRY = {"a": 1}


@pytest.mark.parametrize(
    ("attr", "said"), [("NUMBER", "is an int, not a workflow"), ("ENTRY", "is a dict, not")]
)
def test_a_target_that_is_no_workflow_names_its_type_with_the_right_article(
    attr: str, said: str
) -> None:
    with pytest.raises(wf.UsageError, match=said):
        admin.workflow_at(f"tests.admin.test_start:{attr}")


def test_wf_configure_names_what_is_no_store_with_the_right_article() -> None:
    with pytest.raises(wf.UsageError, match=r"takes a wf.store.Store, not an int$"):
        wf.configure(store=3)  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("given", "expected"),
    [
        ({"input": {"a": 2, "b": 3}}, ((), {"a": 2, "b": 3})),
        ({"input": [2, 3]}, ((2, 3), {})),
        ({"input": 2}, ((2,), {})),
        ({"args": [2], "kwargs": {"b": 3}}, ((2,), {"b": 3})),
    ],
)
def test_input_binds_by_name_by_position_or_as_the_single_argument(
    given: dict[str, object], expected: tuple[tuple[object, ...], dict[str, object]]
) -> None:
    request = admin.run_request(add, **given)  # type: ignore[arg-type]
    assert (request.args, request.kwargs) == expected


@pytest.mark.parametrize(
    ("given", "message"),
    [
        ({"input": {"a": 1}, "args": [1]}, 'give "input" or "args"/"kwargs", not both'),
        ({"args": {"a": 1}}, '"args" is an array and "kwargs" an object'),
        ({"input": 1, "options": {"at": "tomorrow"}}, "options.at is not an ISO 8601 time"),
        ({"input": 1, "options": {"priority": "high"}}, "priority must be an integer"),
        # Counts a journal line cannot carry are refused before anything is written:
        (
            {"input": 1, "options": {"max_attempts": 10**20}},
            r"max_attempts must be an integer from 1 to 9007199254740991, not 1000",
        ),
        (
            {"input": 1, "options": {"max_recoveries": 10**5000}},
            "max_recoveries must be an integer from 1 to 9007199254740991, not an integer of",
        ),
        ({"input": 1, "options": ["priority"]}, "options: expected an object"),
    ],
)
def test_what_does_not_fit_is_a_usage_error_before_any_run_exists(
    given: dict[str, object], message: str
) -> None:
    with pytest.raises(wf.UsageError, match=message):
        admin.run_request(add, **given)  # type: ignore[arg-type]


async def test_a_request_starts_a_queued_run_with_its_options(wf_engine: Engine) -> None:
    at = "2030-01-01T09:00:00+00:00"
    request = admin.run_request(add, [2, 3], options={"priority": 7, "at": at}, target=TARGET)
    run = await admin.start_run(wf_engine, request, run_id="started-here")
    record = await run.record()
    assert (record.id, record.status.value, record.target) == ("started-here", "pending", TARGET)
    assert record.priority == 7
    assert record.wake_at == dt.datetime.fromisoformat(at).timestamp()


async def test_input_the_signature_refuses_creates_no_run(wf_engine: Engine) -> None:
    request = admin.run_request(add, {"c": 1})  # bound by name; checked as the run is made
    with pytest.raises(wf.InputValidationError):
        await admin.start_run(wf_engine, request, run_id="never-made")
    with pytest.raises(wf.RunNotFound):
        await wf_engine.store.get_run("never-made")
