"""Rule codes and the tables of calls each rule flags.

Codes are grouped by family so that a prefix selects a family: WF1 non-determinism, WF2 I/O
outside steps, WF3 concurrency that does not replay, WF4 step hygiene, WF5 workflow hygiene.
Codes are stable: a retired rule keeps its number reserved.
"""

from __future__ import annotations

from typing import NamedTuple

from wf.check._model import Rule

_STEP = "move it into a `@wf.step`, whose result is recorded and not re-run on replay"

_RULE_LIST = [
    Rule("WF101", "clock-read", "reads the current time or a timer", "use `wf.now()`"),
    Rule("WF102", "random-call", "draws from the `random` module", "use `wf.random()`"),
    Rule("WF103", "random-uuid", "makes a random UUID (uuid1/uuid4)", "use `wf.uuid4()`"),
    Rule(
        "WF104",
        "os-randomness",
        "reads OS randomness (`secrets`, `os.urandom`)",
        "generate secrets in a `@wf.step`; use `wf.random()` for non-secret values",
    ),
    Rule(
        "WF105",
        "unstable-hash",
        "uses `hash()` or `id()`, whose values differ between processes",
        "use a stable digest (`hashlib.sha256(...)`, `zlib.crc32(...)`) or a key of your own",
    ),
    Rule(
        "WF106",
        "process-identity",
        "reads which process or host runs the code (`os.getpid`, `socket.gethostname`, `sys.argv`)",
        "read it in a `@wf.step`, or pass the value in as a workflow argument",
    ),
    Rule("WF201", "file-io", "touches the file system", _STEP),
    Rule("WF202", "network-io", "does network I/O (sockets, HTTP clients, cloud SDKs)", _STEP),
    Rule("WF203", "subprocess", "starts or signals a process", _STEP),
    Rule("WF204", "database-client", "calls a database client", _STEP),
    Rule(
        "WF205",
        "environment-read",
        "reads the process environment (`os.environ`, `os.getenv`)",
        "read it in a `@wf.step`, or pass the value in as a workflow argument",
    ),
    Rule("WF206", "console-input", "reads from the console (`input`, `sys.stdin`)", _STEP),
    Rule(
        "WF301",
        "thread-or-process",
        "runs work on threads or processes (`threading`, `concurrent.futures`, ...)",
        "use `asyncio.gather` or `asyncio.TaskGroup` over steps; put blocking work in a step",
    ),
    Rule(
        "WF302",
        "non-durable-sleep",
        "sleeps with `time.sleep` or `asyncio.sleep`",
        "use `await wf.sleep(...)`, a durable timer that survives restarts",
    ),
    Rule(
        "WF303",
        "timing-race",
        "races tasks against each other or a deadline (`asyncio.wait`, `wait_for`, ...)",
        "use `wf.select(...)` / `wf.first(...)` / `wf.timeout(...)`, which record the winner",
    ),
    Rule(
        "WF306",
        "swallowed-cancellation",
        "catches `CancelledError` / `BaseException` around an `await` without re-raising",
        "catch `Exception` instead, or end the handler with `raise`",
    ),
    Rule(
        "WF304",
        "set-iteration",
        "iterates a set, whose order changes between processes",
        "iterate `sorted(...)` of the set instead",
    ),
    Rule(
        "WF305",
        "multi-operation-branch",
        "runs, as a concurrent branch (`asyncio.gather`, TaskGroup, `create_task`, `wf.map`),"
        " a helper that starts a durable operation after awaiting another; once such a run"
        " has to be replayed it fails with `wf.NondeterminismError` and cannot be resumed",
        "make each branch a child run (`wf.start`, then `asyncio.gather` of the runs'"
        " `result()`s), or gather the branches' steps stage by stage",
    ),
    Rule(
        "WF401",
        "lambda-step",
        "makes a step from a lambda",
        "define the step with `def` at module level and decorate it with `@wf.step`",
    ),
    Rule(
        "WF402",
        "closure-step",
        "defines a step that captures variables of its enclosing function",
        "define the step at module level and pass the values in as arguments",
    ),
    Rule(
        "WF403",
        "method-step",
        "makes an instance method a step",
        "make it a module-level function or a `@staticmethod` and pass what it needs",
    ),
    Rule(
        "WF404",
        "global-state",
        "uses `global` / `nonlocal` or changes a module-level object in workflow code",
        "keep run state in local variables and return values; keep shared state in a store,"
        " accessed by steps",
    ),
    Rule(
        "WF501",
        "sync-workflow",
        "declares a workflow with a plain `def`, or an `async def` that yields",
        "declare it with `async def`, and return its result",
    ),
    Rule(
        "WF502",
        "duplicate-workflow-name",
        "gives two workflows the same name",
        'give one of them a distinct `@wf.workflow(name="...")`',
    ),
    Rule(
        "WF503",
        "unannotated-parameter",
        "leaves a workflow parameter without a type annotation",
        "annotate it; wf validates and decodes run inputs from the annotations",
    ),
    Rule(
        "WF504",
        "missing-await",
        "calls a step, a workflow or a wf operation without `await`",
        "write `await` before the call (to run several at once: `await asyncio.gather(...)`)",
    ),
    Rule(
        "WF505",
        "uncalled-await",
        "awaits a step or a workflow itself instead of a call of it",
        "call it: `await charge(order)`, not `await charge`",
    ),
    Rule(
        "WF506",
        "unguarded-start",
        "starts or runs workflows at the top level of a module that declares workflows",
        'put it under `if __name__ == "__main__":` (a worker that imports the module to resume'
        " its runs then does not start them again)",
    ),
]

RULES: dict[str, Rule] = {rule.code: rule for rule in _RULE_LIST}
"""Every rule, by code, for documentation and for validating ``--select`` / ``--ignore``."""


class CallRule(NamedTuple):
    """What flagging one call looks like: the code, a message template and an optional hint
    that is more specific than the rule's general one."""

    code: str
    message: str
    hint: str | None = None


def _each(prefix: str, names: str, rule: CallRule) -> dict[str, CallRule]:
    """``{prefix + name: rule}`` for each space-separated name: keeps the tables compact."""
    return {prefix + name: rule for name in names.split()}


def _words(text: str) -> frozenset[str]:
    return frozenset(text.split())


_CLOCK = CallRule("WF101", "`{name}()` reads the clock; on replay it returns a different time")
_RANDOM = CallRule("WF102", "`{name}()` draws unrecorded random numbers; on replay they differ")
_UUID = CallRule("WF103", "`{name}()` makes a random UUID; on replay it is a different one")
_OS_RANDOM = CallRule("WF104", "`{name}()` reads OS randomness; on replay it differs")
_HASH = CallRule(
    "WF105",
    "`{name}()` of a string, bytes, object or float NaN differs between processes (string"
    " hashes are randomised per process); a replay in another process gets another value",
    "for a stable number use a digest: `zlib.crc32(s.encode())`, `hashlib.sha256(...)`",
)
_ID = CallRule(
    "WF105",
    "`{name}()` is an object's address in this process; a replay in another process gets"
    " another value",
    "use a key of your own (an index, a name, `wf.uuid4()`)",
)
_PROCESS = CallRule(
    "WF106",
    "`{name}()` tells which process or host runs the code; a replay may run in another one",
)
_FILE = CallRule("WF201", "`{name}()` touches the file system outside a step; replay repeats it")
_NET = CallRule("WF202", "`{name}()` does network I/O outside a step; replay repeats it")
_PROC = CallRule("WF203", "`{name}()` starts or signals a process outside a step")
_DB = CallRule("WF204", "`{name}()` calls a database outside a step; replay repeats it")
_ENV = CallRule("WF205", "`{name}()` reads the environment, which can differ on replay")
_INPUT = CallRule("WF206", "`{name}()` reads console input outside a step; replay asks again")
_THREAD = CallRule("WF301", "`{name}()` runs work off the event loop where wf cannot record it")
_SLEEP_MSG = "`{name}()` is not durable: a crash loses the wait, and replay sleeps again"
_RACE_MSG = "`{name}()` depends on timing; which task wins is not recorded, so replay may differ"

# Calls flagged by their fully qualified name, after import aliases are resolved.
EXACT_CALLS: dict[str, CallRule] = {
    **_each(
        "time.",
        "time time_ns monotonic monotonic_ns perf_counter perf_counter_ns process_time"
        " process_time_ns thread_time thread_time_ns",
        _CLOCK,
    ),
    "datetime.datetime.now": _CLOCK,
    "datetime.datetime.utcnow": _CLOCK,
    "datetime.datetime.today": _CLOCK,
    "datetime.date.today": _CLOCK,
    "uuid.uuid1": _UUID,
    "uuid.uuid4": _UUID,
    "os.urandom": _OS_RANDOM,
    "os.getrandom": _OS_RANDOM,
    "builtins.hash": _HASH,
    "builtins.id": _ID,
    **_each("os.", "getpid getppid getlogin uname cpu_count", _PROCESS),
    **_each("platform.", "node uname", _PROCESS),
    # Exact names win over the `socket` prefix (WF202): these read no network.
    "socket.gethostname": _PROCESS,
    "socket.getfqdn": _PROCESS,
    "getpass.getuser": _PROCESS,
    "builtins.open": _FILE,
    "io.open": _FILE,
    **_each(
        "os.",
        "open fdopen listdir scandir walk remove unlink rename replace makedirs mkdir rmdir"
        " removedirs stat lstat chmod truncate getcwd path.exists path.isfile path.isdir"
        " path.getsize path.getmtime path.getctime path.getatime",
        _FILE,
    ),
    "pathlib.Path.cwd": _FILE,
    "pathlib.Path.home": _FILE,
    "glob.glob": _FILE,
    "glob.iglob": _FILE,
    "asyncio.open_connection": _NET,
    "asyncio.start_server": _NET,
    "asyncio.open_unix_connection": _NET,
    "asyncio.create_subprocess_exec": _PROC,
    "asyncio.create_subprocess_shell": _PROC,
    **_each(
        "os.",
        "system popen fork forkpty kill killpg posix_spawn posix_spawnp execl execle execlp"
        " execlpe execv execve execvp execvpe spawnl spawnle spawnlp spawnlpe spawnv spawnve"
        " spawnvp spawnvpe",
        _PROC,
    ),
    "os.getenv": _ENV,
    "os.getenvb": _ENV,
    "builtins.input": _INPUT,
    "getpass.getpass": _INPUT,
    "asyncio.to_thread": _THREAD,
    "asyncio.run_coroutine_threadsafe": _THREAD,
    "time.sleep": CallRule("WF302", _SLEEP_MSG, "use `await wf.sleep(...)`, a durable timer"),
    "asyncio.sleep": CallRule("WF302", _SLEEP_MSG, "use `await wf.sleep(...)`, a durable timer"),
    "asyncio.wait": CallRule("WF303", _RACE_MSG, "use `wf.select(...)` or `wf.first(...)`"),
    "asyncio.as_completed": CallRule("WF303", _RACE_MSG, "use `wf.select(...)`"),
    "asyncio.wait_for": CallRule("WF303", _RACE_MSG, "use `wf.timeout(...)`"),
    "asyncio.timeout": CallRule("WF303", _RACE_MSG, "use `wf.timeout(...)`"),
    "asyncio.timeout_at": CallRule("WF303", _RACE_MSG, "use `wf.timeout(...)`"),
}

# Calls flagged because they live in a module (or class) that is off limits as a whole.
# Matched on whole dotted components: "random" covers "random.choice" but not "randomize".
PREFIX_CALLS: dict[str, CallRule] = {
    "random": _RANDOM,
    "numpy.random": _RANDOM,
    "secrets": _OS_RANDOM,
    "shutil": _FILE,
    "tempfile": _FILE,
    **_each(
        "",
        "socket ssl requests httpx urllib.request urllib3 aiohttp http.client ftplib smtplib"
        " imaplib poplib websockets grpc boto3 botocore paramiko",
        _NET,
    ),
    "subprocess": _PROC,
    "pty": _PROC,
    **_each(
        "",
        "psycopg psycopg2 psycopg_pool sqlite3 aiosqlite asyncpg redis aioredis sqlalchemy"
        " pymongo motor mysql MySQLdb pymysql aiomysql duckdb cassandra elasticsearch peewee",
        _DB,
    ),
    "sys.stdin": _INPUT,
    **_each("", "threading _thread concurrent.futures multiprocessing", _THREAD),
}

# `time.localtime()` reads the clock, `time.localtime(ts)` only converts: flag the no-arg form.
CLOCK_WITHOUT_ARGS = frozenset({"time.localtime", "time.gmtime", "time.ctime", "time.asctime"})
CLOCK_RULE = _CLOCK

# `random.Random(42)` is a private, seeded generator and replays exactly; unseeded it does not.
SEEDABLE = frozenset({"random.Random"})

# Methods that are flagged whatever the receiver, because the name is unambiguous.
METHOD_CALLS: dict[str, CallRule] = {"run_in_executor": _THREAD}

# Methods of pathlib.Path that touch the disk (pure path arithmetic is fine).
PATH_IO_METHODS = _words(
    "open read_text read_bytes write_text write_bytes touch unlink mkdir rmdir iterdir glob"
    " rglob exists stat is_file is_dir rename replace resolve chmod samefile walk"
)
PATH_CLASSES = frozenset({"pathlib.Path", "pathlib.PosixPath", "pathlib.WindowsPath"})
FILE_RULE = _FILE

ENVIRON = "os.environ"
ENVIRON_MESSAGE = "`{name}` reads the environment, which can differ on replay"
# Module attributes whose every use is flagged (not only calls): the code and message for each.
WATCHED_ATTRS: dict[str, CallRule] = {
    ENVIRON: CallRule("WF205", ENVIRON_MESSAGE),
    "sys.argv": CallRule(
        "WF106",
        "`{name}` is the command line of the process that runs the code; a replay may run in"
        " another one",
    ),
    "sys.orig_argv": CallRule(
        "WF106",
        "`{name}` is the command line of the process that runs the code; a replay may run in"
        " another one",
    ),
}
# The last component of each, for the indexer's cheap first filter.
WATCHED_ATTR_NAMES = frozenset(name.rpartition(".")[2] for name in WATCHED_ATTRS)

# `loop.time()` on an event loop is the loop's monotonic clock.
LOOP_FACTORIES = frozenset(
    {"asyncio.get_running_loop", "asyncio.get_event_loop", "asyncio.new_event_loop"}
)
# A module-level generator is shared by every run in the process, seeded or not.
GENERATOR_CLASSES = frozenset({"random.Random", "random.SystemRandom"})

# Methods that change the list, dict, set or deque they are called on (WF404 on a module-level
# object).
MUTATING_METHODS = _words(
    "append extend insert remove pop clear update add discard setdefault popitem sort reverse"
    " difference_update intersection_update symmetric_difference_update appendleft extendleft"
    " popleft rotate"
)
# What `except` catches the cancellation wf suspends and cancels runs with (WF306).
CANCELLATION_CATCHERS = frozenset(
    {
        "builtins.BaseException",
        "asyncio.CancelledError",
        "asyncio.exceptions.CancelledError",
        "concurrent.futures.CancelledError",
    }
)

# Calls that consume an iterable in order; given a set, their result depends on hash order.
ORDERED_CONSUMERS = frozenset(
    {"builtins.list", "builtins.tuple", "builtins.enumerate", "builtins.iter", "builtins.zip"}
)
# Calls whose result does not depend on the order they consume their argument in: a set fed
# straight into one of these (`sorted(list(s))`, `sum(x for x in s)`) is not flagged.
UNORDERED_CONSUMERS = frozenset(
    "builtins." + name
    for name in ("sorted", "len", "set", "frozenset", "sum", "min", "max", "any", "all")
)


# wf's public names (docs/DESIGN "Public names"), for telling what `from wf import *` binds.
WF_PUBLIC_NAMES = _words(
    "workflow step FatalError RetryableError step_id sleep sleep_until now random uuid4"
    " create_hook resume_hook stream_writer rollback start Run RunStatus get_run"
    " NondeterminismError RunFailed RunCancelled RunNotFound select first timeout"
)


def lookup_call(qualname: str) -> CallRule | None:
    """The rule a call to ``qualname`` breaks, if any; exact names win over module prefixes."""
    rule = EXACT_CALLS.get(qualname)
    if rule is not None:
        return rule
    prefix = qualname
    while "." in prefix:
        prefix = prefix.rpartition(".")[0]
        rule = PREFIX_CALLS.get(prefix)
        if rule is not None:
            return rule
    return None
