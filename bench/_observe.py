"""Per-step overhead of observability: tracing off / on (a no-op exporter) and step log capture,
as ratios of a plain step.

Each configuration drives the same sequential runs of ``STEPS`` async steps on its own store
(the local store on the disk under test, and the memory store, where a step costs CPU only, so
the same overhead is a bigger share). Configurations are measured in turns, round after round,
in a rotating order. A configuration's ratio is the *median over rounds* of its time divided by
plain's time in the same round: on a shared machine the load drifts from one second to the
next, and a ratio taken within one round, between neighbouring measurements, cancels most of
that drift, where comparing each configuration's own best or median round across the whole
benchmark does not (identical code paths differed by 30 % that way). The time shown per step
is the median round's.

- plain: no instrument, step log capture off, no look for OpenTelemetry;
- tracing off: what a program gets with the extra installed and OpenTelemetry imported but no
  SDK provider set: the engine looks once, adds nothing, and every operation pays only its
  ``if engine.instruments`` test (the same code path as plain: the ratio shows the noise);
- tracing on: an SDK ``TracerProvider`` whose ``SimpleSpanProcessor`` exports to a no-op
  exporter: spans are made, ended and handed over for every drive and step attempt;
- SDK span floor: the same provider, and an instrument that only starts and ends one bare span
  (no attributes, not made current) per step attempt, nothing per run: what OpenTelemetry's
  SDK itself costs per step, the least any tracing of every step can cost. wf's own share of
  "tracing on" is the difference;
- log capture: the default (64 Ki per attempt), steps print nothing;
- log capture + print: each step prints one line (stdout goes to /dev/null meanwhile).
"""

from __future__ import annotations

import contextlib
import importlib
import os
import statistics
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import wf
from bench import _flows
from wf.engine._current import use_engine
from wf.engine._engine import Engine
from wf.engine._instruments import Instrument, StepObserver
from wf.store import Store
from wf.store.local import LocalStore
from wf.store.memory import MemoryStore

STEPS = 20

CONFIGS = (
    "plain",
    "tracing off",
    "tracing on",
    "SDK span floor",
    "log capture",
    "log capture + print",
)


@dataclass
class Overhead:
    """Per store kind and configuration: seconds per step (median round) and the median of
    the per-round ratios to plain."""

    per_step: dict[tuple[str, str], float]
    ratios: dict[tuple[str, str], float]

    def ratio(self, store: str, config: str) -> float:
        return self.ratios[(store, config)]


def _tracer_provider() -> Any:
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import SimpleSpanProcessor, SpanExporter, SpanExportResult

    class Nothing(SpanExporter):
        def export(self, spans: Sequence[Any]) -> SpanExportResult:
            return SpanExportResult.SUCCESS

    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(Nothing()))
    return provider


def _engine(config: str, store: Store) -> Engine:
    engine = Engine(store, step_log_limit=0 if "capture" not in config else None)
    if config == "tracing off":
        # The program uses OpenTelemetry's API but set no provider: the engine looks on each
        # start and drive (a sys.modules read and a provider check).
        importlib.import_module("opentelemetry.trace")
    elif config == "tracing on":
        import wf.otel

        wf.otel.instrument(engine, tracer_provider=_tracer_provider())
    elif config == "SDK span floor":
        engine._auto_instruments = False
        engine.add_instrument(_BareSpans(_tracer_provider().get_tracer("floor")))
    else:
        engine._auto_instruments = False  # plain means plain, whatever the environment says
    return engine


class _BareSpans(Instrument):
    """One bare span per step attempt and nothing else: the SDK's own cost."""

    def __init__(self, tracer: Any) -> None:
        self._tracer = tracer

    def on_step(self, step: Any) -> StepObserver:
        return _BareSpan(self._tracer.start_span("step"))


class _BareSpan(StepObserver):
    __slots__ = ("_span",)

    def __init__(self, span: Any) -> None:
        self._span = span

    def on_end(self, error: BaseException | None) -> None:
        self._span.end()


async def _per_step(engine: Engine, workflow: wf.Workflow[..., int], runs: int) -> float:
    with use_engine(engine):
        start = time.perf_counter()
        for _ in range(runs):
            run = await wf.start(workflow, STEPS)
            assert await run.result() == STEPS
        return (time.perf_counter() - start) / (runs * STEPS)


async def measure(
    base: Path, *, quick: bool, progress: Callable[[str], None] = lambda _m: None
) -> Overhead:
    rounds, runs = (7, 5) if quick else (31, 10)
    samples: dict[tuple[str, str], list[float]] = {}
    ratios: dict[tuple[str, str], list[float]] = {}
    engines: dict[tuple[str, str], Engine] = {}
    for kind in ("local", "memory"):
        for config in CONFIGS:
            store: Store
            if kind == "local":
                store = LocalStore(base / f"observe-{config.replace(' ', '-')}" / ".workflows")
            else:
                store = MemoryStore()
            engines[(kind, config)] = _engine(config, store)
    devnull = open(os.devnull, "w")  # noqa: SIM115 - closed below
    try:
        for round_ in range(rounds + 1):  # round 0 warms up (imports, store creation)
            progress(f"observability overhead: round {round_}/{rounds}")
            took: dict[tuple[str, str], float] = {}
            for kind in ("local", "memory"):
                # Rotating, so that no configuration always runs right after another.
                shift = round_ % len(CONFIGS)
                for config in CONFIGS[shift:] + CONFIGS[:shift]:
                    engine = engines[(kind, config)]
                    workflow = _flows.print_steps if config.endswith("print") else _flows.steps
                    with contextlib.redirect_stdout(devnull):
                        took[(kind, config)] = await _per_step(engine, workflow, runs)
            if round_:
                for (kind, config), seconds in took.items():
                    samples.setdefault((kind, config), []).append(seconds)
                    ratios.setdefault((kind, config), []).append(seconds / took[(kind, "plain")])
    finally:
        devnull.close()
        for engine in engines.values():
            await engine.store.close()
    return Overhead(
        {key: statistics.median(v) for key, v in samples.items()},
        {key: statistics.median(v) for key, v in ratios.items()},
    )
