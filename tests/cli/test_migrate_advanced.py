"""``sessions migrate`` of a database written by the SDK's ``AdvancedSQLiteSession``:
branch ``main`` becomes the session turn by turn with each turn's usage, every other
branch a session ``<id>@<branch>`` listed by ``branches()``; a rerun adds nothing.

The source is a real file written by the installed SDK's class; the command runs as a
child process against both of our backends.
"""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest
from agents import SQLiteSession, Usage
from openai.types.responses.response_usage import InputTokensDetails, OutputTokensDetails

from sessions import TurnUsage, open_store
from tests.conftest import Target
from tests.sdk import sdk_import

from .test_cli import cli, fresh_url, history, one_error_line


def usage(requests: int, tokens_in: int, tokens_out: int, cached: int, reasoning: int) -> Usage:
    return Usage(
        requests=requests,
        input_tokens=tokens_in,
        output_tokens=tokens_out,
        total_tokens=tokens_in + tokens_out,
        # cache_write_tokens: required by newer openai releases, an extra field for older
        input_tokens_details=InputTokensDetails(cached_tokens=cached, cache_write_tokens=0),
        output_tokens_details=OutputTokensDetails(reasoning_tokens=reasoning),
    )


def user(text: str) -> dict[str, Any]:
    return {"role": "user", "content": text}


def answer(text: str) -> dict[str, Any]:
    return {"role": "assistant", "content": text}


TOOL_TURN = [
    user("weather in Paris?"),
    {"type": "function_call", "call_id": "c1", "name": "weather", "arguments": "{}"},
    {"type": "function_call_output", "call_id": "c1", "output": "sunny"},
    answer("Sunny."),
]


async def run_turn(session: Any, items: list[dict[str, Any]], spent: Usage) -> None:
    """One SDK turn: its items, then its usage through the SDK's ``store_run_usage``
    (which reads only ``result.context_wrapper.usage`` of the run result)."""
    await session.add_items(items)
    await session.store_run_usage(SimpleNamespace(context_wrapper=SimpleNamespace(usage=spent)))


@pytest.fixture
async def advanced_file(tmp_path: Path) -> tuple[Path, dict[str, list[Any]]]:
    """3 turns on ``main`` with usage, then a branch ``retry`` from turn 2 with one more
    turn (left as the session's current branch). Returns the file and, per target
    session, the history the SDK reads."""
    advanced = sdk_import(
        "AdvancedSQLiteSession", "agents.extensions.memory", "AdvancedSQLiteSession"
    )
    path = tmp_path / "advanced.db"
    session = advanced(session_id="chat", db_path=path, create_tables=True)
    try:
        await run_turn(session, [user("hi"), answer("Hello!")], usage(1, 10, 5, 0, 0))
        await run_turn(session, TOOL_TURN, usage(2, 40, 12, 8, 3))
        await run_turn(session, [user("thanks"), answer("Welcome.")], usage(1, 60, 4, 30, 0))
        assert await session.create_branch_from_turn(2, "retry") == "retry"
        await run_turn(session, [user("weather in Rome?"), answer("Rainy.")], usage(1, 20, 6, 0, 1))
        expected = {
            "chat": await session.get_items(branch_id="main"),
            "chat@retry": await session.get_items(branch_id="retry"),
        }
    finally:
        session.close()
    assert [len(items) for items in expected.values()] == [8, 4]
    return path, expected


async def _migrated(path: Path, db: str, said: str, expected: dict[str, list[Any]]) -> None:
    """``migrate`` from the file at ``path`` to ``db`` succeeds, says ``said`` and leaves
    ``db`` holding ``expected``."""
    result = await cli("migrate", "--from", f"sqlite:///{path}", "--to", db)
    assert result.code == 0, result.err
    assert said in result.out
    assert await history(db) == expected


async def test_advanced_sqlite_session_branches_turns_and_usage_migrate_once_then_only_new_turns(
    advanced_file: tuple[Path, dict[str, list[Any]]], target: Target, tmp_path: Path
) -> None:
    path, expected = advanced_file
    db = fresh_url(target, tmp_path)
    first = await cli("migrate", "--from", f"sqlite:///{path}", "--to", db)
    assert first.code == 0, first.err
    assert "migrated 2 sessions" in first.out and "12 items copied" in first.out
    assert "verified: item counts match (2 sessions checked)" in first.out
    assert await history(db) == expected

    store = await open_store(db)
    try:
        chat, retry = store.session("chat"), store.session("chat@retry")
        turns = await chat.turns()
        assert [(t.number, t.items) for t in turns] == [(1, 2), (2, 4), (3, 2)]
        assert [t.usage for t in turns] == [
            TurnUsage(1, 10, 5, 0, 0),
            TurnUsage(2, 40, 12, 8, 3),
            TurnUsage(1, 60, 4, 30, 0),
        ]
        assert await chat.usage() == TurnUsage(4, 110, 21, 38, 3)
        # The branch: turn 1 shared with main (no usage: billed once, on main), then its own.
        branch_turns = await retry.turns()
        assert [(t.items, t.usage) for t in branch_turns] == [
            (2, None),
            (2, TurnUsage(1, 20, 6, 0, 1)),
        ]
        assert [(b.session_id, b.at_turn) for b in await chat.branches()] == [("chat@retry", 1)]
        assert await store.usage() == TurnUsage(5, 130, 27, 38, 4)
    finally:
        await store.close()

    await _migrated(path, db, "0 items copied, 12 already present", expected)
    async with await open_store(db) as store:
        assert len(await store.session("chat").turns()) == 3
        assert len(await store.session("chat").branches()) == 1
        assert await store.usage() == TurnUsage(5, 130, 27, 38, 4)

    # The source grew since (a new instance starts on main): only the new turn is copied.
    advanced = sdk_import(
        "AdvancedSQLiteSession", "agents.extensions.memory", "AdvancedSQLiteSession"
    )
    session = advanced(session_id="chat", db_path=path)
    try:
        await run_turn(session, [user("bye"), answer("Bye!")], usage(1, 70, 2, 50, 0))
        expected["chat"] = await session.get_items(branch_id="main")
    finally:
        session.close()
    await _migrated(path, db, "2 items copied, 12 already present", expected)
    async with await open_store(db) as store:
        turns = await store.session("chat").turns()
        assert [(t.number, t.items, t.usage) for t in turns[3:]] == [
            (4, 2, TurnUsage(1, 70, 2, 50, 0))
        ]


async def test_a_branch_whose_session_id_the_file_already_has_is_refused_naming_it(
    advanced_file: tuple[Path, dict[str, list[Any]]], target: Target, tmp_path: Path
) -> None:
    path, _ = advanced_file
    plain = SQLiteSession("chat@retry", path)  # a session named like the branch's target
    await plain.add_items([user("hello")])
    plain.close()
    db = fresh_url(target, tmp_path)
    result = await cli("migrate", "--from", f"sqlite:///{path}", "--to", db)
    one_error_line(result, "branch 'retry' of session 'chat'", "'chat@retry'")
    assert await history(db) == {}
