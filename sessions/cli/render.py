"""Everything the ``sessions`` command prints goes through this module.

* User-controlled text (session ids, item content, tool names, file paths, URLs) is
  shown literally. rich never interprets it: it reaches rich as ``Text`` on a console
  whose markup, emoji codes and highlighting are off, so ``evil[/bold]`` or
  ``:smile:`` print as typed. Control characters and other characters that drive a
  terminal or reorder text (C0, DEL, C1, bidirectional overrides, line separators,
  lone surrogates) are shown as escapes: ``\\x1b``, ``\\n`` (in one-line contexts),
  ``\\u202e``. A backslash is shown as itself, so ``\\x1b`` typed literally and an
  escaped ESC look alike; ``--json`` output tells them apart.
* ``--json`` output is always valid JSON (no ``NaN``), with those same characters as
  ``\\uXXXX`` escapes; a stored row that is not a JSON object becomes an error object
  ``{"error": "corrupt row", "key": ..., "reason": ..., "raw": ...}``.
* Every failure becomes ONE line on stderr, ``error: ...``, with passwords masked
  (:func:`sessions._model.redact.redact`), and an exit status: 1 for an operation that
  failed, 2 for a usage error, 130 when interrupted, 141 when the reader of standard
  output went away.

rich is imported only by the functions that draw tables or progress bars.
"""

from __future__ import annotations

import asyncio
import io
import json
import os
import re
import sys
import textwrap
from collections.abc import Awaitable, Callable, Iterable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import datetime, timezone
from typing import TYPE_CHECKING, Any, NoReturn, TextIO

from .._model.redact import redact

if TYPE_CHECKING:
    from rich.console import Console

__all__ = [
    "CliError",
    "Column",
    "Entry",
    "JsonArray",
    "JsonObjectStream",
    "UsageError",
    "confirm",
    "error_line",
    "escape_json",
    "exit_code",
    "fail",
    "heading",
    "iso",
    "json_stdout",
    "json_text",
    "literal",
    "plural",
    "progress",
    "run_async",
    "run_sync",
    "say",
    "stored_json",
    "table",
    "transcript",
    "warn",
    "when",
]

DEBUG_ENV = "SESSIONS_DEBUG"

# Characters never written raw. In one-line contexts '\n' joins them.
_DANGER = (
    "\x00-\x09\x0b-\x1f\x7f-\x9f"  # C0 (but '\n'), DEL, C1
    "\u061c\u200e\u200f\u202a-\u202e\u2066-\u2069"  # bidirectional marks and overrides
    "\u2028\u2029"  # line and paragraph separators
    "\ud800-\udfff"  # lone surrogates (cannot even be encoded)
)
_UNSAFE_MULTILINE = re.compile(f"[{_DANGER}]")
_UNSAFE = re.compile(f"[{_DANGER}\n]")
_JSON_UNSAFE = re.compile(
    "[\x7f-\x9f\u061c\u200e\u200f\u202a-\u202e\u2066-\u2069\u2028\u2029\ud800-\udfff]"
)
_NAMED = {"\n": "\\n", "\t": "\\t", "\r": "\\r"}


# --------------------------------------------------------------------------- escaping


def _escape(match: re.Match[str]) -> str:
    char = match.group()
    named = _NAMED.get(char)
    if named is not None:
        return named
    code = ord(char)
    return f"\\x{code:02x}" if code < 0x100 else f"\\u{code:04x}"


def literal(text: str, *, multiline: bool = False) -> str:
    """``text`` with every character that could drive a terminal shown as an escape.

    ``multiline=True`` keeps ``\\n`` as a line break (item content in ``show``).
    """
    return (_UNSAFE_MULTILINE if multiline else _UNSAFE).sub(_escape, text)


def escape_json(text: str) -> str:
    """JSON text with DEL, C1, bidi and separator characters as ``\\uXXXX`` escapes.

    Valid on any JSON text: those characters can only occur inside strings (JSON's
    own syntax is ASCII), where an escape means the same character.
    """
    return _JSON_UNSAFE.sub(lambda m: f"\\u{ord(m.group()):04x}", text)


def json_text(value: Any, *, indent: int | None = None) -> str:
    """``value`` as strict JSON (no NaN), safe to print (see :func:`escape_json`)."""
    text = json.dumps(value, ensure_ascii=False, allow_nan=False, indent=indent)
    return escape_json(text)


def _reject_constant(name: str) -> Any:
    raise ValueError(f"{name} is not JSON")


def stored_json(key: int, raw: str) -> str:
    """One stored row as JSON: its own text when it is a JSON object, else an error
    object naming the row's key, what is wrong, and the raw text."""
    try:
        value = json.loads(raw, parse_constant=_reject_constant)
    except (ValueError, RecursionError) as exc:
        reason = f"not valid JSON: {exc}"
    else:
        if isinstance(value, dict):
            return escape_json(raw)
        reason = f"a JSON {type(value).__name__}, not an object"
    return json_text({"error": "corrupt row", "key": key, "reason": reason, "raw": raw})


# --------------------------------------------------------------------------- formatting


def when(moment: datetime) -> str:
    if moment.tzinfo is None:
        moment = moment.replace(tzinfo=timezone.utc)
    return moment.astimezone(timezone.utc).strftime("%Y-%m-%d %H:%M:%S")


def iso(moment: datetime) -> str:
    if moment.tzinfo is None:
        moment = moment.replace(tzinfo=timezone.utc)
    return moment.isoformat()


def plural(count: int, noun: str) -> str:
    return f"{count} {noun}{'' if count == 1 else 's'}"


# --------------------------------------------------------------------------- output


def say(text: str = "") -> None:
    """One line (or several: ``text`` may hold ``\\n`` between lines) on stdout.

    Every line is escaped: pass user-controlled text only through here (or
    :func:`table` / :func:`transcript`), never ``print`` it.
    """
    lines = text.split("\n")
    sys.stdout.write("".join(literal(line) + "\n" for line in lines))


def warn(text: str) -> None:
    """One escaped line on stderr (not an error: a note next to output)."""
    sys.stderr.write(literal(" ".join(text.split("\n"))) + "\n")
    sys.stderr.flush()


def _console(*, stderr: bool = False) -> Console:
    from rich.console import Console

    return Console(stderr=stderr, highlight=False, markup=False, emoji=False)


@dataclass(frozen=True)
class Column:
    header: str
    right: bool = False  # right-justified (numbers)
    fold: bool = False  # long values wrap within the column (else never wrapped)


def table(columns: Sequence[Column], rows: Iterable[Sequence[str]]) -> None:
    """A plain table on stdout; every cell escaped and given to rich as ``Text``."""
    from rich import box
    from rich.table import Table
    from rich.text import Text

    grid = Table(box=box.SIMPLE_HEAD, show_edge=False, pad_edge=False, header_style="bold")
    for column in columns:
        grid.add_column(
            column.header,
            justify="right" if column.right else "left",
            overflow="fold" if column.fold else "ellipsis",
            no_wrap=not column.fold,
        )
    for row in rows:
        grid.add_row(*(Text(literal(cell)) for cell in row))
    _console().print(grid)


@dataclass(frozen=True)
class Entry:
    """One item of ``sessions show``: ``#number label body [call_id]``."""

    number: int
    label: str
    body: str
    call_id: str = ""
    style: str = ""


def transcript(entries: Sequence[Entry], count: int) -> None:
    """Items of ``sessions show`` with hanging indents; ``count`` sizes the number column.

    Bodies keep their line breaks; everything else that could drive the terminal is
    escaped. One print per call: printing line by line is slow.
    """
    from rich.text import Text

    if not entries:
        return
    console = _console()
    width = len(str(max(count, 1))) + 1
    indent = " " * (width + 13)
    wrap_at = max(console.width - len(indent), 20)
    block = Text()
    for entry in entries:
        if block:
            block.append("\n")
        block.append(f"#{entry.number}".rjust(width) + " ", "dim")
        block.append(literal(entry.label).ljust(12), entry.style)
        body = literal(entry.body, multiline=True)
        if entry.call_id:
            body += f"  [{literal(entry.call_id)}]"
        block.append(_hang(body, indent, wrap_at))
    console.print(block, soft_wrap=True)


def _hang(text: str, indent: str, width: int) -> str:
    """``text`` wrapped to ``width`` columns, continuation lines indented."""
    lines: list[str] = []
    for paragraph in text.split("\n"):
        lines.extend(
            textwrap.wrap(paragraph, width, break_long_words=True, replace_whitespace=False) or [""]
        )
    return ("\n" + indent).join(lines)


def heading(parts: Sequence[tuple[str, str]]) -> None:
    """One line of ``(text, style)`` parts on stdout, each part escaped."""
    from rich.text import Text

    line = Text()
    for text, style in parts:
        line.append(literal(text), style)
    _console().print(line, soft_wrap=True)


class _Progress:
    def __init__(self, bar: Any, task: Any) -> None:
        self._bar = bar
        self._task = task

    def advance(self, n: int) -> None:
        self._bar.advance(self._task, n)

    def total(self, n: int) -> None:
        self._bar.update(self._task, total=n)


@contextmanager
def progress(description: str, total: int | None) -> Iterator[_Progress]:
    """A progress bar on stderr, drawn only on a terminal; yields its handle."""
    from rich.progress import (
        BarColumn,
        MofNCompleteColumn,
        Progress,
        TextColumn,
        TimeElapsedColumn,
        TimeRemainingColumn,
    )

    err = _console(stderr=True)
    bar = Progress(
        TextColumn("{task.description}", markup=False),
        BarColumn(),
        MofNCompleteColumn(),
        TimeElapsedColumn(),
        TimeRemainingColumn(),
        console=err,
        transient=True,
        disable=not err.is_terminal,
    )
    with bar:
        yield _Progress(bar, bar.add_task(literal(description), total=total))


def confirm(question: str) -> bool:
    """Ask on stderr, read an answer from stdin (no answer, or end of input: no)."""
    sys.stderr.write(f"{literal(question)} [y/N]: ")
    sys.stderr.flush()
    answer = sys.stdin.readline()
    if not sys.stdin.isatty():  # the answer was not echoed: end the prompt's line
        sys.stderr.write("\n")
    return answer.strip().lower() in ("y", "yes")


class JsonArray:
    """A JSON array streamed to stdout, one element per line (from :func:`json_text`
    or :func:`stored_json`, which are safe to print)."""

    def __init__(self) -> None:
        self._first = True
        sys.stdout.write("[")

    def add(self, element: str) -> None:
        sys.stdout.write(("\n  " if self._first else ",\n  ") + element)
        self._first = False

    def close(self) -> None:
        sys.stdout.write("]\n" if self._first else "\n]\n")


class JsonObjectStream:
    """A JSON object streamed to stdout: the fields of ``head``, then the array
    ``field`` one element at a time (from :func:`json_text`), then the fields given to
    :meth:`close`. One element per line."""

    def __init__(self, head: dict[str, Any], field: str) -> None:
        sys.stdout.write("{")
        for key, value in head.items():
            sys.stdout.write(f"\n  {json_text(key)}: {json_text(value)},")
        sys.stdout.write(f"\n  {json_text(field)}: [")
        self._first = True

    def add(self, element: str) -> None:
        sys.stdout.write(("\n    " if self._first else ",\n    ") + element)
        self._first = False

    def close(self, tail: dict[str, Any]) -> None:
        sys.stdout.write("]" if self._first else "\n  ]")
        for key, value in tail.items():
            sys.stdout.write(f",\n  {json_text(key)}: {json_text(value)}")
        sys.stdout.write("\n}\n")


class _JsonGuard(io.TextIOBase):
    """A text stream that escapes what :func:`escape_json` escapes, then writes on."""

    def __init__(self, target: TextIO) -> None:
        self._target = target

    def write(self, text: str) -> int:
        self._target.write(escape_json(text))
        return len(text)

    def flush(self) -> None:
        self._target.flush()

    def writable(self) -> bool:
        return True


@contextmanager
def json_stdout() -> Iterator[None]:
    """While inside, JSON written to ``sys.stdout`` by other code is made safe to print."""
    original = sys.stdout
    sys.stdout = _JsonGuard(original)
    try:
        yield
    finally:
        sys.stdout = original


# --------------------------------------------------------------------------- errors


class CliError(Exception):
    """A failure to report as one line, with an exit status."""

    def __init__(self, message: str, code: int = 1) -> None:
        super().__init__(message)
        self.code = code


class UsageError(CliError):
    """A command line that cannot work: exit status 2, with a pointer to ``--help``."""

    def __init__(self, message: str, command: str = "sessions") -> None:
        super().__init__(f"{message} (see '{command} --help')", 2)


def error_line(message: str, secrets: Sequence[str | None] = ()) -> str:
    """``error: ...`` on one line, passwords masked, every character printable."""
    text = " ".join(redact(message, secrets).split()) or "failed"
    return f"error: {literal(text)}"


def fail(message: str, code: int = 1) -> NoReturn:
    raise CliError(message, code)


def exit_code(exc: BaseException, secrets: Sequence[str | None]) -> int:
    """Report ``exc`` (one line on stderr) and return the exit status it means."""
    from ..errors import SessionError

    if isinstance(exc, BrokenPipeError):  # the reader went away (``sessions show x | head``)
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        return 141
    code, message = 1, f"{type(exc).__name__}: {exc}"
    if isinstance(exc, CliError):
        code, message = exc.code, str(exc)
    elif isinstance(exc, KeyboardInterrupt):
        code, message = 130, "interrupted"
    elif isinstance(exc, SessionError):
        message = str(exc)
    elif isinstance(exc, (ValueError, TypeError)):
        code, message = 2, str(exc)
    elif isinstance(exc, OSError):
        message = str(exc)
        if exc.strerror and exc.filename and exc.strerror in message:
            message = f"{exc.filename}: {exc.strerror}"
    elif os.environ.get(DEBUG_ENV):
        raise exc
    sys.stderr.write(error_line(message, secrets) + "\n")
    sys.stderr.flush()
    return code


def run_sync(work: Callable[[], int | None], secrets: Sequence[str | None]) -> int:
    """Run one command's work; any failure becomes one line and an exit status."""
    try:
        return work() or 0
    except (Exception, KeyboardInterrupt) as exc:  # noqa: BLE001 - reported as one line
        return exit_code(exc, secrets)


def run_async(work: Callable[[], Awaitable[int | None]], secrets: Sequence[str | None]) -> int:
    """:func:`run_sync` for a coroutine function (run in a fresh event loop)."""

    async def main() -> int | None:
        return await work()

    return run_sync(lambda: asyncio.run(main()), secrets)
