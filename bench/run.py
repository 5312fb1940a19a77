"""wf's benchmark: every workload side by side in one run, with ratios and budgets.

Run from the repository root::

    python -m bench            # the full run (about 100 s)
    python -m bench --quick    # fewer samples, a 20,000-run listing store (about 45 s)

Options: ``--no-dbos`` skips DBOS; ``--dir DIR`` works there (default: a temporary directory
in the current one, where a project's ``.workflows`` lives; the numbers are for the disk
holding it); ``--runs N`` sets the size of the listing store; ``--markdown FILE`` also writes
the table as Markdown (for docs/performance.md).

Not a test: nothing here fails a build. The budgets are DESIGN.md's "Performance budgets",
each printed as PASS or MISS next to its figure.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import platform
import shutil
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench import _cli, _dbos, _drain, _observe, _scale, _scaleout, _stores, _upkeep, _wf

# Linearity: the replay cost per step of a 10,000-step run may exceed that of a 1,000-step run
# by this factor (noise, cache misses on a 10x bigger journal) and still count as linear.
LINEAR_TOLERANCE = 1.5


@dataclass
class Row:
    measure: str
    value: str
    compared: str = ""
    budget: str = ""
    verdict: str = ""


def verdict(ok: bool) -> str:
    return "PASS" if ok else "MISS"


def machine(directory: Path) -> list[str]:
    """What the numbers were measured on."""
    cpu = platform.processor() or platform.machine()
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    memory = ""
    try:
        kib = int(Path("/proc/meminfo").read_text().split()[1])
        memory = f", {kib / 1024 / 1024:.0f} GiB RAM"
    except (OSError, ValueError, IndexError):
        pass
    fs = "?"
    try:
        best = ""
        real = os.path.realpath(directory)
        for line in Path("/proc/mounts").read_text().splitlines():
            device, mount, kind = line.split()[:3]
            if (real == mount or real.startswith(mount.rstrip("/") + "/")) and len(mount) > len(
                best
            ):
                best, fs = mount, f"{kind} on {device} (mounted at {mount})"
    except OSError:
        pass
    dbos = _dbos.available()
    return [
        f"CPU: {cpu}, {os.cpu_count()} cores{memory}",
        f"OS: {platform.system()} {platform.release()}; file system: {fs}; in {directory.parent}",
        f"Python {platform.python_version()}; wf {_version()}; DBOS {dbos or 'not installed'}",
    ]


def _version() -> str:
    import wf

    return wf.__version__


def render_text(rows: list[Row]) -> str:
    headers = Row("measure", "value", "compared", "budget", "verdict")
    table = [headers, *rows]
    widths = [
        max(len(getattr(r, f)) for r in table) for f in ("measure", "value", "compared", "budget")
    ]
    lines = []
    for r in table:
        cells = [
            r.measure.ljust(widths[0]),
            r.value.rjust(widths[1]),
            r.compared.ljust(widths[2]),
            r.budget.ljust(widths[3]),
            r.verdict,
        ]
        lines.append("  ".join(cells).rstrip())
        if r is headers:
            lines.append("-" * len(lines[0]))
    return "\n".join(lines)


def render_markdown(rows: list[Row]) -> str:
    lines = ["| measure | value | compared | budget | verdict |", "|---|--:|---|---|---|"]
    for r in rows:
        # Markdown strips the indentation that marks a detail row in the text table.
        measure = "↳ " + r.measure.strip() if r.measure.startswith("  ") else r.measure
        lines.append(f"| {measure} | {r.value} | {r.compared} | {r.budget} | {r.verdict} |")
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description="wf's benchmark (see bench/README.md)")
    parser.add_argument("--quick", action="store_true", help="fewer samples, smaller stores")
    parser.add_argument("--no-dbos", action="store_true", help="skip DBOS")
    parser.add_argument(
        "--dir", type=Path, help="work here (default: a temp dir in the current directory)"
    )
    parser.add_argument("--runs", type=int, help="runs in the listing store (default 100,000)")
    parser.add_argument("--markdown", type=Path, help="also write the table as Markdown here")
    parser.add_argument(
        "--only",
        choices=["observability", "drain", "scale", "stores"],
        help="measure only these rows (observability: tracing and step log overhead; "
        "drain: worker processes draining detached runs, local, PostgreSQL and Redis; "
        "stores: sequential steps and the drain with 1/2/4 workers on PostgreSQL and Redis "
        "side by side, and Redis with appendfsync always and everysec; "
        "scale: every interactive read at 10k and 100k runs, bench/_scale.py)",
    )
    parser.add_argument(
        "--million", action="store_true", help="scale: also at 1,000,000 runs (long)"
    )
    parser.add_argument(
        "--no-postgres",
        action="store_true",
        help="skip the PostgreSQL drain rows (default: run them when the server answers)",
    )
    args = parser.parse_args()
    listing_runs = args.runs or (20_000 if args.quick else 100_000)
    # Not /tmp by default: a store lives in its project's directory, and on the machines this
    # was developed on, creating a file anywhere under /tmp cost about 10x what it costs
    # elsewhere on the same file system (270 vs 25 µs), which would be measured instead of wf.
    directory = args.dir or Path.cwd()
    directory.mkdir(parents=True, exist_ok=True)
    base = Path(tempfile.mkdtemp(prefix=".wf-bench-", dir=directory))
    began = time.perf_counter()

    def progress(message: str) -> None:
        print(f"[{time.perf_counter() - began:5.0f} s] {message}", file=sys.stderr, flush=True)

    try:
        if args.only == "observability":
            rows = observability_rows(base, args.quick, progress)
        elif args.only == "scale":
            rows = [
                Row(f"scale: {name} at {size} runs", value, f"{ratio} the 10k figure")
                for name, size, value, ratio in _scale.run(
                    base, args.million, progress, postgres=_scale_postgres(args.no_postgres)
                )
            ]
        elif args.only == "drain":
            rows = drain_rows(base, args.quick, not args.no_dbos, not args.no_postgres, progress)
        elif args.only == "stores":
            rows = stores_rows(base, args.quick, not args.no_postgres, progress)
        else:
            rows = measure_all(base, args.quick, not args.no_dbos, listing_runs, progress)
            rows.extend(
                drain_rows(base, args.quick, not args.no_dbos, not args.no_postgres, progress)
            )
        about = machine(base)
    finally:
        shutil.rmtree(base, ignore_errors=True)
    total = time.perf_counter() - began
    print()
    print("\n".join(about))
    print()
    print(render_text(rows))
    print(f"\n(whole benchmark: {total:.0f} s{', --quick' if args.quick else ''})")
    if args.markdown:
        text = "\n".join(f"- {line}" for line in about)
        text += "\n\n" + render_markdown(rows) + f"\n\nWhole benchmark: {total:.0f} s"
        text += " (`--quick`)\n" if args.quick else ".\n"
        args.markdown.write_text(text)


def measure_all(
    base: Path, quick: bool, with_dbos: bool, listing_runs: int, progress: Callable[[str], None]
) -> list[Row]:
    rows: list[Row] = []
    dbos_version = _dbos.available() if with_dbos else None
    dbos: dict[str, dict[str, float]] = {}
    dbos_note = "" if with_dbos else "skipped (--no-dbos)"
    if with_dbos and dbos_version is None:
        dbos_note = "not installed: pip install -e '.[bench]'"
    # DBOS's sequential runs alternate with wf's rounds, so that both see the same machine (its
    # speed was seen to halve and double within minutes): each ratio is between neighbours.
    peer_rounds: list[dict[str, Any]] = []

    def dbos_round() -> None:
        directory = base / f"dbos-sequential-{len(peer_rounds)}"
        directory.mkdir()
        peer_rounds.append(_dbos.measure("sequential", directory, runs=10, cap=120.0))

    progress("wf workloads")
    res = asyncio.run(
        _wf.run_all(
            base,
            quick=quick,
            progress=progress,
            between_sequential=dbos_round if dbos_version else None,
        )
    )
    seq = res.sequential
    floor = seq.floor_us
    if peer_rounds:
        failed = [found for found in peer_rounds if "error" in found]
        if failed:
            dbos_note = str(failed[0]["error"])
        else:
            dbos["sequential"] = {
                "per_step_us": statistics.median(f["per_step_us"] for f in peer_rounds),
                "db_bytes_per_run": peer_rounds[0]["db_bytes_per_run"],
                "rounds": len(peer_rounds),
            }
    if dbos_version and not dbos_note:
        cap = 8.0 if quick else 15.0
        modes = [f"{p}-{n}" for n in (10, 100, 1000) for p in ("together", "concurrent")]
        for mode in modes:
            progress(f"DBOS {mode}")
            directory = base / f"dbos-{mode}"
            directory.mkdir()
            found = _dbos.measure(mode, directory, runs=10 if quick else 30, cap=cap)
            if "error" in found:
                dbos_note = str(found["error"])
                break
            dbos[mode] = found

    # -- sequential ----------------------------------------------------------------------------
    rows.append(
        Row("floor: write + fdatasync of one journal line", f"{floor:.0f} µs", "1.00× floor")
    )
    rows.append(
        Row(
            "wf sequential 10-step runs: per step, run start and end included",
            f"{seq.amortized_us:.0f} µs",
            f"{seq.amortized_us / floor:.2f}× floor",
            "≤ 1.5× floor",
            verdict(seq.amortized_us <= 1.5 * floor),
        )
    )
    rows.append(
        Row(
            "  one more step in a run (median step-to-step time)",
            f"{seq.marginal_us:.0f} µs",
            f"{seq.marginal_us / floor:.2f}× floor",
            "≤ 1.5× floor",
            verdict(seq.marginal_us <= 1.5 * floor),
        )
    )
    rows.append(
        Row(
            "  a run's fixed cost (start, record saves, outcome)",
            f"{seq.run_overhead_us:.0f} µs",
            f"{seq.run_overhead_us / floor:.1f}× floor",
        )
    )
    rows.append(
        Row(
            "wf sequential, sync steps (thread hop): per step",
            f"{seq.sync_amortized_us:.0f} µs",
            f"{seq.sync_amortized_us / seq.amortized_us:.2f}× async steps",
        )
    )
    if "sequential" in dbos:
        d = dbos["sequential"]["per_step_us"]
        rounds = int(dbos["sequential"]["rounds"])
        rows.append(
            Row(
                "DBOS sequential 10-step runs: per step",
                f"{d:.0f} µs",
                f"{d / floor:.1f}× floor; wf {d / seq.amortized_us:.1f}× faster "
                f"(median of {rounds} rounds between wf's)",
                "wf ≥ 10× faster",
                verdict(d / seq.amortized_us >= 10),
            )
        )

    # -- concurrent ----------------------------------------------------------------------------
    for conc in res.concurrent:
        # DBOS's better figure of its two ways of starting (together, one by one): wf's rows
        # are compared with the strongest DBOS measured, whichever way wf started its runs.
        measured = [
            dbos[m] for m in (f"together-{conc.runs}", f"concurrent-{conc.runs}") if m in dbos
        ]
        if conc.together:
            label = f"wf {conc.runs:,} concurrent 10-step runs (started together)"
        else:
            label = "  the same, each start awaited before the next"
        if measured:
            found = max(measured, key=lambda m: m["steps_per_s"])
            ratio = conc.steps_per_s / found["steps_per_s"]
            capped = "" if found.get("finished") else f", capped at {found['seconds']:.0f} s"
            compared = f"{ratio:.1f}× DBOS ({found['steps_per_s']:.0f} steps/s{capped})"
            budget, ok = "≥ 25× DBOS", verdict(ratio >= 25)
        else:
            compared, budget, ok = f"DBOS: {dbos_note}", "≥ 25× DBOS", "n/a"
        rows.append(Row(label, f"{conc.steps_per_s:,.0f} steps/s", compared, budget, ok))
        if conc.together:
            rows.append(
                Row(
                    "  flushes per step (group commit)",
                    f"{conc.flushes_per_step:.3f}",
                    f"{conc.steps_per_s / (1e6 / floor):.1f}× the floor's rate",
                )
            )
    if dbos_note and not dbos:
        rows.append(Row("DBOS", "—", dbos_note))

    # -- replay --------------------------------------------------------------------------------
    per_step = {}
    for rep in res.replays:
        per_step[rep.steps] = rep.resume_us / rep.steps
        rows.append(
            Row(
                f"replay of a {rep.steps:,}-step run: resume (read + replay + re-suspend)",
                f"{rep.resume_us / rep.steps:.2f} µs/step",
                f"total {rep.resume_us / 1e3:.1f} ms (best); "
                f"median {rep.resume_median_us / rep.steps:.2f} µs/step; "
                f"journal {rep.journal_bytes / rep.steps:.0f} B/step",
                "< 10 µs/step",
                verdict(rep.resume_us / rep.steps < 10),
            )
        )
        rows.append(
            Row(
                "  of which journal read + parse / check_run (replay, no writes)",
                f"{rep.read_us / rep.steps:.2f} / {rep.check_us / rep.steps:.2f} µs/step",
            )
        )
    if len(per_step) == 2:
        growth = per_step[10000] / per_step[1000]
        rows.append(
            Row(
                "replay linearity: µs/step at 10,000 ÷ at 1,000",
                f"{growth:.2f}",
                "1.00 = perfectly linear",
                f"≤ {LINEAR_TOLERANCE}",
                verdict(growth <= LINEAR_TOLERANCE),
            )
        )

    # -- command line --------------------------------------------------------------------------
    progress("wf --help start-up")
    help_ms, python_ms = _cli.startup(5 if quick else 10, base)
    rows.append(
        Row(
            "wf --help start-up (best of N)",
            f"{help_ms:.0f} ms",
            f"bare python -c pass: {python_ms:.0f} ms",
            "< 100 ms",
            verdict(help_ms < 100),
        )
    )

    progress(f"generating a store of {listing_runs:,} runs")
    store_dir = base / "listing" / ".workflows"
    store_dir.parent.mkdir()
    seconds = _cli.generate(store_dir, listing_runs)
    progress(f"  ... {seconds:.0f} s; timing the listing commands")
    listing = _cli.listing(store_dir, 3 if quick else 5, store_dir.parent)
    n = f"{listing_runs:,} runs"
    rows.append(
        Row(
            f"wf runs ({n}; newest 50, subprocess)",
            f"{listing['runs']:.0f} ms",
            f"--help: {help_ms:.0f} ms",
            "< 300 ms",
            verdict(listing["runs"] < 300),
        )
    )
    rows.append(
        Row(
            f"wf runs --json ({n})",
            f"{listing['runs_json']:.0f} ms",
            "",
            "< 300 ms",
            verdict(listing["runs_json"] < 300),
        )
    )
    rows.append(
        Row(
            f"wf inspect --json ({n}; newest run)",
            f"{listing['inspect_json']:.0f} ms",
            "",
            "< 300 ms",
            verdict(listing["inspect_json"] < 300),
        )
    )
    rows.append(Row(f"  list_runs(limit=50) in-process ({n})", f"{listing['list_runs']:.1f} ms"))
    rows.extend(serve_rows(store_dir, n, quick, progress))

    # -- size ----------------------------------------------------------------------------------
    per_run = res.size_allocated / res.size_runs
    content, files = res.size_content / res.size_runs, res.size_files / res.size_runs
    compared = f"{content / 1024:.1f} KiB of content in {files:.0f} files"
    if "sequential" in dbos:
        compared += f"; DBOS SQLite: {dbos['sequential']['db_bytes_per_run'] / 1024:.1f} KiB/run"
    rows.append(
        Row("store size per completed 10-step run (on disk)", f"{per_run / 1024:.1f} KiB", compared)
    )
    packed = res.size_packed_allocated / res.size_runs
    rows.append(
        Row(
            "  the same runs packed (as a worker leaves them a minute after they end)",
            f"{packed / 1024:.1f} KiB",
            f"{res.size_packed} of {res.size_runs} runs packed into segment files (#38's "
            "2 KiB is a 3-step run's: tests/store/test_local_packed.py)",
        )
    )
    busy, quiet = res.busy.busy, res.busy.quiet
    rows.append(
        Row(
            f"wf.start while another program writes to the disk ({len(busy)} starts)",
            f"{statistics.median(busy) * 1e3:.1f} ms median, {max(busy) * 1e3:.1f} ms max",
            f"quiet disk: {statistics.median(quiet) * 1e3:.1f} ms median, "
            f"{max(quiet) * 1e3:.1f} ms max (a syncfs would wait for the writer's data: "
            'docs/store.md, "A busy disk")',
        )
    )
    rows.extend(observability_rows(base, quick, progress))

    # -- schedules and retention ---------------------------------------------------------------
    progress("wf gc and schedule fire latency")
    rows.extend(Row(*row) for row in _upkeep.rows(_upkeep.run_all(base, quick=quick)))
    return rows


def _scale_postgres(skip: bool) -> str | None:
    """A fresh database for the scale rows on PostgreSQL, or None (skipped, or no server)."""
    if skip or _postgres_answers() is not None:
        return None
    return _drain.fresh_database("wfbench_scale")


def _postgres_answers() -> str | None:
    """None if the benchmark's PostgreSQL server answers, else why not."""
    try:
        with _drain._admin() as conn:
            conn.execute("SELECT 1")
    except Exception as error:  # any failure means: skip those rows
        return f"PostgreSQL at {_drain.DSN} unavailable: {str(error).strip().splitlines()[0]}"
    return None


def drain_rows(
    base: Path, quick: bool, with_dbos: bool, with_postgres: bool, progress: Callable[[str], None]
) -> list[Row]:
    """Worker drain: detached 3-step runs drained by ``wf worker`` processes, beside DBOS."""
    local_runs, pg_runs = (300, 200) if quick else (1000, 600)
    scale_runs = 1500 if quick else 3000
    rows: list[Row] = []
    conc = _drain.CONCURRENCY
    dbos_ok = with_dbos and _dbos.available() is not None
    dbos_why = "skipped (--no-dbos)" if not with_dbos else "DBOS not installed"

    # Best of two in the full run (one with --quick): the machine's other work makes single
    # drains noisy, and wf and DBOS alternate so that both see the same conditions.
    rounds = 1 if quick else 2
    scale_rounds = 1 if quick else 3  # medians of rounds: see _scaleout
    best: dict[tuple[str, str, int, int, int], dict[str, Any]] = {}
    counter = iter(range(1_000_000))

    def measured(
        system: str, store: str, runs: int, workers: int = 1, groups: int = 0, best_of: bool = True
    ) -> dict[str, Any]:
        """One drain; with ``best_of``, the best of this workload's drains so far."""
        label = f"{system} {store}" + (f", {workers} workers" if workers > 1 else "")
        label += f", {groups} groups" if groups else ""
        progress(f"worker drain: {label}, {runs:,} runs")
        found = _drain.measure(
            system,
            store,
            runs=runs,
            workers=workers,
            groups=groups,
            directory=base / f"drain-{system}-{store}-{workers}-{groups}-{next(counter)}",
        )
        key = (system, store, workers, groups, runs)
        kept = best.get(key)
        if kept is None or "error" in kept or found.get("runs_per_s", 0) > kept["runs_per_s"]:
            best[key] = found
        return best[key] if best_of else found

    def compare(mine: dict[str, Any], peer: dict[str, Any] | None, why: str) -> tuple[str, float]:
        if peer is None:
            return why, 0.0
        if "error" in peer:
            return str(peer["error"]), 0.0
        ratio = mine["runs_per_s"] / peer["runs_per_s"] if peer["runs_per_s"] else 0.0
        return f"{ratio:.1f}× DBOS ({peer['runs_per_s']:.0f} runs/s)", ratio

    def value(found: dict[str, Any]) -> str:
        return f"{found['runs_per_s']:,.0f} runs/s"

    # -- local store vs DBOS on SQLite ----------------------------------------------------------
    for _ in range(rounds):
        local = measured("wf", "local", local_runs)
        peer = measured("dbos", "sqlite", local_runs) if dbos_ok else None
    label = f"worker drain: {local_runs:,} detached 3-step runs, wf worker -c {conc}, local store"
    if "error" in local:
        rows.append(Row(label, "—", str(local["error"])))
    else:
        compared, ratio = compare(local, peer, dbos_why)
        rows.append(
            Row(
                label,
                value(local),
                compared + " on SQLite",
                "≥ 10× DBOS",
                verdict(ratio >= 10) if peer and "error" not in peer else "n/a",
            )
        )
        rows.append(
            Row(
                "  wall time, worker start to exit (start-up included)",
                f"{local['wall_s']:.2f} s",
                f"DBOS {peer['wall_s']:.2f} s" if peer and "error" not in peer else "",
            )
        )
    if "error" not in local and peer is not None and "error" not in peer:
        rows.append(
            Row(
                "  worker CPU per run (all worker processes)",
                f"{local['worker_cpu_s'] / max(1, local['completed']) * 1e3:.2f} ms"
                + _collector(local, max(1, local["completed"])),
                f"DBOS {peer['worker_cpu_s'] / max(1, peer['completed']) * 1e3:.2f} ms",
            )
        )
    rows.extend(
        local_more_rows(
            base,
            quick,
            (rounds, scale_rounds),
            local_runs,
            scale_runs,
            dbos_ok,
            dbos_why,
            measured,
            progress,
        )
    )
    if not with_postgres:
        rows.append(Row("worker drain on PostgreSQL", "—", "skipped (--no-postgres)"))
        return rows + redis_rows(pg_runs, scale_runs, (rounds, scale_rounds), measured, None)
    why = _postgres_answers()
    if why is not None:
        rows.append(Row("worker drain on PostgreSQL", "—", why))
        return rows + redis_rows(pg_runs, scale_runs, (rounds, scale_rounds), measured, None)

    # -- PostgreSQL: 1 worker vs DBOS, then 1 / 2 / 4 workers on a longer backlog ----------------
    # Scale-out is measured on a backlog that takes seconds to drain: a few hundred runs drain in
    # a fifth of a second, so what more workers showed there was mostly their ramp.
    for _ in range(rounds):
        first = measured("wf", "postgres", pg_runs)
        pg_peer = measured("dbos", "postgres", pg_runs) if dbos_ok else None
        pg_groups = measured("wf", "postgres", pg_runs, 1, 10)
        pg_groups_peer = measured("dbos", "postgres", pg_runs, 1, 10) if dbos_ok else None
    pg = _scaleout.measure(
        lambda k: measured("wf", "postgres", scale_runs, k, best_of=False), scale_rounds
    )
    label = f"worker drain on PostgreSQL: {pg_runs:,} runs, 1 wf worker"
    if "error" in first:
        rows.append(Row(label, "—", str(first["error"])))
    else:
        compared, ratio = compare(first, pg_peer, dbos_why)
        ok = verdict(ratio >= 2) if pg_peer and "error" not in pg_peer else "n/a"
        rows.append(Row(label, value(first), compared + " on PostgreSQL", "≥ 2× DBOS", ok))
    label = f"worker drain on PostgreSQL, 10 groups (1 at a time each): {pg_runs:,} runs"
    if "error" in pg_groups:
        rows.append(Row(label, "—", str(pg_groups["error"])))
    else:
        compared, ratio = compare(pg_groups, pg_groups_peer, dbos_why)
        ok = verdict(ratio >= 10) if pg_groups_peer and "error" not in pg_groups_peer else "n/a"
        rows.append(
            Row(
                label,
                value(pg_groups),
                compared + " on PostgreSQL, partition_concurrency=1",
                "≥ 10× DBOS",
                ok,
            )
        )
    rows += scale_out_rows("PostgreSQL", scale_runs, pg)
    measured_pg: list[tuple[str, dict[str, Any] | None]] = [
        *((f"wf, {x.workers} worker(s)", x.typical) for x in _scaleout.summarize(pg)),
        ("DBOS", pg_peer),
    ]
    for name, counted in measured_pg:
        if counted is None or "error" in counted or "counters" not in counted:
            continue
        found = counted
        c, n = found["counters"], found["completed"] or 1
        written = "/".join(
            f"{c[k] / n:.1f}" for k in ("tup_inserted", "tup_updated", "tup_deleted")
        )
        rows.append(
            Row(
                f"  per run on PostgreSQL, {name}",
                f"{c['xact_commit'] / n:.1f} commits",
                f"{found['statements'] / n:.1f} statements; rows ins/upd/del {written}; "
                f"lock waits: mean {found['lock_waiting_mean']:.2f} backends "
                f"(max {found['lock_waiting_max']}); "
                + (f"{found['notifications'] / n:.1f} notifications; " if name != "DBOS" else "")
                + f"CPU: worker {found['worker_cpu_s'] / n * 1e3:.2f} ms{_collector(found, n)}, "
                f"server {found.get('server_cpu_s', 0) / n * 1e3:.2f} ms" + _preempted(found, n),
            )
        )
    return rows + redis_rows(pg_runs, scale_runs, (rounds, scale_rounds), measured, first)


def _redis_answers() -> str | None:
    """None if the benchmark's Redis server answers, else why not."""
    try:
        import redis

        client = redis.Redis.from_url(_drain.REDIS_URL, socket_connect_timeout=3)
        client.ping()
        client.close()
    except Exception as error:  # any failure (or no redis-py) means: skip those rows
        return f"Redis at {_drain.REDIS_URL} unavailable: {str(error).strip().splitlines()[0]}"
    return None


def redis_rows(
    runs: int,
    scale_runs: int,
    rounds: tuple[int, int],
    measured: Callable[..., dict[str, Any]],
    postgres: dict[str, Any] | None,
) -> list[Row]:
    """Redis: 1 worker beside PostgreSQL's 1 worker, then 1 / 2 / 4 workers on a longer backlog
    (throughput must not fall as workers are added). ``rounds``: of the 1-worker drain (the
    best is kept) and of the scale-out (``_scaleout``)."""
    why = _redis_answers()
    if why is not None:
        return [Row("worker drain on Redis", "—", why)]
    rows: list[Row] = []
    for _ in range(rounds[0]):
        first = measured("wf", "redis", runs)
    scale = _scaleout.measure(
        lambda k: measured("wf", "redis", scale_runs, k, best_of=False), rounds[1]
    )
    label = f"worker drain on Redis: {runs:,} runs, 1 wf worker"
    if "error" in first:
        rows.append(Row(label, "—", str(first["error"])))
    elif postgres is None or "error" in postgres:
        rows.append(Row(label, f"{first['runs_per_s']:,.0f} runs/s", "PostgreSQL not measured"))
    else:
        ratio = first["runs_per_s"] / postgres["runs_per_s"] if postgres["runs_per_s"] else 0.0
        rows.append(
            Row(
                label,
                f"{first['runs_per_s']:,.0f} runs/s",
                f"{ratio:.2f}× PostgreSQL ({postgres['runs_per_s']:.0f} runs/s)",
                "≥ PostgreSQL's",
                verdict(ratio >= 1),
            )
        )
    rows += scale_out_rows("Redis", scale_runs, scale)
    return rows


def stores_rows(
    base: Path, quick: bool, with_postgres: bool, progress: Callable[[str], None]
) -> list[Row]:
    """PostgreSQL and Redis side by side (sequential steps; the drain with 1, 2 and 4
    workers), then Redis with ``appendfsync always`` and ``everysec`` on servers of its own."""
    runs, scale_runs = (200, 1500) if quick else (600, 3000)
    seq_runs = 10 if quick else 30
    counter = iter(range(1_000_000))
    pg_why = "skipped (--no-postgres)" if not with_postgres else _postgres_answers()
    redis_why = _redis_answers()
    stores = [("local store", "local", None), ("PostgreSQL", "postgres", pg_why)]
    stores.append(("Redis", "redis", redis_why))
    rows: list[Row] = []
    sequential: dict[str, dict[str, Any]] = {}
    for name, kind, why in stores:
        label = f"sequential 10-step runs on {name}: per step"
        if why is not None:
            rows.append(Row(label, "—", why))
            continue
        progress(f"sequential steps: {name}")
        found = _stores.measure(kind, base / f"seq-{kind}-{next(counter)}", runs=seq_runs)
        sequential[kind] = found
        if "error" in found:
            rows.append(Row(label, "—", str(found["error"])))
            continue
        local = sequential.get("local", {})
        compared = f"one more step {found['marginal_us']:,.0f} µs"
        if kind != "local" and "per_step_us" in local:
            compared += f"; {found['per_step_us'] / local['per_step_us']:.2f}× the local store"
        rows.append(Row(label, f"{found['per_step_us']:,.0f} µs", compared))

    def drained(store: str, count: int, workers: int = 1) -> dict[str, Any]:
        progress(f"worker drain: {store}, {workers} worker(s), {count:,} runs")
        directory = base / f"stores-{store}-{workers}-{next(counter)}"
        return _drain.measure("wf", store, runs=count, workers=workers, directory=directory)

    first: dict[str, Any] | None = None
    pg: dict[int, list[dict[str, Any]]] = {}
    if pg_why is None:
        first = drained("postgres", runs)
        rows.append(_drain_row(f"worker drain on PostgreSQL: {runs:,} runs, 1 wf worker", first))
        pg = _scaleout.measure(lambda k: drained("postgres", scale_runs, k), 1)
        rows += scale_out_rows("PostgreSQL", scale_runs, pg)
    else:
        rows.append(Row("worker drain on PostgreSQL", "—", pg_why))
    if redis_why is not None:
        return [*rows, Row("worker drain on Redis", "—", redis_why)]
    one = drained("redis", runs)
    label = f"worker drain on Redis: {runs:,} runs, 1 wf worker"
    if "error" in one or first is None or "error" in first:
        rows.append(_drain_row(label, one))
    else:
        ratio = one["runs_per_s"] / first["runs_per_s"] if first["runs_per_s"] else 0.0
        rows.append(
            Row(
                label,
                f"{one['runs_per_s']:,.0f} runs/s",
                f"{ratio:.2f}× PostgreSQL ({first['runs_per_s']:,.0f} runs/s, this run)",
                "≥ PostgreSQL's",
                verdict(ratio >= 1),
            )
        )
    scale = _scaleout.measure(lambda k: drained("redis", scale_runs, k), 1)
    rows += scale_out_rows("Redis", scale_runs, scale)
    pg_one, redis_one = (found[1][0] if found else {"error": "—"} for found in (pg, scale))
    if first is not None and "error" not in pg_one and "error" not in redis_one:
        # The longer backlog's one worker too: a few hundred runs drain in a fraction of a
        # second, so that row is the noisier of the two.
        ratio = redis_one["runs_per_s"] / pg_one["runs_per_s"] if pg_one["runs_per_s"] else 0.0
        rows.append(
            Row(
                f"  Redis's 1 worker on {scale_runs:,} runs against PostgreSQL's",
                f"{ratio:.2f}×",
                f"PostgreSQL {pg_one['runs_per_s']:,.0f} runs/s (this run)",
                "≥ PostgreSQL's",
                verdict(ratio >= 1),
            )
        )
    redis_seq = sequential.get("redis")
    rows += durability_rows(base, scale_runs, seq_runs, redis_seq, redis_one, progress)
    return rows


def durability_rows(
    base: Path,
    runs: int,
    seq_runs: int,
    shared_seq: dict[str, Any] | None,
    shared_drain: dict[str, Any],
    progress: Callable[[str], None],
) -> list[Row]:
    """Sequential steps and a 1-worker drain (of the scale-out backlog: ``shared_drain`` is
    its figure on the shared server) on Redis servers of the benchmark's own, with
    ``appendonly yes`` and ``appendfsync always`` / ``everysec``."""
    rows: list[Row] = []
    for policy in ("always", "everysec"):
        name = f"Redis, appendfsync {policy}"
        try:
            with _stores.durable_server(policy) as url:
                progress(f"sequential steps and drain: {name}")
                seq = _stores.measure("redis", base / f"seq-{policy}", url=url, runs=seq_runs)
                saved = os.environ.get("WF_TEST_REDIS_URL")
                os.environ["WF_TEST_REDIS_URL"] = url  # the drain's subprocesses use it
                try:
                    drain = _drain.measure(
                        "wf", "redis", runs=runs, workers=1, directory=base / f"drain-{policy}"
                    )
                finally:
                    if saved is None:
                        os.environ.pop("WF_TEST_REDIS_URL", None)
                    else:
                        os.environ["WF_TEST_REDIS_URL"] = saved
        except Exception as error:  # no redis-server, or it would not start: say so
            rows.append(Row(name, "—", f"not measured: {error}"))
            continue
        if "error" in seq:
            rows.append(Row(f"sequential 10-step runs on {name}: per step", "—", seq["error"]))
        else:
            compared = f"one more step {seq['marginal_us']:,.0f} µs"
            if shared_seq and "per_step_us" in shared_seq:
                ratio = seq["per_step_us"] / shared_seq["per_step_us"]
                compared += f"; {ratio:.2f}× the shared server's"
            rows.append(
                Row(
                    f"sequential 10-step runs on {name}: per step",
                    f"{seq['per_step_us']:,.0f} µs",
                    compared,
                )
            )
        row = _drain_row(f"worker drain on {name}: {runs:,} runs, 1 wf worker", drain)
        if "error" not in drain and "error" not in shared_drain and shared_drain["runs_per_s"]:
            row.compared = (
                f"{drain['runs_per_s'] / shared_drain['runs_per_s']:.2f}× the shared server's"
            )
        rows.append(row)
    return rows


def _drain_row(label: str, found: dict[str, Any]) -> Row:
    if "error" in found:
        return Row(label, "—", str(found["error"]))
    n = found["completed"] or 1
    return Row(
        label,
        f"{found['runs_per_s']:,.0f} runs/s",
        f"CPU: worker {found['worker_cpu_s'] / n * 1e3:.2f} ms per run",
    )


def scale_out_rows(
    name: str,
    runs: int,
    found: dict[int, list[dict[str, Any]]],
    detail: Callable[[dict[str, Any]], str] | None = None,
) -> list[Row]:
    """1, 2 and 4 workers, measured in rounds (``_scaleout``): two workers must drain more
    than one, four at least as much as two (within 5%); ``detail`` adds
    what the typical round of a row measured beside its throughput."""
    rows: list[Row] = []
    for summary in _scaleout.summarize(found):
        k = summary.workers
        label = f"{name} scale-out: {runs:,} runs, {k} wf worker" + ("s" if k > 1 else "")
        if summary.error is not None:
            rows.append(Row(label, "—", summary.error))
            continue
        value = f"{summary.runs_per_s:,.0f} runs/s"
        rounds = len(found[k])
        taken = f"median of {rounds} rounds" if rounds > 1 else "one round"
        extra = detail(summary.typical) if detail else ""
        if k == 1:
            rows.append(Row(label, value, taken + extra))
            continue
        compared = ""
        if summary.against_one and k > 2:
            compared = f"{summary.against_one:.2f}× 1 worker, "
        if summary.against_half:
            low, high = min(summary.against_half), max(summary.against_half)
            compared += f"{summary.step:.2f}× {k // 2} worker{'s' if k > 2 else ''} ({taken}" + (
                f", each {low:.2f}–{high:.2f})" if rounds > 1 else ")"
            )
        rows.append(
            Row(
                label,
                value,
                compared + extra,
                "> 1 worker's" if k == 2 else f"≥ {k // 2} workers' (within 5%)",
                verdict(summary.ok) if summary.against_half else "n/a",
            )
        )
    return rows


def _local_detail(found: dict[str, Any]) -> str:
    """The typical round's worker CPU per run and preemptions (local store scale-out)."""
    n = max(1, found["completed"])
    return f"; worker CPU per run {found['worker_cpu_s'] / n * 1e3:.2f} ms" + _preempted(found, n)


def _collector(found: dict[str, Any], n: int) -> str:
    """The part of the workers' CPU spent in the garbage collector, when measured."""
    spent = found.get("worker_gc_s")
    return f" (collector {spent / n * 1e3:.2f} ms)" if spent is not None else ""


def _preempted(found: dict[str, Any], n: int) -> str:
    """The wf workers' involuntary context switches per run (they time-share the cores)."""
    if "switches_involuntary" not in found:
        return ""
    return f"; {found['switches_involuntary'] / n:.1f} preemptions"


def local_more_rows(
    base: Path,
    quick: bool,
    rounds: tuple[int, int],
    runs: int,
    scale_runs: int,
    dbos_ok: bool,
    dbos_why: str,
    measured: Callable[..., dict[str, Any]],
    progress: Callable[[str], None],
) -> list[Row]:
    """Local store: 10 groups vs DBOS partitions, 2 and 4 workers vs 1, enqueue cost and latency
    (``rounds``: of the grouped drains, the best kept, and of the scale-out, ``_scaleout``)."""
    rows: list[Row] = []
    groups = 10
    # -- 10 groups, one run at a time per group, vs a DBOS queue partitioned the same way ----
    for _ in range(rounds[0]):
        mine = measured("wf", "local", runs, 1, groups)
        peer = measured("dbos", "sqlite", runs, 1, groups) if dbos_ok else None
    label = f"worker drain, {groups} groups (1 at a time each): {runs:,} runs, local store"
    if "error" in mine:
        rows.append(Row(label, "—", str(mine["error"])))
    elif peer is None or "error" in peer:
        rows.append(
            Row(
                label, f"{mine['runs_per_s']:,.0f} runs/s", str((peer or {}).get("error", dbos_why))
            )
        )
    else:
        ratio = mine["runs_per_s"] / peer["runs_per_s"] if peer["runs_per_s"] else 0.0
        rows.append(
            Row(
                label,
                f"{mine['runs_per_s']:,.0f} runs/s",
                f"{ratio:.1f}× DBOS ({peer['runs_per_s']:.0f} runs/s; SQLite, "
                "partition_concurrency=1, queue_partition_key)",
                "≥ 20× DBOS",
                verdict(ratio >= 20),
            )
        )
    # -- 1, 2 and 4 worker processes on one local store (a backlog of seconds, as above) -----
    scale = _scaleout.measure(
        lambda k: measured("wf", "local", scale_runs, k, best_of=False), rounds[1]
    )
    rows += scale_out_rows("local store", scale_runs, scale, _local_detail)
    # -- enqueue cost and enqueue-to-first-step latency, idle worker running ----------------
    n = 20 if quick else 50
    latency: dict[str, dict[str, Any]] = {}
    for system in ("wf", "dbos") if dbos_ok else ("wf",):
        progress(f"enqueue latency: {system}, {n} enqueues")
        latency[system] = _drain.measure_latency(
            system, runs=n, directory=base / f"latency-{system}"
        )
    wf_l, db_l = latency["wf"], latency.get("dbos")
    label = f"enqueue cost, one `wf.start(detach=True)` at a time ({n}, local store)"
    if "error" in wf_l:
        rows.append(Row(label, "—", str(wf_l["error"])))
        return rows
    ok = db_l is not None and "error" not in db_l
    cost = wf_l["enqueue_us_median"]
    rows.append(
        Row(
            label,
            f"{cost:,.0f} µs/run",
            f"p99 {wf_l['enqueue_us_p99']:,.0f} µs; "
            + (
                f"{db_l['enqueue_us_median'] / cost:.1f}× faster than DBOSClient.enqueue "
                f"({db_l['enqueue_us_median']:,.0f} µs, SQLite)"
                if ok and db_l
                else str((db_l or {}).get("error", dbos_why))
            ),
            "report",
        )
    )
    lat = wf_l["latency_ms_median"]
    rows.append(
        Row(
            f"latency, enqueue to first step, idle worker (median of {n}, "
            f"{wf_l['reached']}/{n} reached)",
            f"{lat:.1f} ms",
            f"p99 {wf_l['latency_ms_p99']:.1f} ms; "
            + (
                f"{db_l['latency_ms_median'] / lat:.1f}× lower than DBOS "
                f"({db_l['latency_ms_median']:.1f} ms, p99 {db_l['latency_ms_p99']:.1f} ms; "
                f"polling {_drain.POLL} s)"
                if ok and db_l and lat
                else str((db_l or {}).get("error", dbos_why))
            ),
            "report",
        )
    )
    return rows


def observability_rows(base: Path, quick: bool, progress: Callable[[str], None]) -> list[Row]:
    """Per-step overhead of tracing and step log capture, as ratios of a plain step."""
    found = asyncio.run(_observe.measure(base, quick=quick, progress=progress))
    budgets = {"tracing off": 1.02, "tracing on": 1.25}
    rows: list[Row] = []
    for kind, what in (("local", "local store"), ("memory", "memory store, CPU only")):
        plain = found.per_step[(kind, "plain")] * 1e6
        rows.append(Row(f"step overhead ({what}): plain step", f"{plain:.1f} µs", "1.00× plain"))
        for config in _observe.CONFIGS[1:]:
            ratio = found.ratio(kind, config)
            limit = budgets.get(config)
            rows.append(
                Row(
                    f"  {config}",
                    f"{found.per_step[(kind, config)] * 1e6:.1f} µs",
                    f"{ratio:.3f}× plain",
                    f"< {limit:.2f}× plain" if limit else "",
                    verdict(ratio < limit) if limit else "",
                )
            )
    return rows


def serve_rows(store_dir: Path, n: str, quick: bool, progress: Callable[[str], None]) -> list[Row]:
    """``wf serve`` over the listing store (skipped without the ``serve`` extra)."""
    try:
        import starlette  # noqa: F401
        import uvicorn  # noqa: F401
    except ImportError:
        return [Row("wf serve", "skipped", "pip install -e '.[serve]'")]
    from bench import _serve

    progress("wf serve: pages, reads and starts over HTTP")
    found = _serve.measure(store_dir, seconds=2.0 if quick else 4.0)
    page, read, start = found["page"], found["read"], found["start"]
    clients = f"{_serve.CLIENTS} clients"
    return [
        Row(
            f"wf serve: runs page server time ({n})",
            f"{page['page']:.1f} ms",
            f"p99 {page['page_p99']:.1f} ms; status filter {page['page_failed']:.1f} ms; "
            f"a run's page {page['run_page']:.1f} ms",
            "< 100 ms",
            verdict(page["page"] < 100),
        ),
        Row(
            f"wf serve: GET /api/v1/runs/{{id}} ({n})",
            f"{read['rps']:.0f} req/s",
            f"p50 {read['p50']:.1f} ms, p99 {read['p99']:.1f} ms; {clients}",
        ),
        Row(
            f"wf serve: POST /api/v1/runs, start a run ({n})",
            f"{start['rps']:.0f} req/s",
            f"p50 {start['p50']:.1f} ms, p99 {start['p99']:.1f} ms; {clients}",
        ),
    ]


if __name__ == "__main__":
    main()
