"""Helpers many test files share, written once."""

from __future__ import annotations

import asyncio
import json
import socket
import subprocess
import sys
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Iterable
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import pytest

from sessions import Store
from sessions.errors import CommitError, TransientStorageError
from tests.provision import Provision

REPO = Path(__file__).resolve().parents[1]


def msg(text: str, role: str = "user", **extra: Any) -> dict[str, Any]:
    """A message item: ``{"role": role, "content": text}`` plus ``extra`` keys."""
    return {"role": role, "content": text, **extra}


async def age(target: Provision, session_id: str, seconds: int) -> None:
    """Move the session's ``updated_at`` ``seconds`` into the past."""
    await target.execute(
        f"UPDATE txs_sessions SET updated_at = {target.ago('updated_at', seconds)} "
        f"WHERE session_id = {target.param(1)}",
        session_id,
    )


async def commit_one(store: Store[Any], session_id: str, **info: Any) -> None:
    """Commit ``msg(session_id)`` to the session, with ``set_info(**info)`` when given."""
    session = store.session(session_id)
    if info:
        session.set_info(**info)
    await session.add_items([msg(session_id)])
    await session.commit()


async def commit_each(session: Any, texts: Iterable[str]) -> None:
    """One commit per text, each of ``msg(text)``."""
    for text in texts:
        await session.add_items([msg(text)])
        await session.commit()


async def committed(store: Store[Any], session_id: str, *texts: str) -> Any:
    """A session of ``store`` with ``msg(text)`` for each text committed in one commit."""
    session = store.session(session_id)
    await session.add_items([msg(text) for text in texts])
    await session.commit()
    return session


async def histories(store: Store[Any]) -> dict[str, list[Any]]:
    """Every session's items, read back through the ordinary session API."""
    return {
        info.session_id: await store.session(info.session_id).get_items()
        async for info in store.iter_sessions()
    }


async def retrying(op: Callable[[], Awaitable[Any]], *, tries: int, pause: float) -> Any:
    """``await op()`` until it raises no commit or transient storage error, at most
    ``tries`` times, ``pause`` seconds apart."""
    last: BaseException | None = None
    for _ in range(tries):
        try:
            return await op()
        except (CommitError, TransientStorageError) as exc:
            last = exc
            await asyncio.sleep(pause)
    raise AssertionError(f"operation never succeeded: {last!r}")


@asynccontextmanager
async def pg_connection(dsn: str) -> AsyncIterator[Any]:
    """Another asyncpg connection to ``dsn`` (to hold a lock, say), closed after the block."""
    import asyncpg

    conn = await asyncpg.connect(dsn)
    try:
        yield conn
    finally:
        await conn.close()


async def hold_session_row(conn: Any, store: Any, session_id: str) -> None:
    """Begin a transaction on the asyncpg ``conn`` that locks the session's row of a
    ``PostgresStore`` (its next commit waits inside the database)."""
    await conn.execute("BEGIN")
    await conn.execute(
        f"SELECT 1 FROM {store.postgres.table('sessions')} WHERE session_id = $1 FOR UPDATE",
        session_id,
    )


def approval_agent(runs: list[str] | None = None) -> Any:
    """An agent whose tool needs approval: its first run calls ``delete_account("ann")`` and
    stops for approval; resumed, it answers "done: deleted". ``runs``: the tool's calls."""
    from agents import Agent, function_tool

    from tests.sdk import ScriptedModel, assistant_message, function_call

    @function_tool(needs_approval=True)
    def delete_account(user: str) -> str:
        """Delete the user's account."""
        if runs is not None:
            runs.append(user)
        return f"deleted {user}"

    model = ScriptedModel(
        [
            [function_call("delete_account", {"user": "ann"}, call_id="c1")],
            [assistant_message("done: deleted")],
        ]
    )
    return Agent(name="admin", model=model, tools=[delete_account])


async def pause_for_approval(session: Any, agent: Any) -> None:
    """Run ``agent`` on "delete ann" in a transaction that stages the paused run's state."""
    from agents import RunConfig, Runner

    async with session.transaction():
        result = await Runner.run(
            agent, "delete ann", session=session, run_config=RunConfig(tracing_disabled=True)
        )
        assert result.interruptions
        session.stage_run_state(result.to_state())


async def approve_and_resume(session: Any, agent: Any) -> None:
    """Load the saved run state, approve every interruption, resume to the answer and
    discard the state, in one transaction."""
    from agents import RunConfig, Runner

    async with session.transaction():
        state = await session.load_run_state(agent)
        for interruption in state.get_interruptions():
            state.approve(interruption)
        result = await Runner.run(
            agent, state, session=session, run_config=RunConfig(tracing_disabled=True)
        )
        assert result.final_output == "done: deleted"
        session.discard_run_state()


class ListSession:
    """A minimal SDK session over a list, whose methods do not take the run context (the
    SDK's original protocol)."""

    def __init__(self, session_id: str) -> None:
        self.session_id = session_id
        self.items: list[Any] = []

    async def get_items(self, limit: int | None = None) -> list[Any]:
        return list(self.items if limit is None else self.items[max(0, len(self.items) - limit) :])

    async def add_items(self, items: list[Any]) -> None:
        self.items.extend(items)

    async def pop_item(self) -> Any:
        return self.items.pop() if self.items else None

    async def clear_session(self) -> None:
        self.items.clear()


def shown_and_clean(capsys: pytest.CaptureFixture[str], line: str, problems: list[str]) -> None:
    """Print ``line`` past pytest's capture (figures worth seeing), then fail on the first
    20 ``problems`` if there are any."""
    with capsys.disabled():
        print(f"\n{line}")
    assert not problems, "\n".join(problems[:20])


def run_benchmark(name: str, out: Path, *args: str) -> Any:
    """``python -m benchmarks.<name> --quick --out <out> <args>`` from the repository root,
    which must succeed; the JSON report it wrote (``<out>/<name>.json``)."""
    proc = subprocess.run(
        [sys.executable, "-m", f"benchmarks.{name}", "--quick", "--out", str(out), *args],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=110,
    )
    assert proc.returncode == 0, proc.stderr
    return json.loads((out / f"{name}.json").read_text())


def free_port() -> int:
    """A TCP port on 127.0.0.1 that was free a moment ago."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


def wait_until_healthy(
    proc: subprocess.Popen[bytes], base: str, timeout: float, log: Callable[[], str]
) -> None:
    """Poll ``{base}/healthz`` until it answers 200. The test fails, showing ``log()``,
    when ``proc`` exits first, and when ``timeout`` seconds pass without an answer."""
    import httpx

    deadline = time.monotonic() + timeout
    while True:
        if proc.poll() is not None:
            pytest.fail(f"the example exited with {proc.returncode}:\n{log()}")
        try:
            if httpx.get(f"{base}/healthz", timeout=1).status_code == 200:
                return
        except httpx.TransportError:
            pass
        if time.monotonic() > deadline:
            pytest.fail(f"the example did not answer /healthz within {timeout} s")
        time.sleep(0.1)
