"""Our sessions inside the SDK: its session wrappers, ``RunConfig(session_input_callback=...)``,
tool turns, streamed runs.

Driven by ``Runner.run`` / ``Runner.run_streamed`` with ``agents.testing.ScriptedModel``
(``tests.sdk``'s stand-in before 0.21.0); every database is a real SQLite file. The
matrix runs these (``sdk_flow``) on every supported SDK release.
"""

from __future__ import annotations

import dataclasses
import json
import sqlite3
from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path
from typing import Any

import pytest
from agents import Agent, RunConfig, Runner, function_tool
from agents import SQLiteSession as SDKSQLiteSession
from agents.memory import Session

from sessions import BufferedSession, SQLiteStore, TransactionalSession
from tests.sdk import (
    ScriptedModel,
    assistant_message,
    function_call,
    has,
    need_sdk,
    sdk_import,
)

pytestmark = pytest.mark.sdk_flow

KEY = "a-test-master-key-with-plenty-of-entropy-0123456789"
CONFIG = RunConfig(tracing_disabled=True)
KINDS = ["txs-sqlite", "wrapper-over-sdk-sqlite"]

Opener = Callable[[str], Awaitable[tuple[BufferedSession, Callable[[], Awaitable[list[Any]]]]]]


@pytest.fixture(params=KINDS)
async def open_session(request: pytest.FixtureRequest, tmp_path: Path) -> AsyncIterator[Opener]:
    """``await open_session(sid)`` -> (our session, a function reading what is stored)."""
    stores: list[SQLiteStore] = []
    inners: list[SDKSQLiteSession] = []

    async def open_txs(sid: str) -> tuple[BufferedSession, Callable[[], Awaitable[list[Any]]]]:
        store = await SQLiteStore.open(tmp_path / "txs.db")
        stores.append(store)

        async def stored() -> list[Any]:
            async with await SQLiteStore.open(tmp_path / "txs.db") as reader:
                return await reader.session(sid).get_items()

        return store.session(sid), stored

    async def open_wrapper(sid: str) -> tuple[BufferedSession, Callable[[], Awaitable[list[Any]]]]:
        inner = SDKSQLiteSession(sid, tmp_path / "sdk.db")
        inners.append(inner)

        async def stored() -> list[Any]:
            with sqlite3.connect(tmp_path / "sdk.db") as conn:
                rows = conn.execute(
                    "SELECT message_data FROM agent_messages WHERE session_id = ? ORDER BY id",
                    (sid,),
                ).fetchall()
            return [json.loads(text) for (text,) in rows]

        return TransactionalSession(inner), stored

    yield open_txs if request.param == "txs-sqlite" else open_wrapper
    for store in stores:
        await store.close()
    for inner in inners:
        inner.close()


def user_texts(items: list[Any]) -> list[str]:
    return [item["content"] for item in items if item.get("role") == "user"]


def assistant_texts(items: list[Any]) -> list[str]:
    return [
        part["text"]
        for item in items
        if item.get("role") == "assistant"
        for part in item["content"]
    ]


async def test_our_sessions_follow_the_sdk_session_protocol(open_session: Opener) -> None:
    session, _ = await open_session("proto")
    assert isinstance(session, Session)
    await session.close()


async def test_inside_encrypted_session_history_is_encrypted_whole_and_readable(
    open_session: Opener,
) -> None:
    pytest.importorskip("cryptography")  # what the SDK's EncryptedSession needs
    EncryptedSession = sdk_import(
        "EncryptedSession", "agents.extensions.memory.encrypt_session", "EncryptedSession"
    )

    ours, stored = await open_session("enc")
    encrypted = EncryptedSession("enc", underlying_session=ours, encryption_key=KEY)  # type: ignore[arg-type]
    model = ScriptedModel([[assistant_message("first answer")], [assistant_message("second")]])
    agent = Agent(name="assistant", model=model)

    async with ours.transaction():
        await Runner.run(agent, "secret question one", session=encrypted, run_config=CONFIG)
        # Read-your-writes through the encryption layer: turn two sees turn one, staged.
        result = Runner.run_streamed(agent, "question two", session=encrypted, run_config=CONFIG)
        async for _ in result.stream_events():
            pass
        assert await stored() == []  # nothing durable before the commit
    assert model.calls[1].input[0]["content"] == "secret question one"

    rows = await stored()
    assert len(rows) == 4
    assert all(row.get("__enc__") == 1 for row in rows)  # envelopes only
    assert "secret" not in json.dumps(rows)

    reopened, _ = await open_session("enc")
    again = EncryptedSession("enc", underlying_session=reopened, encryption_key=KEY)  # type: ignore[arg-type]
    history = await again.get_items()
    assert user_texts(history) == ["secret question one", "question two"]
    assert assistant_texts(history) == ["first answer", "second"]

    # A pop through the wrapper is staged in ours and applied by our commit.
    popped = await again.pop_item()
    assert popped is not None and assistant_texts([popped]) == ["second"]
    assert len(await stored()) == 4
    await reopened.commit()
    assert len(await stored()) == 3

    wrong = EncryptedSession("enc", underlying_session=reopened, encryption_key=KEY + "x")  # type: ignore[arg-type]
    assert await wrong.get_items() == []  # unreadable envelopes are skipped, not decrypted
    await reopened.close()
    await ours.close()


@pytest.mark.parametrize("is_async", [False, True], ids=["sync-callback", "async-callback"])
async def test_session_input_callback_shapes_the_model_input_not_the_history(
    open_session: Opener, is_async: bool
) -> None:
    seen: list[int] = []

    def last_two(history: list[Any], new_input: list[Any]) -> list[Any]:
        seen.append(len(history))
        return history[-2:] + new_input

    async def last_two_async(history: list[Any], new_input: list[Any]) -> list[Any]:
        return last_two(history, new_input)

    need_sdk(
        "session_input_callback",
        present=any(f.name == "session_input_callback" for f in dataclasses.fields(RunConfig)),
    )
    callback: Any = last_two_async if is_async else last_two
    config = RunConfig(tracing_disabled=True, session_input_callback=callback)
    session, stored = await open_session("cb")
    model = ScriptedModel([[assistant_message(f"answer {i}")] for i in range(3)])
    agent = Agent(name="assistant", model=model)
    for i in range(3):
        async with session.transaction():
            await Runner.run(agent, f"question {i}", session=session, run_config=config)

    assert seen == [0, 2, 4]  # the callback saw the whole history each time
    last_input = model.calls[2].input
    assert [item.get("content") for item in last_input][-1] == "question 2"
    assert len(last_input) == 3  # two history items + the new question
    history = await stored()
    assert user_texts(history) == ["question 0", "question 1", "question 2"]
    assert assistant_texts(history) == ["answer 0", "answer 1", "answer 2"]
    await session.close()


async def test_a_tool_turn_is_committed_as_one_ordered_batch(open_session: Opener) -> None:
    @function_tool
    def lookup(city: str) -> str:
        """Look up the weather."""
        return f"sunny in {city}"

    model = ScriptedModel(
        [
            [function_call("lookup", {"city": "Oslo"}, call_id="call-1")],
            [assistant_message("It is sunny in Oslo.")],
        ]
    )
    agent = Agent(name="assistant", model=model, tools=[lookup])
    session, stored = await open_session("tool")
    await Runner.run(agent, "weather in Oslo?", session=session, run_config=CONFIG)
    assert session.pending.items == 4
    assert await stored() == []
    await session.commit()
    history = await stored()
    kinds = [item.get("type", "message") for item in history]
    assert kinds == ["message", "function_call", "function_call_output", "message"]
    assert history[2]["output"] == "sunny in Oslo"
    await session.close()


async def test_a_run_that_fails_midway_leaves_history_untouched(open_session: Opener) -> None:
    model = ScriptedModel([RuntimeError("model outage"), RuntimeError("model outage")])
    agent = Agent(name="assistant", model=model)
    session, stored = await open_session("fail")
    with pytest.raises(RuntimeError, match="model outage"):
        await Runner.run(agent, "hello?", session=session, run_config=CONFIG)
    # From 0.3.0 on the SDK saves the user's input before calling the model: without
    # a transaction, a commit now would store a question without its answer.
    assert session.pending.items == (1 if has("per_turn_saves") else 0)
    await session.rollback()

    with pytest.raises(RuntimeError, match="model outage"):
        async with session.transaction():
            await Runner.run(agent, "hello?", session=session, run_config=CONFIG)
    assert await stored() == []
    assert not session.has_pending
    await session.close()
