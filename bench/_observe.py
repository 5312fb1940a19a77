"""Per-step overhead of observability: tracing off / on (a no-op exporter) and step log capture,
as ratios of a plain step.

Each configuration drives the same sequential runs of ``STEPS`` async steps on its own store
(the local store on the disk under test, and the memory store, where a step costs CPU only, so
the same overhead is a bigger share). Configurations are measured in turns, round after round,
in a rotating order, and each keeps its *fastest* round: on a shared machine, other work only
ever adds time, so the minimum is the estimate least disturbed by it (the median of a round
measured while a neighbour's test suite ran could differ by 50 % between identical code paths).

- plain: no instrument, step log capture off, no look for OpenTelemetry;
- tracing off: what a program gets with the extra installed and OpenTelemetry imported but no
  SDK provider set: the engine looks once, adds nothing, and every operation pays only its
  ``if engine.instruments`` test (the same code path as plain: the ratio shows the noise);
- tracing on: an SDK ``TracerProvider`` whose ``SimpleSpanProcessor`` exports to a no-op
  exporter: spans are made, ended and handed over for every drive and step attempt;
- log capture: the default (64 Ki per attempt), steps print nothing;
- log capture + print: each step prints one line (stdout goes to /dev/null meanwhile).
"""

from __future__ import annotations

import contextlib
import importlib
import os
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import wf
from bench import _flows
from wf.engine._current import use_engine
from wf.engine._engine import Engine
from wf.store import Store
from wf.store.local import LocalStore
from wf.store.memory import MemoryStore

STEPS = 20

CONFIGS = ("plain", "tracing off", "tracing on", "log capture", "log capture + print")


@dataclass
class Overhead:
    """Seconds per step (the fastest round), per store kind and configuration."""

    per_step: dict[tuple[str, str], float]

    def ratio(self, store: str, config: str) -> float:
        return self.per_step[(store, config)] / self.per_step[(store, "plain")]


def _engine(config: str, store: Store) -> Engine:
    engine = Engine(store, step_log_limit=0 if "capture" not in config else None)
    if config == "tracing off":
        # The program uses OpenTelemetry's API but set no provider: the engine looks, once.
        importlib.import_module("opentelemetry.trace")
    elif config == "tracing on":
        from opentelemetry.sdk.trace import TracerProvider
        from opentelemetry.sdk.trace.export import (
            SimpleSpanProcessor,
            SpanExporter,
            SpanExportResult,
        )

        import wf.otel

        class Nothing(SpanExporter):
            def export(self, spans: Sequence[Any]) -> SpanExportResult:
                return SpanExportResult.SUCCESS

        provider = TracerProvider()
        provider.add_span_processor(SimpleSpanProcessor(Nothing()))
        wf.otel.instrument(engine, tracer_provider=provider)
    else:
        engine._auto_instruments = False  # plain means plain, whatever the environment says
    return engine


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
    rounds, runs = (5, 5) if quick else (15, 10)
    samples: dict[tuple[str, str], list[float]] = {}
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
            keys = list(engines)
            shift = round_ % len(keys)
            for key in keys[shift:] + keys[:shift]:
                engine = engines[key]
                workflow = _flows.print_steps if key[1].endswith("print") else _flows.steps
                with contextlib.redirect_stdout(devnull):
                    took = await _per_step(engine, workflow, runs)
                if round_:
                    samples.setdefault(key, []).append(took)
    finally:
        devnull.close()
        for engine in engines.values():
            await engine.store.close()
    return Overhead({key: min(v) for key, v in samples.items()})
