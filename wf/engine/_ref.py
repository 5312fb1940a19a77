"""``wf.ref``: a workflow named, not imported, so a producer starts runs without the worker's code.

A run started by name carries what its producer knows: the name, the target a worker imports,
the input (encoded, not validated) and the options the producer gave. Its record says so
(``RunRecord.by_name``). The first driver imports the workflow and completes the record from the
declaration (``adopt``): caps and rate limits, attempts, recoveries, retention. Before the
workflow's body runs, the input is validated against its signature (an invalid input fails the
run), and the options that place a run in the store's queue (its named queue, its group lane and
the lane's width) are checked against the declaration (``placement_problem``): those are fixed
when the run is created, so a by-name start must give them as the workflow declares them, and a
run whose producer did not is failed once with a ``wf.UsageError`` that says what to pass.
"""

from __future__ import annotations

import copy
from typing import TYPE_CHECKING, Any, Generic, TypeVar

from wf._exceptions import UsageError
from wf.engine._deployment import deployment_of
from wf.engine._queueing import RunOptions, group_key, positive_int
from wf.engine._retention import recorded_retention
from wf.store._limits import check_name

if TYPE_CHECKING:
    from wf.engine._workflow import Workflow
    from wf.store import RunRecord

R = TypeVar("R")

_PLACEMENT_OPTIONS = ("queue", "group_concurrency")


class WorkflowRef(Generic[R]):
    """A workflow by name: ``await wf.start(wf.ref("billing:charge"), order)``.

    ``name`` is the workflow's name (by default its ``module:qualname``); ``target`` is how a
    worker imports it (default: ``name``, which must then be ``module:attr``). ``returns`` types
    the result for a type checker (``Run[R]``), nothing more. ``with_options`` takes the run
    options of ``Workflow.with_options`` plus ``queue`` and ``group_concurrency``, which a
    by-name start must give when the workflow declares them.
    """

    def __init__(
        self,
        name: str,
        *,
        target: str | None = None,
        returns: type[R] | None = None,
    ) -> None:
        self.name = check_name("a workflow's name", name)
        target = name if target is None else target
        module, colon, attr = check_name("a workflow's target", target).rpartition(":")
        if not colon or not module or not attr:
            raise UsageError(
                f"wf.ref({name!r}) needs the workflow's target, 'module:attr' (give target=)"
            )
        self.target = target
        self.returns = returns
        self.run_options: RunOptions | None = None
        self.queue: str | None = None
        self.group_concurrency: int | None = None

    def with_options(self, **options: Any) -> WorkflowRef[R]:
        """A reference whose runs use these options (see the class docstring)."""
        handle = copy.copy(self)
        if "queue" in options:
            queue = options.pop("queue")
            handle.queue = None if queue is None else check_name("queue", queue)
        if "group_concurrency" in options:
            width = options.pop("group_concurrency")
            handle.group_concurrency = positive_int("group_concurrency", width)
        handle.run_options = RunOptions.build(self.run_options, options)
        return handle

    def limits(self) -> dict[str, Any] | None:
        """The limits a record carries from its creation (only the lane's width)."""
        if self.group_concurrency is None or self.group_concurrency == 1:
            return None
        return {"group_concurrency": self.group_concurrency}

    def given(self) -> list[str]:
        """The options the producer gave (``RunRecord.by_name``)."""
        names = [n for n in _PLACEMENT_OPTIONS if getattr(self, n) is not None]
        if self.run_options is not None:
            names += [
                n
                for n in ("priority", "group", "max_attempts", "max_recoveries")
                if getattr(self.run_options, n) is not None
            ]
        return sorted(names)

    def __repr__(self) -> str:
        return f"<wf.ref {self.name}>"


def ref(name: str, *, target: str | None = None, returns: type[R] | None = None) -> WorkflowRef[R]:
    """A workflow by name, to start without importing its module (see ``WorkflowRef``)."""
    return WorkflowRef(name, target=target, returns=returns)


def adopt(record: RunRecord, workflow: Workflow[Any, Any]) -> None:
    """Complete a by-name run's record from its workflow's declaration: the caps and rate limit
    (the lane's width stays what the record was created with), attempts and recoveries unless
    the producer gave them, retention. Idempotent; the record is saved by the drive that
    follows."""
    assert record.by_name is not None
    declared = dict(workflow.options.limits() or {})
    declared.pop("group_concurrency", None)
    width = (record.limits or {}).get("group_concurrency")
    if width is not None:
        declared["group_concurrency"] = width
    record.limits = declared or None
    if "max_attempts" not in record.by_name:
        record.max_attempts = workflow.options.max_attempts
    if "max_recoveries" not in record.by_name:
        record.max_recoveries = workflow.options.max_recoveries
    record.retention = recorded_retention(workflow.retention)
    record.code_hash = deployment_of(workflow.fn)


def placement_problem(
    record: RunRecord, workflow: Workflow[Any, Any], args: Any = (), kwargs: Any = None
) -> UsageError | None:
    """Why a by-name run cannot run as its workflow declares (the options fixed at its
    creation differ from the declaration), or None. ``args`` and ``kwargs``: the run's
    validated arguments, which a group function computes the run's group from."""
    options = workflow.options
    start = f"start it as wf.ref({record.workflow!r})"
    if workflow.name != record.workflow:
        return UsageError(
            f"run {record.id} was started by the name {record.workflow!r}, but "
            f"{record.target!r} declares the workflow {workflow.name!r}: start it as "
            f"wf.ref({workflow.name!r}, target={record.target!r})"
        )
    if options.queue != record.queue:
        return UsageError(
            f"workflow {workflow.name!r} is served by queue {options.queue!r}, but run "
            f"{record.id} was started by name into queue {record.queue!r}: "
            f"{start}.with_options(queue={options.queue!r})"
        )
    if options.group is not None and record.group is None:
        try:
            key = group_key(options, None, args, kwargs or {})
        except UsageError as exc:
            return UsageError(f"run {record.id} was started by name without a group, and {exc}")
        if key is not None:  # a group function may place a run in no lane
            return UsageError(
                f"workflow {workflow.name!r} runs in group lanes, but run {record.id} was "
                f"started by name without a group: {start}.with_options(group={key!r})"
            )
    if record.group is not None:
        width = int((record.limits or {}).get("group_concurrency", 1))
        if width != options.group_concurrency:
            return UsageError(
                f"workflow {workflow.name!r} runs {options.group_concurrency} of a group at "
                f"once, but run {record.id} was started by name with {width}: "
                f"{start}.with_options(group_concurrency={options.group_concurrency})"
            )
    return None
