"""The topics of ``wf help TOPIC``: what error hints point at, readable without the docs.

Error messages end with ``(wf help TOPIC)`` rather than naming a documentation file, which a
``pip install`` does not ship. A test checks that every topic a message names exists here.
"""

from __future__ import annotations

TOPICS: dict[str, tuple[str, str]] = {
    "await": (
        "Forgetting `await` on a step, a workflow or a wf operation",
        """\
Inside a run, calling a step gives an operation; `await` runs it and gives its result:

    total = await compute(x)          # right
    total = compute(x)                # an operation, not a number: wf says
                                      # "did you forget `await`?" where it is used

Using an un-awaited operation as a value (returning it, storing it, adding to it, comparing
it) fails at once with that question; one created and never awaited is reported when it is
garbage collected (a RuntimeWarning naming the line that let it go, or under `python -X dev`
the line that made it), and `wf check` flags it (rule WF504) before you run.
`await compute` without the call is an error too ("awaited without being called"; rule WF505).
To run operations concurrently, still await them: `await asyncio.gather(a(), b())`.""",
    ),
    "nondeterminism": (
        "A run's journal no longer matches the code (wf.NondeterminismError)",
        """\
A run that suspends (a sleep, a hook, a crash) is resumed by replaying the workflow from the
top: completed steps return their recorded results. If the code changed meanwhile so that it
calls different operations in a different order, replay stops with wf.NondeterminismError
naming the operation, what the journal recorded and what the code now calls.

To change a workflow that has runs in flight, guard the change:

    if wf.patched("send-sms"):        # new runs take this branch, old runs keep the old one
        await send_sms(user)

Before deploying, `wf check --replay` replays stored runs against the new code and lists the
runs the change would break; `wf check` flags code that can never replay (clocks, randomness,
I/O outside steps). Once no old run remains, `wf.deprecate_patch("send-sms")` ends the patch.

Without a code change, the workflow's choices depended on state its journal does not hold: a
module-level object it changes (a cache filled on the first run is empty in the process that
replays it), the clock, randomness, the host. `wf check` flags these (WF1xx, WF404): keep run
state in locals, and use wf.now(), wf.random() and steps, whose results are recorded.

The same error saying "a call got another call's operation id" is not a code change: steps ran
together (asyncio.gather, TaskGroup) and a branch called a further step after one of its steps
ended. Live, such a branch's later calls take their ids as its steps end; replay resolves
recorded steps at once and reaches them in another order, so wf fails the run rather than hand
a call another call's result. Make each multi-step branch a child run
(wf.start), or gather the branches' steps stage by stage; `wf check` flags such branches
before they run (wf help WF305).""",
    ),
    "config": (
        "Configuration: [tool.wf] in pyproject.toml, WF_* variables, wf.configure()",
        """\
One table, in the project's pyproject.toml (the project is found like git finds a repository:
the nearest directory at or above the current one with a pyproject.toml holding [tool.wf], or
an existing .workflows store):

    [tool.wf]
    dir = ".workflows"              # the store, relative to the project (WF_DIR)
    # postgres_dsn = "postgresql://..."   # PostgreSQL instead (WF_POSTGRES_DSN)
    # redis_url = "redis://host:6379/0"   # or Redis (WF_REDIS_URL; redis_prefix = "wf")
    modules = ["app.flows"]         # imported by `wf dev` and `wf worker` at start

    [tool.wf.worker]
    concurrency = 100               # WF_WORKER_CONCURRENCY

    [tool.wf.dev]
    grace = 30.0                    # WF_DEV_GRACE

    [tool.wf.check]
    ignore = ["WF205"]

Every key has a WF_* variable (the key upper-cased, dots as underscores) that overrides it;
`wf.configure(...)` in a program overrides both. `wf info` prints the project, the store and
every setting with where it came from. `wf init` writes a starter table.""",
    ),
    "store": (
        "Where runs are kept",
        """\
Runs live in the project's store: the `.workflows` directory beside the project's
pyproject.toml (or `dir` in [tool.wf], or $WF_DIR), or PostgreSQL when `postgres_dsn` /
$WF_POSTGRES_DSN is set, or Redis when `redis_url` / $WF_REDIS_URL is. Every command finds
the same store from any subdirectory of the project. `wf info` says which project and store a
command uses.""",
    ),
    "targets": (
        "Naming a workflow on the command line: module:attr or path/file.py:attr",
        """\
`wf run shop.py:order` loads the file shop.py and starts the workflow `order` in it;
`wf run app.flows:order` imports the module app.flows. Modules are imported with the project
root and the current directory on the import path, so a worker started anywhere in the
project imports the same modules. A name that is not a workflow gets a list of the workflows
the module declares.""",
    ),
    "input": (
        "Run input on the command line (--input JSON)",
        """\
`--input` takes JSON: an object maps the workflow's parameters by name, an array gives them
by position, any other value is the single argument of a one-parameter workflow. Values are
validated against the workflow's type annotations; every field that does not fit is named.

    wf run flows.py:hello --input '{"name": "ada"}'     # JSON on the command line
    wf run flows.py:hello --input @input.json           # @path: read the JSON from a file
    echo '"ada"' | wf run flows.py:hello --input -      # -: read it from stdin

`wf hook resume TOKEN --data` reads its payload the same three ways.""",
    ),
    "exit-codes": (
        "Exit codes of wf commands",
        """\
0   success (wf run: the run completed)
1   the run failed or was cancelled; wf check found problems; an unexpected internal error
2   bad usage or bad input (unknown target, input that does not fit, unknown run id, an
    argument that is not UTF-8, output closed early, an optional extra not installed)
3   the store failed or refused (I/O, corruption, a newer store format)
130 interrupted (Ctrl-C)""",
    ),
    "durations": (
        "Durations on the command line",
        """\
Durations read like 90, 90s, 5m, 2h, 1d (plain numbers are seconds).""",
    ),
}


def rule_topics() -> dict[str, tuple[str, str]]:
    """``wf help check`` and ``wf help WF101``: the analyzer's rules, from its own table."""
    from wf.check._rules import RULES

    lines = [f"{r.code}  {r.name}: {r.summary}" for r in RULES.values()]
    topics = {
        "check": (
            "wf check rules",
            "`wf check` flags workflow code that cannot replay. Select or ignore rules with\n"
            "--select/--ignore, [tool.wf.check] select/ignore, or `# wf: ignore[CODE]`.\n"
            "One rule in full: wf help WF101 (or wf help check WF101).\n\n" + "\n".join(lines),
        )
    }
    for rule in RULES.values():
        topics[rule.code.lower()] = (
            f"{rule.code} ({rule.name})",
            f"Flags code that {rule.summary}.\nFix: {rule.hint}.",
        )
    return topics


def find_topic(name: str) -> tuple[str, str] | None:
    """The topic ``name`` (case-insensitive), or None."""
    key = name.strip().lower()
    if key in TOPICS:
        return TOPICS[key]
    return rule_topics().get(key)


def topic_names() -> list[str]:
    """Every topic ``wf help`` knows, for its listing (rule codes are folded into ``check``)."""
    return [*TOPICS, "check"]
