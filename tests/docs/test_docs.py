"""Every ``console`` and ``python`` example in README.md and docs/*.md runs, as written.

How the examples are read (README.md, "Development", says the same for writers):

* ``console`` blocks: each ``$ `` line is a command, run by bash in a directory kept
  for the whole document (so one block can use the files of the blocks before it);
  exported variables carry over too. The lines up to the next ``$ `` line are its
  output (stdout and stderr, interleaved). ``[exit N]`` as the last of them is its exit
  status (else 0). A line ending in ``[y/N]: ANSWER`` is a prompt: ANSWER is fed to
  the command's stdin. Output is compared line by line after timestamps and file
  sizes are replaced on both sides; a line ``...`` stands for any number of lines,
  a line ending in ``...`` for any line starting with what comes before.
  ``sessions`` is this checkout's command, ``python`` the interpreter running the
  tests; ``COLUMNS`` is 90.
* ``python`` blocks run with top-level ``await`` allowed (in an event loop; a block
  without top-level ``await`` runs as a script, outside any loop), each in a fresh
  namespace and an empty directory of its own; they pass when they raise nothing.
  Whatever the block leaves open (stores, sessions, clients) is closed afterwards.
* A marker on the line(s) right before a block changes that: ``<!-- doctest: skip
  REASON -->`` (not run; the reason shows in pytest's skip summary) and
  ``<!-- doctest: fixture NAME... -->`` (see :data:`FIXTURES`). Blocks in any other
  language (``bash`` install instructions, ``ini``) are not examples and not run.
"""

from __future__ import annotations

import ast
import asyncio
import contextlib
import difflib
import inspect
import os
import re
import subprocess
import sys
import uuid
from collections.abc import AsyncIterator, Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import pytest

from sessions._model.redact import redact
from tests.conftest import IN_CI, PG_DSN, require_postgres, run_outside_loop

ROOT = Path(__file__).resolve().parents[2]
DOCS = ["README.md", *sorted(p.relative_to(ROOT).as_posix() for p in ROOT.glob("docs/*.md"))]
EXAMPLES = ("console", "python")
COLUMNS = "90"

# --------------------------------------------------------------------------- reading


@dataclass(frozen=True)
class Block:
    doc: str
    line: int  # of the opening fence, 1-based
    lang: str
    text: str
    skip: str | None = None
    fixtures: tuple[str, ...] = ()

    @property
    def id(self) -> str:
        return f"{self.doc}:{self.line}"


_MARKER = re.compile(r"<!--\s*doctest:\s*(.*?)\s*-->")
_COMMENT = re.compile(r"<!--.*-->")  # other comments may sit between a marker and its block
_FENCE = re.compile(r"^\s*(`{3,}|~{3,})\s*([\w+-]*)")


class MarkerError(ValueError):
    pass


def parse(doc: str, text: str) -> list[Block]:
    """The fenced blocks of ``text`` with the markers that precede them."""
    blocks: list[Block] = []
    lines = text.splitlines()
    pending: list[tuple[int, str]] = []
    i = 0
    while i < len(lines):
        stripped = lines[i].strip()
        marker = _MARKER.fullmatch(stripped)
        fence = _FENCE.match(lines[i])
        if marker:
            pending.append((i + 1, marker.group(1)))
        elif fence:
            end = next(
                (
                    j
                    for j in range(i + 1, len(lines))
                    if lines[j].strip().startswith(fence.group(1))
                ),
                len(lines),
            )
            blocks.append(_block(doc, i + 1, fence.group(2), lines[i + 1 : end], pending))
            pending, i = [], end
        elif stripped and pending and not _COMMENT.fullmatch(stripped):
            raise MarkerError(
                f"{doc}:{pending[0][0]}: a doctest marker must come right before a block"
            )
        i += 1
    if pending:
        raise MarkerError(f"{doc}:{pending[0][0]}: a doctest marker with no block after it")
    return blocks


def _block(
    doc: str, line: int, lang: str, body: list[str], markers: list[tuple[int, str]]
) -> Block:
    skip: str | None = None
    fixtures: list[str] = []
    for where, directive in markers:
        verb, _, rest = directive.partition(" ")
        if lang not in EXAMPLES:
            raise MarkerError(f"{doc}:{where}: only {' and '.join(EXAMPLES)} blocks run")
        if verb == "skip" and rest.strip():
            skip = rest.strip()
        elif verb == "fixture" and rest.split():
            unknown = [name for name in rest.split() if name not in FIXTURES]
            if unknown:
                raise MarkerError(
                    f"{doc}:{where}: unknown fixture {unknown} (known: {sorted(FIXTURES)})"
                )
            fixtures += rest.split()
        else:
            raise MarkerError(
                f"{doc}:{where}: expected 'skip REASON' or 'fixture NAME...', got {directive!r}"
            )
    return Block(doc, line, lang, "\n".join(body) + "\n", skip, tuple(fixtures))


def all_blocks() -> list[Block]:
    return [b for doc in DOCS for b in parse(doc, (ROOT / doc).read_text(encoding="utf-8"))]


# --------------------------------------------------------------------------- fixtures


@dataclass
class Setup:
    """What fixtures give one block."""

    workdir: Path
    doc: DocRun
    names: dict[str, Any] = field(default_factory=dict)  # python: ready values
    later: dict[str, Callable[[], Any]] = field(
        default_factory=dict
    )  # python: async context managers
    substitutions: list[tuple[str, str]] = field(default_factory=list)
    clear_redis: bool = False  # python: clear the RedisSessions the block leaves


Fixture = Callable[[Setup, Block], contextlib.AbstractContextManager[None]]


@contextlib.contextmanager
def sdk_weather_db(setup: Setup, block: Block) -> Iterator[None]:
    """``agents.db`` in the working directory, written by the Agents SDK's own
    ``SQLiteSession``: users ``user-ada`` and ``user-bob`` each asked a weather agent
    one question (4 items each: question, tool call, tool output, answer)."""
    from agents import SQLiteSession

    async def write() -> None:
        for user, city, weather in (
            (
                "ada",
                "Paris",
                "22°C, sunny, light wind from the west, humidity 40%, UV index 6 (high), sunset 21:47",
            ),
            ("bob", "Oslo", "12°C, cloudy"),
        ):
            session = SQLiteSession(f"user-{user}", setup.workdir / "agents.db")
            await session.add_items(
                [
                    {"role": "user", "content": f"What's the weather in {city}?"},
                    {
                        "type": "function_call",
                        "name": "get_weather",
                        "arguments": f'{{"city":"{city}"}}',
                        "call_id": f"call-user-{user}",
                    },
                    {
                        "type": "function_call_output",
                        "call_id": f"call-user-{user}",
                        "output": f"{city}: {weather}",
                    },
                    {
                        "role": "assistant",
                        "content": f"It is {weather.split(', ')[1]} in {city} today.",
                    },
                ]
            )
            session.close()

    run_outside_loop(write())
    yield


@contextlib.contextmanager
def postgres(setup: Setup, block: Block) -> Iterator[None]:
    """Every PostgreSQL URL in the block (and in its output) points to a database of
    this document's own on the test server (user and password kept as written: the
    test server trusts local connections). Python blocks also get ``dsn`` (that
    database), ``bouncer_dsn`` (the same: there is no PgBouncer here) and ``pool``
    (an asyncpg pool on it)."""
    require_postgres()
    dsn = setup.doc.database()
    for url in sorted(set(_PG_URL.findall(block.text)), key=len, reverse=True):
        new = _retarget(url, dsn)
        setup.substitutions += [(url, new), (redact(url), redact(new))]
    setup.names.update(dsn=dsn, bouncer_dsn=dsn)

    @contextlib.asynccontextmanager
    async def pool() -> AsyncIterator[Any]:
        import asyncpg

        created = await asyncpg.create_pool(dsn, min_size=1, max_size=2)
        try:
            yield created
        finally:
            await created.close()

    setup.later["pool"] = pool
    yield


_PG_URL = re.compile(r"postgres(?:ql)?(?:\+asyncpg)?://[^\s'\"]+")


def _retarget(url: str, dsn: str) -> str:
    """``url`` with the test server's user, host, port and database (same password and query)."""
    ours, theirs = urlsplit(dsn), urlsplit(url)
    password = f":{theirs.password}" if theirs.password else ""
    query = f"?{theirs.query}" if theirs.query else ""
    return f"{ours.scheme}://{ours.username}{password}@{ours.hostname}:{ours.port or 5432}{ours.path}{query}"


@contextlib.contextmanager
def scripted_agent(setup: Setup, block: Block) -> Iterator[None]:
    """``agent``: an ``Agent`` on a scripted model that answers every turn (no network,
    no API key); tracing is off while the block runs."""
    import agents
    from agents.testing import ScriptedModel, assistant_message

    model = ScriptedModel(
        [[assistant_message(f"Hello! ({n})", item_id=f"m-{n}")] for n in range(20)]
    )
    setup.names["agent"] = agents.Agent(name="assistant", instructions="Be brief.", model=model)
    agents.set_tracing_disabled(True)
    try:
        yield
    finally:
        agents.set_tracing_disabled(
            os.environ.get("OPENAI_AGENTS_DISABLE_TRACING", "") in ("1", "true")
        )


@contextlib.contextmanager
def redis(setup: Setup, block: Block) -> Iterator[None]:
    """A Redis server on 127.0.0.1:6379 is required (skipped without one, failed in CI).
    The sessions the block writes are cleared afterwards (``RedisSession.clear_session``)."""
    import redis as redis_client

    try:
        redis_client.Redis.from_url("redis://127.0.0.1:6379/0", socket_timeout=2).ping()
    except Exception as exc:  # noqa: BLE001 - reported as the skip reason
        if IN_CI:
            pytest.fail(f"CI is set, so the Redis example must run: {exc}", pytrace=False)
        pytest.skip(f"no Redis at 127.0.0.1:6379: {exc}")
    setup.clear_redis = True
    yield


FIXTURES: dict[str, Fixture] = {
    "sdk-weather-db": sdk_weather_db,
    "postgres": postgres,
    "scripted-agent": scripted_agent,
    "redis": redis,
}


# --------------------------------------------------------------------------- running


@dataclass
class DocRun:
    """One document's state: its console directory, exported variables, database."""

    doc: str
    root: Path
    done: set[int] = field(default_factory=set)
    _database: str | None = None

    @property
    def workdir(self) -> Path:
        path = self.root / "console"
        path.mkdir(parents=True, exist_ok=True)
        return path

    def database(self) -> str:
        if self._database is None:
            name = f"txs_doc_{os.getpid()}_{uuid.uuid4().hex[:8]}"
            run_outside_loop(_pg_execute(f'CREATE DATABASE "{name}"'))
            self._database = urlsplit(PG_DSN)._replace(path=f"/{name}").geturl()
        return self._database

    def close(self) -> None:
        if self._database is not None:
            name = urlsplit(self._database).path[1:]
            run_outside_loop(_pg_execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)'))


async def _pg_execute(statement: str) -> None:
    import asyncpg

    conn = await asyncpg.connect(PG_DSN)
    try:
        await conn.execute(statement)
    finally:
        await conn.close()


@contextlib.contextmanager
def fixtures_for(block: Block, setup: Setup) -> Iterator[None]:
    with contextlib.ExitStack() as stack:
        for name in block.fixtures:
            stack.enter_context(FIXTURES[name](setup, block))
        yield


def substitute(text: str, pairs: list[tuple[str, str]]) -> str:
    for old, new in pairs:
        text = text.replace(old, new)
    return text


# --------------------------------------------------------------------------- console


@dataclass
class Step:
    command: str
    expected: list[str]
    code: int = 0
    stdin: str = ""


_PROMPT = re.compile(r"^(.*\[y/N\]: )(\S+)$")
_EXIT = re.compile(r"^\[exit (\d+)\]$")


def steps(text: str) -> list[Step]:
    found: list[Step] = []
    lines = text.splitlines()
    i = 0
    while i < len(lines):
        if not lines[i].startswith("$ "):
            if lines[i].strip() and not found:
                raise MarkerError(f"console output before any '$ ' command: {lines[i]!r}")
            if found:
                found[-1].expected.append(lines[i])
            i += 1
            continue
        command = lines[i][2:]
        while command.endswith("\\") and i + 1 < len(lines):
            i += 1
            command = command[:-1] + "\n" + lines[i]
        found.append(Step(command, []))
        i += 1
    for step in found:
        while step.expected and not step.expected[-1].strip():
            step.expected.pop()
        if step.expected and (exit := _EXIT.match(step.expected[-1])):
            step.code = int(exit.group(1))
            step.expected.pop()
        for n, line in enumerate(step.expected):
            if prompt := _PROMPT.match(line):
                step.expected[n], step.stdin = prompt.group(1), prompt.group(2) + "\n"
    return found


_VOLATILE = [
    (
        re.compile(r"\d{4}-\d{2}-\d{2}[ T]\d{2}:\d{2}:\d{2}(?:\.\d+)?(?:[+-]\d{2}:\d{2}|Z)?"),
        "<time>",
    ),
    (re.compile(r"\b\d+(?:\.\d+)? KiB\b"), "<n> KiB"),
]


def normalize(lines: list[str]) -> list[str]:
    out = []
    for line in lines:
        for pattern, replacement in _VOLATILE:
            line = pattern.sub(replacement, line)
        out.append(line.rstrip())
    return out


def matches(expected: list[str], actual: list[str]) -> bool:
    if not expected:
        return not actual
    head, rest = expected[0], expected[1:]
    if head == "...":
        return any(matches(rest, actual[k:]) for k in range(len(actual) + 1))
    if not actual:
        return False
    same = actual[0].startswith(head[:-3]) if head.endswith("...") else actual[0] == head
    return same and matches(rest, actual[1:])


def console_env(bindir: Path) -> dict[str, str]:
    env = {
        k: v for k, v in os.environ.items() if k not in ("SESSIONS_DATABASE_URL", "OPENAI_API_KEY")
    }
    env.update(
        PATH=f"{bindir}{os.pathsep}{env.get('PATH', '')}",
        PYTHONPATH=str(ROOT),
        PYTHONUNBUFFERED="1",
        COLUMNS=COLUMNS,
        TERM="dumb",
    )
    return env


def run_console(block: Block, run: DocRun) -> None:
    setup = Setup(run.workdir, run)
    bindir = run.root / "bin"
    bindir.mkdir(exist_ok=True)
    shim = bindir / "sessions"
    shim.write_text(f'#!/bin/sh\nexec "{sys.executable}" -m sessions "$@"\n')
    shim.chmod(0o755)
    python = bindir / "python"  # the interpreter running the tests (it has the SDK)
    python.write_text(f'#!/bin/sh\nexec "{sys.executable}" "$@"\n')
    python.chmod(0o755)
    envfile = run.root / "exported.sh"
    envfile.touch()
    with fixtures_for(block, setup):
        for step in steps(block.text):
            command = substitute(step.command, setup.substitutions)
            script = f'. "{envfile}"\n{command}\nrc=$?\nexport -p > "{envfile}"\nexit $rc\n'
            done = subprocess.run(
                ["bash", "-c", script],
                cwd=run.workdir,
                env=console_env(bindir),
                input=step.stdin,
                capture_output=False,
                stdout=subprocess.PIPE,
                stderr=subprocess.STDOUT,
                text=True,
                timeout=180,
            )
            expected = normalize([substitute(line, setup.substitutions) for line in step.expected])
            actual = normalize(done.stdout.splitlines())
            if done.returncode != step.code or not matches(expected, actual):
                diff = "\n".join(
                    difflib.unified_diff(expected, actual, "documented", "actual", lineterm="")
                )
                pytest.fail(
                    f"{block.id}: $ {step.command}\nexit status {done.returncode} "
                    f"(documented: {step.code})\n{diff}",
                    pytrace=False,
                )


# --------------------------------------------------------------------------- python


def run_python(block: Block, run: DocRun, workdir: Path) -> None:
    """Run a snippet with top-level ``await`` in an event loop; a script (one that calls
    ``asyncio.run`` itself, say) as a script, outside any loop."""
    setup = Setup(workdir, run)
    here = os.getcwd()
    os.chdir(workdir)
    try:
        with fixtures_for(block, setup):
            source = substitute(block.text, setup.substitutions)
            code = compile(source, block.id, "exec", flags=ast.PyCF_ALLOW_TOP_LEVEL_AWAIT)
            if code.co_flags & inspect.CO_COROUTINE:
                asyncio.run(_python_main(code, setup))
            else:
                namespace = _namespace(setup)
                try:
                    exec(code, namespace)  # noqa: S102 - the documentation's own example
                finally:
                    asyncio.run(_close_left(namespace, set(setup.names), setup))
    finally:
        os.chdir(here)


def _namespace(setup: Setup) -> dict[str, Any]:
    return {"__name__": "__doc_example__", **setup.names}


async def _python_main(code: Any, setup: Setup) -> None:
    namespace = _namespace(setup)
    async with contextlib.AsyncExitStack() as stack:
        for name, factory in setup.later.items():
            namespace[name] = await stack.enter_async_context(factory())
        given = set(namespace)
        try:
            result = eval(code, namespace)  # noqa: S307 - the documentation's own example
            if inspect.iscoroutine(result):
                await result
        finally:
            await _close_left(namespace, given, setup)


async def _close_left(namespace: dict[str, Any], given: set[str], setup: Setup) -> None:
    left = [v for k, v in namespace.items() if k not in given and k != "__builtins__"]
    await _close_all(reversed(left), setup.clear_redis)


async def _close_all(values: Any, clear_redis: bool) -> None:
    """Close what a block left open: sessions first (they come after their stores)."""
    for value in values:
        if inspect.ismodule(value) or inspect.isclass(value) or inspect.isroutine(value):
            continue
        if clear_redis and type(value).__name__ == "RedisSession":
            await value.clear_session()
        for name in ("aclose", "close"):
            method = getattr(value, name, None)
            if callable(method):
                result = method()
                if inspect.isawaitable(result):
                    await result
                break


# --------------------------------------------------------------------------- the tests


BLOCKS = all_blocks()
EXAMPLE_BLOCKS = [b for b in BLOCKS if b.lang in EXAMPLES]


@pytest.fixture(scope="module")
def doc_runs(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, DocRun]]:
    runs: dict[str, DocRun] = {}
    yield runs
    for run in runs.values():
        run.close()


@pytest.mark.parametrize("block", EXAMPLE_BLOCKS, ids=[f"{b.id}-{b.lang}" for b in EXAMPLE_BLOCKS])
def test_doc_example(
    block: Block,
    doc_runs: dict[str, DocRun],
    tmp_path: Path,
    tmp_path_factory: pytest.TempPathFactory,
) -> None:
    if block.skip:
        pytest.skip(f"{block.skip} ({block.id})")  # the reason first: skip_policy reads it
    run = doc_runs.get(block.doc)
    if run is None:
        run = doc_runs[block.doc] = DocRun(block.doc, tmp_path_factory.mktemp("doc"))
    if block.lang == "python":
        run_python(block, run, tmp_path)
        return
    for earlier in EXAMPLE_BLOCKS:  # console blocks build on the ones before them
        if earlier.doc == block.doc and earlier.line < block.line and earlier.lang == "console":
            if earlier.line not in run.done and not earlier.skip:
                run_console(earlier, run)
                run.done.add(earlier.line)
    run_console(block, run)
    run.done.add(block.line)


def test_markers_are_read_strictly() -> None:
    fence = "```"
    blocks = parse(
        "x.md",
        f"<!-- doctest: skip needs a server at db.internal -->\n{fence}console\n$ true\n{fence}\n"
        f"text\n<!-- doctest: fixture postgres -->\n\n{fence}python\npass\n{fence}\n"
        f"{fence}bash\nmake everything\n{fence}\n",
    )
    assert [(b.lang, b.skip, b.fixtures) for b in blocks] == [
        ("console", "needs a server at db.internal", ()),
        ("python", None, ("postgres",)),
        ("bash", None, ()),
    ]
    for bad, words in [
        (f"<!-- doctest: skip -->\n{fence}python\n{fence}\n", "expected 'skip REASON'"),
        (f"<!-- doctest: fixture nope -->\n{fence}python\n{fence}\n", "unknown fixture"),
        (f"<!-- doctest: skip x -->\n{fence}bash\n{fence}\n", "only console and python"),
        ("<!-- doctest: skip x -->\ntext\n", "right before a block"),
        ("<!-- doctest: skip x -->\n", "no block after it"),
        (f"<!-- doctest: run it -->\n{fence}python\n{fence}\n", "expected 'skip REASON'"),
    ]:
        with pytest.raises(MarkerError, match=words):
            parse("x.md", bad)


def test_console_transcripts_are_read_as_documented() -> None:
    found = steps(
        "$ sessions delete a\nDelete session 'a'? [y/N]: n\nerror: aborted\n[exit 1]\n\n"
        "$ echo one \\\n  two\none two\n"
    )
    assert [(s.command, s.expected, s.code, s.stdin) for s in found] == [
        ("sessions delete a", ["Delete session 'a'? [y/N]: ", "error: aborted"], 1, "n\n"),
        ("echo one \n  two", ["one two"], 0, ""),
    ]
    assert matches(["a", "...", "z"], ["a", "b", "c", "z"]) and matches(["ab..."], ["abc"])
    assert not matches(["a"], ["a", "b"]) and not matches(["a..."], ["b"])
    assert normalize(["at 2026-12-02 10:26:55 UTC, 28.0 KiB  "]) == ["at <time> UTC, <n> KiB"]


def test_every_example_is_run_or_skipped_with_a_reason() -> None:
    """The inventory pytest reports: examples per document, skipped ones with reasons."""
    assert EXAMPLE_BLOCKS, "no examples found"
    for block in EXAMPLE_BLOCKS:
        assert block.skip is None or block.skip.strip(), block.id
    for doc in ("README.md", "docs/cli.md", "docs/postgres.md", "docs/wrapper.md"):
        assert any(b.doc == doc for b in EXAMPLE_BLOCKS), doc


# --------------------------------------------------------------------------- quoted messages


async def _wrapper_commit_error() -> str:
    from sessions import TransactionalSession
    from sessions.errors import CommitError

    class Inner:
        session_id = "s"
        session_settings = None

        async def get_items(self, limit: int | None = None) -> list[Any]:
            return []

        async def add_items(self, items: list[Any]) -> None:
            raise RuntimeError("the disk is full")

        async def pop_item(self) -> Any:
            return None

        async def clear_session(self) -> None:
            return None

    session = TransactionalSession(Inner())
    await session.add_items([{"role": "user", "content": "hi"}])
    with pytest.raises(CommitError) as info:
        await session.commit()
    await session.rollback()
    await session.close()
    return str(info.value)


async def _newer_postgres_schema_error() -> str:
    require_postgres()
    from sessions.errors import StorageError
    from sessions.postgres import PostgresStore

    name = f"txs_quote_{uuid.uuid4().hex[:8]}"
    store = await PostgresStore.open(PG_DSN, schema=name, min_size=1, max_size=1)
    try:
        async with store.pool.acquire() as conn:
            await conn.execute(f'INSERT INTO "{name}".txs_schema_version (version) VALUES (99999)')
        with pytest.raises(StorageError) as info:
            await PostgresStore.open(PG_DSN, schema=name, min_size=1, max_size=1)
        return str(info.value)
    finally:
        async with store.pool.acquire() as conn:
            await conn.execute(f'DROP SCHEMA "{name}" CASCADE')
        await store.close()


# Error texts the docs quote, and how to make the code produce them.
QUOTED = [
    (
        "docs/wrapper.md",
        "is not idempotent: check the stored history before committing again",
        _wrapper_commit_error,
    ),
    ("docs/postgres.md", "upgrade txsessions", _newer_postgres_schema_error),
]


@pytest.mark.parametrize(("doc", "phrase", "produce"), QUOTED, ids=[q[0] for q in QUOTED])
async def test_quoted_error_texts_are_what_the_code_says(
    doc: str, phrase: str, produce: Callable[[], Any]
) -> None:
    assert f'"{phrase}"' in (ROOT / doc).read_text(encoding="utf-8")
    assert phrase in await produce()
