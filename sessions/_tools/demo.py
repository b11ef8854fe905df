"""``python -m sessions demo``: an offline agent conversation whose history stays whole.

A calculator agent talks on an embedded SQLite file: turns with tool calls, each made
durable by one ``commit()``; then a streamed run whose consumer is cancelled midway (a
client that disconnects). The cancelled turn is rolled back whole, the writes its
still-running run issues afterwards are refused, and the stored history, read back
through a fresh connection, is printed and checked.

The model is scripted (no network, no API key) unless ``OPENAI_API_KEY`` is set, in
which case the SDK's default model is used.
"""

from __future__ import annotations

import asyncio
import json
import logging
import os
import shutil
import tempfile
import uuid
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from agents import Agent, Model, RunConfig, Runner, function_tool
from agents.testing import ScriptedModel, assistant_message, function_call

from ..cli.render import literal
from ..sqlite import SQLiteSession, SQLiteStore

__all__ = ["run_demo"]

_INSTRUCTIONS = "You are a terse calculator. Use the tools for every calculation."

_PROMPTS = (
    "What is 17 + 25?",
    "And that times 3?",
    "Now add 1000 to it and explain every step in detail.",  # the cancelled turn
    "Thanks, that's all.",
)


@function_tool
def add(a: int, b: int) -> int:
    """Add two integers."""
    return a + b


@function_tool
def multiply(a: int, b: int) -> int:
    """Multiply two integers."""
    return a * b


def _scripted_model() -> ScriptedModel:
    """The replies a model would give to ``_PROMPTS``, in order."""
    return ScriptedModel(
        [
            [function_call("add", {"a": 17, "b": 25}, call_id="call-1")],
            [assistant_message("17 + 25 = 42.", item_id="msg-1")],
            [function_call("multiply", {"a": 42, "b": 3}, call_id="call-2")],
            [assistant_message("42 x 3 = 126.", item_id="msg-2")],
            [function_call("add", {"a": 126, "b": 1000}, call_id="call-3")],
            [assistant_message("126 + 1000 = 1126, step by step: ...", item_id="msg-3")],
            [assistant_message("You're welcome!", item_id="msg-4")],
        ]
    )


# --------------------------------------------------------------------------- output


class _Output:
    """rich when it is importable, plain ``print`` otherwise."""

    def __init__(self) -> None:
        self._console: Any = None
        try:
            from rich.console import Console
        except ImportError:  # pragma: no cover - rich is an optional extra
            return
        self._console = Console(highlight=False, soft_wrap=True, markup=False, emoji=False)

    def line(self, text: str = "", style: str | None = None) -> None:
        text = literal(text)  # model output and paths: shown as typed, never as markup
        if self._console is None:
            print(text)
        else:
            from rich.text import Text

            self._console.print(Text(text, style or ""))

    def history(self, items: Sequence[dict[str, Any]]) -> None:
        rows = [(str(i), *map(literal, _describe(item))) for i, item in enumerate(items, 1)]
        if self._console is None:
            for number, role, content in rows:
                print(f"  {number:>3}  {role:<12} {content}")
            return
        from rich.table import Table
        from rich.text import Text

        table = Table(show_edge=False, pad_edge=False)
        table.add_column("#", justify="right")
        table.add_column("role")
        table.add_column("content", overflow="fold")
        for row in rows:
            table.add_row(*(Text(cell) for cell in row))
        self._console.print(table)


def _short(text: str, width: int = 64) -> str:
    text = " ".join(text.split())
    return text if len(text) <= width else text[: width - 3] + "..."


def _text_of(content: Any) -> str:
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        parts = [
            str(part.get("text", part.get("refusal", "")))
            for part in content
            if isinstance(part, dict)
        ]
        return " ".join(p for p in parts if p)
    return json.dumps(content)


def _describe(item: dict[str, Any]) -> tuple[str, str]:
    """(role, short content) of one stored item."""
    kind = item.get("type")
    if kind == "function_call":
        return "tool call", _short(f"{item.get('name')}({item.get('arguments', '')})")
    if kind == "function_call_output":
        return "tool result", _short(str(item.get("output", "")))
    if "role" in item:
        return str(item["role"]), _short(_text_of(item.get("content", "")))
    return str(kind or "item"), _short(json.dumps(item, ensure_ascii=False))


# --------------------------------------------------------------------------- checks


def _is_user(item: dict[str, Any]) -> bool:
    return item.get("role") == "user"


def _turn_problems(items: Sequence[dict[str, Any]]) -> list[str]:
    """Why the history is not made of complete turns (empty when it is)."""
    problems: list[str] = []
    outputs = {i.get("call_id") for i in items if i.get("type") == "function_call_output"}
    for item in items:
        if item.get("type") == "function_call" and item.get("call_id") not in outputs:
            problems.append(f"tool call {item.get('call_id')!r} has no result")
    turns = _split_turns(items)
    for number, turn in enumerate(turns, 1):
        if not any(i.get("role") == "assistant" for i in turn[1:]):
            problems.append(f"turn {number} has no assistant reply")
    if items and not _is_user(items[0]):
        problems.append("history does not start with a user message")
    return problems


def _split_turns(items: Sequence[dict[str, Any]]) -> list[list[dict[str, Any]]]:
    turns: list[list[dict[str, Any]]] = []
    for item in items:
        if _is_user(item) or not turns:
            turns.append([])
        turns[-1].append(item)
    return turns


# --------------------------------------------------------------------------- the demo


class _RefusalCounter(logging.Handler):
    """Counts the core's "refused late write" log records (and keeps them off stderr)."""

    def __init__(self) -> None:
        super().__init__(logging.WARNING)
        self.refused = 0

    def emit(self, record: logging.LogRecord) -> None:
        if "refused" in record.getMessage():
            self.refused += 1


async def _read_fresh(path: str, session_id: str) -> list[dict[str, Any]]:
    """The stored history as a new connection sees it (nothing staged, nothing cached)."""
    store = await SQLiteStore.open(path)
    try:
        items: list[dict[str, Any]] = await store.session(session_id).get_items()
        return items
    finally:
        await store.close()


async def _cancelled_turn(
    session: SQLiteSession, agent: Agent[Any], prompt: str, run_config: RunConfig, out: _Output
) -> None:
    """Stream one turn and cancel its consumer after the first tool call or message."""
    started: asyncio.Future[Any] = asyncio.get_running_loop().create_future()
    reached = asyncio.Event()

    async def consumer() -> None:
        async with session.transaction():
            result = Runner.run_streamed(agent, prompt, session=session, run_config=run_config)
            started.set_result(result)
            async for event in result.stream_events():
                if event.type == "run_item_stream_event":
                    out.line(f"    stream event: {event.name} - the client disconnects now")
                    reached.set()
                    await asyncio.Event().wait()  # the client stops reading here

    task = asyncio.create_task(consumer())
    waiter = asyncio.create_task(reached.wait())
    await asyncio.wait({task, waiter}, return_when=asyncio.FIRST_COMPLETED)
    waiter.cancel()
    task.cancel()
    try:
        await task
    except asyncio.CancelledError:
        out.line("    consumer cancelled: transaction() rolled the whole turn back")
    result = await started
    run_task = result.run_loop_task
    if run_task is not None:
        # The run itself keeps going in the background (the SDK does not stop it when
        # its consumer goes away); whatever it writes now must be refused.
        done, _ = await asyncio.wait({run_task}, timeout=5)
        if not done:
            result.cancel()
            await asyncio.wait({run_task}, timeout=5)


@dataclass
class _Run:
    """One demo: the agent, where it stores history, and what was read back when."""

    path: str
    out: _Output
    model: Model | None
    agent: Agent[Any]
    run_config: RunConfig
    session_id: str = field(default_factory=lambda: f"demo-{uuid.uuid4().hex[:8]}")
    before: list[Any] = field(default_factory=list)  # after turn 2
    after_cancel: list[Any] = field(default_factory=list)  # after the cancelled turn 3
    final: list[Any] = field(default_factory=list)  # after turn 4
    seen: list[Any] = field(default_factory=list)  # what turn 4's model call was given
    left_pending: bool = False


async def _demo(path: str, out: _Output, *, temporary: bool) -> int:
    real = bool(os.environ.get("OPENAI_API_KEY"))
    model: Model | None = None if real else _scripted_model()
    agent: Agent[Any] = Agent(
        name="calculator", instructions=_INSTRUCTIONS, tools=[add, multiply], model=model
    )
    run = _Run(path, out, model, agent, RunConfig(tracing_disabled=not real))
    out.line("txsessions demo", style="bold")
    out.line(f"  database: {path}{' (temporary; pass --db PATH to keep it)' if temporary else ''}")
    out.line(f"  session:  {run.session_id}")
    out.line(f"  model:    {'the default OpenAI model' if real else 'scripted (offline)'}")
    out.line()
    counter = _RefusalCounter()
    log = logging.getLogger("sessions")
    log.addHandler(counter)
    store = await SQLiteStore.open(path)
    try:
        await _turns(run, store.session(run.session_id), counter)
    finally:
        await store.close()
        log.removeHandler(counter)
    out.line()
    out.line(
        f"stored history ({len(run.final)} items, read through a new connection):", style="bold"
    )
    out.history(run.final)
    out.line()
    return _verdict(run)


async def _turns(run: _Run, session: SQLiteSession, counter: _RefusalCounter) -> None:
    """Two committed turns, one cancelled midway, one more; reading back after each."""
    out, agent, config = run.out, run.agent, run.run_config
    for number, prompt in enumerate(_PROMPTS[:2], 1):
        out.line(f"turn {number}: {prompt}", style="bold")
        async with session.transaction():
            reply: Any
            if number == 1:
                done = await Runner.run(agent, prompt, session=session, run_config=config)
                reply = done.final_output
            else:  # the same, streamed and consumed to the end
                streamed = Runner.run_streamed(agent, prompt, session=session, run_config=config)
                async for _ in streamed.stream_events():
                    pass
                reply = streamed.final_output
            staged = session.pending.items
        out.line(f"    {reply}")
        out.line(f"    committed {staged} item(s) in one transaction")
    run.before = await _read_fresh(run.path, run.session_id)

    out.line(f"turn 3 (streamed, cancelled midway): {_PROMPTS[2]}", style="bold")
    await _cancelled_turn(session, agent, _PROMPTS[2], config, out)
    out.line(f"    the still-running run's late writes refused: {counter.refused}")
    run.after_cancel = await _read_fresh(run.path, run.session_id)

    out.line(f"turn 4: {_PROMPTS[3]}", style="bold")
    async with session.transaction():
        last = await Runner.run(agent, _PROMPTS[3], session=session, run_config=config)
    out.line(f"    {last.final_output}")
    if isinstance(run.model, ScriptedModel) and run.model.last_call is not None:
        run.seen = list(run.model.last_call.input)
    run.final = await _read_fresh(run.path, run.session_id)
    run.left_pending = session.has_pending


def _verdict(run: _Run) -> int:
    """Print whether the stored history is whole; 0 when it is."""
    before, final, out = run.before, run.final, run.out
    problems = _turn_problems(final)
    if run.after_cancel != before:
        problems.append(
            f"the cancelled turn changed the stored history ({len(before)} items before, "
            f"{len(run.after_cancel)} after)"
        )
    if final[: len(before)] != before or len(final) <= len(before):
        problems.append("turn 4 did not append to the history committed before it")
    elif not _is_user(final[len(before)]):
        problems.append("turn 4 did not start with the user's message")
    if run.model is not None and run.seen[: len(before)] != before:
        problems.append("turn 4's model call did not see the earlier turns")
    if run.left_pending:
        problems.append("changes were left staged after the last commit")
    if problems:
        out.line("history NOT whole:", style="bold red")
        for problem in problems:
            out.line(f"  - {problem}", style="red")
        return 1
    turns = len(_split_turns(final))
    out.line(
        f"history whole: {len(final)} items in {turns} turns, every turn complete; "
        "the cancelled turn left nothing behind",
        style="bold green",
    )
    return 0


def run_demo(db: str | None = None) -> int:
    """Run the demo on ``db`` (a SQLite file; a temporary one by default). 0 when whole."""
    out = _Output()
    tmpdir: str | None = None
    if db is None:
        tmpdir = tempfile.mkdtemp(prefix="txsessions-demo-")
        path = os.path.join(tmpdir, "demo.db")
    else:
        path = db
    try:
        return asyncio.run(_demo(path, out, temporary=tmpdir is not None))
    finally:
        if tmpdir is not None:
            shutil.rmtree(tmpdir, ignore_errors=True)
