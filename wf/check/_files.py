"""Finding the files to check, naming their modules, and parsing them (once)."""

from __future__ import annotations

import ast
import io
import os
import stat
import tokenize
import warnings
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path

from wf._syntax import parse_source
from wf.check._config import excluded
from wf.check._index import ModuleIndex, index_module
from wf.check._model import UNLISTED_DIRECTORY, CheckConfig, CheckUsageError, Finding

# Directories no one means to check; ruff skips the same kind by default.
_SKIPPED_DIRS = frozenset(
    {"__pycache__", "node_modules", "site-packages", "venv", "build", "dist", "__pypackages__"}
)
_EXTRA_ALIAS_LEVELS = 3
# Cached syntax trees stay alive in the host process (and make its garbage collections longer),
# so only keep as much as a large application would have.
_CACHE_MAX_LINES = 300_000


@dataclass(frozen=True)
class SourceFile:
    """A file to check: where it is, how to show it, and the module names it answers to."""

    path: Path
    display: str
    module: str
    is_package: bool
    aliases: tuple[str, ...]


def discover(paths: Sequence[Path], config: CheckConfig) -> tuple[list[SourceFile], list[Finding]]:
    """The Python files under ``paths``, each once, in a stable order, and a ``read-error``
    for each directory that could not be listed (its files would go unchecked unsaid).

    Raises :class:`CheckUsageError` for a path that does not exist, or is neither a file nor a
    directory.
    """
    root = (config.root or Path.cwd()).resolve()
    seen: set[Path] = set()
    found: list[SourceFile] = []
    errors: list[Finding] = []
    package_dirs: dict[Path, bool] = {}
    for given in paths:
        if not given.exists():
            raise CheckUsageError(f"{given}: no such file or directory")
        if not given.is_file() and not given.is_dir():  # /dev/null, a pipe: nothing to read
            raise CheckUsageError(f"{given}: not a file or a directory")
        candidates = [given] if given.is_file() else _walk(given, config.exclude, root, errors)
        for path in candidates:
            key = resolved(path)
            if key not in seen:
                seen.add(key)
                found.append(_source_file(path, key, package_dirs))
    return found, errors


def resolved(path: Path) -> Path:
    """``path`` made absolute with its symlinks resolved; as written (made absolute) when they
    cannot be: a symlink loop is then a ``read-error`` of that file when it is read, not an
    error that stops the whole check."""
    try:
        return path.resolve()
    except (RuntimeError, OSError):  # RuntimeError: a symlink loop before Python 3.13
        return Path(os.path.abspath(path))


def _walk(
    directory: Path, patterns: tuple[str, ...], root: Path, errors: list[Finding]
) -> Iterator[Path]:
    def unlisted(exc: OSError) -> None:
        # os.walk skips a directory it cannot list; say so, or a CI gate passes on files it
        # never saw.
        where = os.path.normpath(exc.filename if exc.filename is not None else directory)
        why = exc.strerror or str(exc)
        errors.append(Finding(where, 1, 1, "read-error", f"{UNLISTED_DIRECTORY}: {why}", ""))

    for current, dirnames, filenames in os.walk(directory, onerror=unlisted):
        base = Path(current)
        dirnames[:] = sorted(
            d
            for d in dirnames
            if not d.startswith(".")
            and d not in _SKIPPED_DIRS
            and not excluded(base / d, patterns, root)
        )
        for name in sorted(filenames):
            if name.endswith(".py") and not excluded(base / name, patterns, root):
                yield base / name


def _source_file(path: Path, resolved: Path, package_dirs: dict[Path, bool]) -> SourceFile:
    def is_package_dir(directory: Path) -> bool:
        if directory not in package_dirs:
            package_dirs[directory] = (directory / "__init__.py").is_file()
        return package_dirs[directory]

    is_package = resolved.name == "__init__.py"
    directory = resolved.parent
    if is_package:
        parts = [directory.name]
        directory = directory.parent
    else:
        parts = [resolved.stem]
    while is_package_dir(directory) and directory.parent != directory:
        parts.insert(0, directory.name)
        directory = directory.parent
    # Directories above the last package may be namespace packages or source roots: answer to
    # those longer names too, so `from app.flows import x` resolves without an __init__.py.
    aliases = []
    longer = list(parts)
    for _ in range(_EXTRA_ALIAS_LEVELS):
        if not directory.name.isidentifier():
            break
        longer.insert(0, directory.name)
        aliases.append(".".join(longer))
        directory = directory.parent
    display = os.path.normpath(path)
    return SourceFile(path, display, ".".join(parts), is_package, tuple(aliases))


# Parsed modules by file, reused while the source is byte-for-byte the same: `wf dev` re-checks
# on every save, and most files did not change.
_cache: dict[tuple[Path, str, str], tuple[bytes, ModuleIndex]] = {}
_cached_lines = 0


def load(source_file: SourceFile) -> ModuleIndex | Finding:
    """Parse and index a file, or describe why it cannot be (syntax error, unreadable)."""
    display = source_file.display
    try:
        data = _read_file(source_file.path)
    except OSError as exc:
        return Finding(display, 1, 1, "read-error", f"cannot read file: {exc.strerror}", "")
    if data is None:
        why = "not a regular file (a FIFO, socket or device named like a module)"
        return Finding(display, 1, 1, "read-error", f"cannot read file: {why}", "")
    key = (resolved(source_file.path), display, source_file.module)
    cached = _cache.get(key)
    if cached is not None and cached[0] == data:
        return cached[1]
    # The bytes are parsed as an import parses them: a PEP 263 coding line, else UTF-8, and
    # a stray byte in a comment accepted (Python's tokenizer does not decode comments).
    result = parse(data, display, source_file.module, source_file.is_package)
    if isinstance(result, ModuleIndex):
        _remember(key, data, result)
    return result


def _read_file(path: Path) -> bytes | None:
    """The file's bytes; None if it is no regular file. Opened without waiting: reading a
    FIFO named ``x.py`` would wait for a writer for ever, and hold every other file's check."""
    with open(path, "rb", opener=lambda name, flags: os.open(name, flags | os.O_NONBLOCK)) as file:
        if not stat.S_ISREG(os.fstat(file.fileno()).st_mode):
            return None
        return file.read()


def _remember(key: tuple[Path, str, str], data: bytes, module: ModuleIndex) -> None:
    global _cached_lines
    previous = _cache.pop(key, None)
    if previous is not None:
        _cached_lines -= len(previous[1].lines)
    if _cached_lines + len(module.lines) <= _CACHE_MAX_LINES:
        _cache[key] = (data, module)
        _cached_lines += len(module.lines)


def parse(
    source: str | bytes, display: str, module: str, is_package: bool
) -> ModuleIndex | Finding:
    """Parse and index source text (or a file's bytes, decoded as an import decodes them), or
    return the syntax error as a located finding."""
    try:
        tree = parse_source(source, filename=display)
    except SyntaxError as exc:
        if isinstance(source, bytes) and _undecodable(exc):
            why = f"cannot decode file: {exc.msg}"
            return Finding(display, max(exc.lineno or 1, 1), _col(exc), "read-error", why, "")
        return _syntax_error(display, exc)
    except (ValueError, RecursionError) as exc:  # null bytes; absurd nesting
        return Finding(display, 1, 1, "syntax-error", f"cannot parse: {exc}", "")
    except MemoryError:  # what the parser raises for thousands of nested unary operators
        why = "nested too deeply (the parser ran out of memory)"
        return Finding(display, 1, 1, "syntax-error", f"cannot parse: {why}", "")
    refused = _compile(tree, source, display)
    if refused is not None:
        return refused
    text = source if isinstance(source, str) else _text(source)
    return index_module(tree, text, module, display, is_package)


def _undecodable(exc: SyntaxError) -> bool:
    """Whether Python refused the bytes for their encoding (not for their syntax: a bad
    escape in a string, `"C:\\Users"`, is a unicode error of the escape codecs)."""
    if exc.msg.startswith(("unknown encoding", "encoding problem")):
        return True
    return exc.msg.startswith("(unicode error)") and not exc.msg.startswith(
        ("(unicode error) 'unicodeescape'", "(unicode error) 'rawunicodeescape'")
    )


def _text(data: bytes) -> str:
    """The text of bytes Python parsed: in their declared encoding, else UTF-8 (a byte a
    comment holds that the encoding does not is replaced: only comments may hold one)."""
    try:
        encoding, _ = tokenize.detect_encoding(io.BytesIO(data).readline)
    except SyntaxError:  # not reached: the parser refused such a coding line already
        encoding = "utf-8"
    return data.decode(encoding, errors="replace")


def _compile(tree: ast.Module, source: str | bytes, display: str) -> Finding | None:
    """Why Python would not compile the module, or None. The parser accepts what only the
    compiler refuses (`lambda x: await f(x)`, `return` outside a function, a misplaced
    `nonlocal`): such a file would not import either."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # `x is 1` and the like: not ours to report
        try:
            compile(tree, display, "exec", dont_inherit=True)
            return None
        except SyntaxError as exc:
            return _syntax_error(display, exc)
        except RecursionError:
            pass
        # Compiling a syntax tree recurses deeper than compiling the text it came from (a sum
        # of 1000 terms): ask the compiler about the text, as an import does.
        try:
            compile(source, display, "exec", dont_inherit=True)
            return None
        except SyntaxError as exc:
            return _syntax_error(display, exc)
        except (RecursionError, MemoryError) as exc:
            why = str(exc) or "nested too deeply"
            return Finding(display, 1, 1, "syntax-error", f"cannot parse: {why}", "")


def _syntax_error(display: str, exc: SyntaxError) -> Finding:
    line = max(exc.lineno or 1, 1)
    return Finding(display, line, _col(exc), "syntax-error", f"syntax error: {exc.msg}", "")


def _col(exc: SyntaxError) -> int:
    return max(exc.offset or 1, 1)  # an encoding error has offset -1
