"""Turn records (issue 14): every commit that adds items records one turn, in its
transaction; ``turns()`` lists them and ``get_items(turns=N)`` reads the last N whole.

Every test runs on SQLite, PostgreSQL and the memory backend (``tstore``), except those
that need raw SQL (``store`` / ``target``: SQLite and PostgreSQL).
"""

from __future__ import annotations

import asyncio
import uuid
from datetime import datetime, timedelta, timezone
from pathlib import Path
from typing import Any

import pytest
from agents import Agent, RunConfig, Runner

from sessions import SQLiteStore, Store, TransactionalSession, Turn, TurnUsage
from sessions._model.history import CALL_OUTPUT, check_history
from sessions.errors import CommitConflictError, CommitError, SessionError
from tests.conftest import Target
from tests.contract.raw import forget_turn_records
from tests.helpers import approval_agent, approve_and_resume, msg, pause_for_approval
from tests.history_items import call, output
from tests.provision.sqlite import old_database
from tests.sdk import ScriptedModel, assistant_message, need_sdk


def shape(turns: list[Turn]) -> list[tuple[int, int, str | None, bool]]:
    return [(t.number, t.items, t.run_id, t.pending) for t in turns]


async def commit_turns(session: Any, *sizes: int) -> None:
    """One commit per size, each adding that many items named ``t<turn>.<i>``."""
    done = len(await session.turns())
    for n, size in enumerate(sizes, start=done + 1):
        await session.add_items([msg(f"t{n}.{i}") for i in range(size)])
        await session.commit()


async def test_each_commit_that_adds_items_records_one_turn_with_range_time_and_run_id(
    tstore: Store[Any], sid: str
) -> None:
    session = tstore.session(sid)
    before = datetime.now(timezone.utc)
    session.set_run_id("run-1")
    await commit_turns(session, 2)
    session.set_run_id(None)
    await commit_turns(session, 1, 3)
    turns = await tstore.session(sid).turns()  # another session object: what is stored
    assert shape(turns) == [(1, 2, "run-1", False), (2, 1, None, False), (3, 3, None, False)]
    keys = [(t.first_key, t.last_key) for t in turns]
    assert all(first is not None and last is not None for first, last in keys)
    flat = [k for pair in keys for k in pair]
    assert flat == sorted(flat) and len(set(flat)) == len(flat) - 1  # turn 2 is one item
    assert all(
        t.created_at is not None and t.created_at >= before.replace(microsecond=0) for t in turns
    )


async def test_a_commit_without_items_records_no_turn(tstore: Store[Any], sid: str) -> None:
    session = tstore.session(sid)
    await commit_turns(session, 2, 2)
    await session.pop_item()
    await session.commit()  # a pop only
    assert shape(await session.turns()) == [(1, 2, None, False), (2, 1, None, False)]


async def test_staged_items_read_as_one_pending_turn(tstore: Store[Any], sid: str) -> None:
    session = tstore.session(sid)
    await commit_turns(session, 2)
    await session.add_items([msg("a")])
    await session.add_items([msg("b")])
    assert shape(await session.turns()) == [(1, 2, None, False), (2, 2, None, True)]
    assert await session.get_items(turns=1) == [msg("a"), msg("b")]
    assert await session.get_items(turns=2) == [msg("t1.0"), msg("t1.1"), msg("a"), msg("b")]
    assert shape(await tstore.session(sid).turns()) == [(1, 2, None, False)]


async def test_get_items_turns_returns_the_last_n_whole_turns_in_order(
    tstore: Store[Any], sid: str
) -> None:
    session = tstore.session(sid)
    await commit_turns(session, 3, 1, 2)
    assert await session.get_items(turns=0) == []
    assert await session.get_items(turns=1) == [msg("t3.0"), msg("t3.1")]
    assert await session.get_items(turns=2) == [msg("t2.0"), msg("t3.0"), msg("t3.1")]
    everything = await session.get_items()
    assert await session.get_items(turns=3) == everything
    assert await session.get_items(turns=99) == everything


async def test_turns_ignore_the_settings_limit_and_refuse_limit_alongside(
    tstore: Store[Any], sid: str
) -> None:
    session = tstore.session(sid)
    await commit_turns(session, 3)
    session.session_settings = {"limit": 1}
    assert len(await session.get_items()) == 1
    assert len(await session.get_items(turns=1)) == 3  # a turn is never cut
    with pytest.raises(TypeError, match="limit= or turns="):
        await session.get_items(2, turns=1)
    with pytest.raises(ValueError, match="turns must be >= 0"):
        await session.get_items(turns=-1)
    with pytest.raises(TypeError, match="turns must be an int"):
        await session.get_items(turns=True)


async def test_staged_pops_and_clears_change_the_turns_reads_see(
    tstore: Store[Any], sid: str
) -> None:
    session = tstore.session(sid)
    await commit_turns(session, 2, 1)
    await session.pop_item()  # the whole of turn 2 (stored), staged
    assert shape(await session.turns()) == [(1, 2, None, False)]
    assert await session.get_items(turns=1) == [msg("t1.0"), msg("t1.1")]
    await session.clear_session()
    await session.add_items([msg("new")])
    assert shape(await session.turns()) == [(1, 1, None, True)]
    assert await session.get_items(turns=5) == [msg("new")]


async def test_a_pop_of_the_last_item_shrinks_the_last_turn_and_removes_it_when_empty(
    tstore: Store[Any], sid: str
) -> None:
    session = tstore.session(sid)
    await commit_turns(session, 1, 2)
    await session.pop_item()
    await session.commit()
    turns = await tstore.session(sid).turns()
    assert shape(turns) == [(1, 1, None, False), (2, 1, None, False)]
    assert turns[1].first_key == turns[1].last_key
    await session.pop_item()
    await session.commit()
    assert shape(await tstore.session(sid).turns()) == [(1, 1, None, False)]
    await commit_turns(session, 2)  # numbers are positions: the new turn is 2
    assert shape(await tstore.session(sid).turns()) == [(1, 1, None, False), (2, 2, None, False)]


async def test_clear_removes_every_turn_record(store: Store[Any], target: Target, sid: str) -> None:
    session = store.session(sid)
    await commit_turns(session, 2, 2)
    await session.clear_session()
    await session.commit()
    assert await session.turns() == []
    p1 = target.param(1)
    count = await target.fetch_value(f"SELECT count(*) FROM txs_turns WHERE session_id = {p1}", sid)
    assert int(count) == 0
    await session.clear_session()
    await session.add_items([msg("after")])
    await session.commit()  # clear and items in one batch: one turn, the batch's
    assert shape(await store.session(sid).turns()) == [(1, 1, None, False)]


async def test_deleting_a_session_deletes_its_turn_records(
    store: Store[Any], target: Target, sid: str
) -> None:
    await commit_turns(store.session(sid), 1)
    assert await store.delete_session(sid)
    p1 = target.param(1)
    count = await target.fetch_value(f"SELECT count(*) FROM txs_turns WHERE session_id = {p1}", sid)
    assert int(count) == 0


async def test_history_without_turn_records_reads_as_one_turn(
    store: Store[Any], target: Target, sid: str
) -> None:
    """What a store from before schema version 4 holds: items, no turn records."""
    session = store.session(sid)
    await commit_turns(session, 2, 3)
    await forget_turn_records(target, sid)
    turns = await session.turns()
    assert shape(turns) == [(1, 5, None, False)] and turns[0].created_at is None
    await commit_turns(session, 1)
    assert shape(await session.turns()) == [(1, 5, None, False), (2, 1, None, False)]
    assert await session.get_items(turns=1) == [msg("t2.0")]
    assert len(await session.get_items(turns=2)) == 6


async def test_a_sqlite_file_from_schema_version_2_reads_its_history_as_one_turn(
    tmp_path: Path,
) -> None:
    path = str(tmp_path / "old.db")
    conn = old_database(path, 2)
    conn.execute(
        "INSERT INTO txs_sessions (session_id, created_at, updated_at, item_count, next_seq) "
        "VALUES ('old', 0, 0, 3, 4)"
    )
    for seq in (1, 2, 3):
        conn.execute(
            "INSERT INTO txs_items (session_id, seq, batch_id, data) VALUES ('old', ?, 'b', ?)",
            (seq, f'{{"role": "user", "content": "{seq}"}}'),
        )
    conn.close()
    store = await SQLiteStore.open(path)
    try:
        session = store.session("old")
        assert shape(await session.turns()) == [(1, 3, None, False)]
        await commit_turns(session, 1)
        assert shape(await session.turns()) == [(1, 3, None, False), (2, 1, None, False)]
    finally:
        await store.close()


async def test_a_commit_the_database_rejects_records_no_turn_nor_usage_and_the_retry_does(
    store: Store[Any], target: Target, sid: str
) -> None:
    session = store.session(sid)
    await commit_turns(session, 1)
    await target.add_poison_trigger(sid)
    try:
        await session.add_items([msg("fine"), msg("poison")])
        session.record_usage(TurnUsage(1, 5, 5, 0, 0))
        with pytest.raises(CommitError):
            await session.commit()
        assert shape(await store.session(sid).turns()) == [(1, 1, None, False)]
        assert await session.usage() == TurnUsage()
    finally:
        await target.drop_poison_trigger()
    await session.commit()
    await session.commit()  # nothing staged: nothing more
    assert shape(await store.session(sid).turns()) == [(1, 1, None, False), (2, 2, None, False)]
    assert await session.usage() == TurnUsage(1, 5, 5, 0, 0)


async def test_concurrent_commits_of_many_sessions_each_record_their_own_turn(
    store: Store[Any], sid: str
) -> None:
    """On PostgreSQL these share statements (group commit); each turn stays its own."""
    sessions = [store.session(f"{sid}-{n}") for n in range(12)]
    for n, session in enumerate(sessions):
        session.set_run_id(f"run-{n}")
        await session.add_items([msg(f"{n}.{i}") for i in range(n % 3 + 1)])
    await asyncio.gather(*(session.commit() for session in sessions))
    for n, session in enumerate(sessions):
        turns = await store.session(session.session_id).turns()
        assert shape(turns) == [(1, n % 3 + 1, f"run-{n}", False)]
        assert await session.get_items(turns=1) == [msg(f"{n}.{i}") for i in range(n % 3 + 1)]


async def test_the_run_id_is_the_one_set_when_a_turns_first_item_was_staged(
    tstore: Store[Any], sid: str
) -> None:
    session = tstore.session(sid)
    session.set_run_id("a")
    await session.add_items([msg("1")])
    session.set_run_id("b")  # the staged turn keeps "a"
    await session.add_items([msg("2")])
    assert session.run_id == "b"
    await session.commit()
    await commit_turns(session, 1)
    assert [t.run_id for t in await session.turns()] == ["a", "b"]


async def test_set_run_id_refuses_what_is_not_a_short_string(tstore: Store[Any], sid: str) -> None:
    session = tstore.session(sid)
    with pytest.raises(TypeError, match="run_id must be a str or None, got int"):
        session.set_run_id(7)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="1 to 256 characters"):
        session.set_run_id("")
    with pytest.raises(ValueError, match="1 to 256 characters"):
        session.set_run_id("x" * 257)
    assert session.run_id is None


async def test_a_wrapped_sdk_session_refuses_turns_forks_rewinds_and_usage(tmp_path: Path) -> None:
    from agents import SQLiteSession as SDKSQLiteSession

    session = TransactionalSession(SDKSQLiteSession("w", str(tmp_path / "sdk.db")))
    try:
        await session.add_items([msg("x")])
        await session.commit()
        with pytest.raises(SessionError, match="does not record turns"):
            await session.turns()
        with pytest.raises(SessionError, match="does not record turns"):
            await session.get_items(turns=1)
        with pytest.raises(SessionError, match="does not record turns"):
            session.set_run_id("r")
        with pytest.raises(SessionError, match="does not record turns"):
            session.record_usage(TurnUsage(1))
        with pytest.raises(SessionError, match="does not record turns"):
            await session.usage()
        with pytest.raises(SessionError, match="cannot fork"):
            await session.fork("w2")
        with pytest.raises(SessionError, match="cannot rewind"):
            await session.rewind(to_turn=0)
        assert await session.get_items() == [msg("x")]
    finally:
        await session.close()


async def test_a_three_run_conversation_has_three_turns(tstore: Store[Any], sid: str) -> None:
    """With one transaction per run, each ``Runner.run`` is one turn: its input and its
    output, whatever the SDK's number of ``add_items`` calls."""
    model = ScriptedModel([[assistant_message(f"answer {n}")] for n in range(3)])
    agent = Agent(name="a", model=model)
    config = RunConfig(tracing_disabled=True)
    session = tstore.session(sid)
    for n in range(3):
        session.set_run_id(f"run-{n}")
        async with session.transaction():
            await Runner.run(agent, f"question {n}", session=session, run_config=config)
    turns = await tstore.session(sid).turns()
    assert [(t.number, t.run_id) for t in turns] == [(1, "run-0"), (2, "run-1"), (3, "run-2")]
    last = await session.get_items(turns=1)
    assert last[0] == {"content": "question 2", "role": "user"}
    assert "answer 2" in str(last[-1]) and len(last) == turns[-1].items


# ---------------------------------------------------------------- fork (issue 15)


async def test_fork_makes_a_new_session_holding_the_turns_up_to_at_turn(
    tstore: Store[Any], sid: str
) -> None:
    source = tstore.session(sid)
    source.set_run_id("r1")
    await commit_turns(source, 2)
    source.set_run_id(None)
    await commit_turns(source, 1, 3)
    assert await source.fork(f"{sid}-f", at_turn=2) == 2
    fork = tstore.session(f"{sid}-f")
    assert await fork.get_items() == (await source.get_items())[:3]
    old, new = await source.turns(), await fork.turns()
    assert [(t.items, t.run_id, t.created_at) for t in new] == [
        (t.items, t.run_id, t.created_at) for t in old[:2]
    ]
    await commit_turns(fork, 1)  # the fork goes its own way; the source is untouched
    assert len(await source.get_items()) == 6 and len(await fork.get_items()) == 4
    branches = await source.branches()
    assert [(b.session_id, b.at_turn) for b in branches] == [(f"{sid}-f", 2)]
    assert await fork.branches() == []


async def test_running_the_same_fork_again_adds_nothing(tstore: Store[Any], sid: str) -> None:
    source = tstore.session(sid)
    await commit_turns(source, 2, 1)
    assert await source.fork(f"{sid}-f") == 2
    assert await source.fork(f"{sid}-f") == 2
    fork = tstore.session(f"{sid}-f")
    assert len(await fork.get_items()) == 3 and len(await fork.turns()) == 2
    assert len(await source.branches()) == 1


async def test_a_fork_into_a_session_holding_items_applies_nothing(
    tstore: Store[Any], sid: str
) -> None:
    source = tstore.session(sid)
    await commit_turns(source, 2)
    other = tstore.session(f"{sid}-x")
    await other.add_items([msg("mine")])
    await other.commit()
    with pytest.raises(CommitConflictError):
        await source.fork(f"{sid}-x")
    assert await other.get_items() == [msg("mine")] and await source.branches() == []


async def test_a_fork_of_a_history_that_changed_since_into_the_same_id_is_refused(
    tstore: Store[Any], sid: str
) -> None:
    source = tstore.session(sid)
    await commit_turns(source, 1, 2)
    await source.fork(f"{sid}-f")
    await source.pop_item()
    await source.commit()
    with pytest.raises(CommitConflictError, match="already a fork"):
        await source.fork(f"{sid}-f")
    assert len(await tstore.session(f"{sid}-f").get_items()) == 3


async def test_fork_refuses_bad_arguments_and_staged_changes(tstore: Store[Any], sid: str) -> None:
    source = tstore.session(sid)
    with pytest.raises(ValueError, match="at_turn must be from 1 to 0"):
        await source.fork(f"{sid}-f")
    await commit_turns(source, 1, 1)
    with pytest.raises(ValueError, match="at_turn must be from 1 to 2"):
        await source.fork(f"{sid}-f", at_turn=3)
    with pytest.raises(ValueError, match="at_turn must be >= 1"):
        await source.fork(f"{sid}-f", at_turn=0)
    with pytest.raises(ValueError, match="must differ"):
        await source.fork(sid)
    await source.add_items([msg("staged")])
    with pytest.raises(SessionError, match="staged changes"):
        await source.fork(f"{sid}-f")
    assert await tstore.session(f"{sid}-f").get_items() == []


async def test_deleting_a_fork_removes_it_from_its_sources_branches(
    tstore: Store[Any], sid: str
) -> None:
    source = tstore.session(sid)
    await commit_turns(source, 1)
    await source.fork(f"{sid}-a")
    await source.fork(f"{sid}-b")
    assert [b.session_id for b in await source.branches()] == [f"{sid}-a", f"{sid}-b"]
    assert await tstore.delete_session(f"{sid}-a")
    assert [b.session_id for b in await source.branches()] == [f"{sid}-b"]


# ---------------------------------------------------------------- rewind (issue 15)


async def test_rewind_hides_the_turns_after_n_from_every_read_and_undo_brings_them_back(
    tstore: Store[Any], sid: str
) -> None:
    session = tstore.session(sid)
    await commit_turns(session, 2, 1, 3)
    everything = await session.get_items()
    assert await session.rewind(to_turn=1) == 2
    for reader in (session, tstore.session(sid)):
        assert await reader.get_items() == everything[:2]
        assert await reader.get_items(1) == everything[1:2]
        assert await reader.get_items(turns=5) == everything[:2]
        assert shape(await reader.turns()) == [(1, 2, None, False)]
    assert await session.pop_item() == everything[1]  # pops see the rewound history too
    await session.rollback()
    info = await tstore.session_info(sid)
    assert info is not None and info.item_count == 2
    assert await session.undo_rewind() == 2
    assert await tstore.session(sid).get_items() == everything
    assert shape(await session.turns()) == [
        (1, 2, None, False),
        (2, 1, None, False),
        (3, 3, None, False),
    ]
    info = await tstore.session_info(sid)
    assert info is not None and info.item_count == 6
    assert await session.undo_rewind() == 0  # nothing hidden


async def test_rewinds_stack_and_are_undone_newest_first(tstore: Store[Any], sid: str) -> None:
    session = tstore.session(sid)
    await commit_turns(session, 1, 1, 1, 1)
    everything = await session.get_items()
    assert await session.rewind(to_turn=3) == 1
    assert await session.rewind(to_turn=1) == 2
    assert await session.get_items() == everything[:1]
    assert await session.undo_rewind() == 2
    assert await session.get_items() == everything[:3]
    assert await session.undo_rewind() == 1
    assert await session.get_items() == everything


async def test_a_turn_committed_after_a_rewind_blocks_its_undo(
    tstore: Store[Any], sid: str
) -> None:
    session = tstore.session(sid)
    await commit_turns(session, 1, 2)
    await session.rewind(to_turn=1)
    await session.add_items([msg("instead")])
    await session.commit()
    with pytest.raises(CommitConflictError):
        await session.undo_rewind()
    assert await session.get_items() == [msg("t1.0"), msg("instead")]
    assert shape(await session.turns()) == [(1, 1, None, False), (2, 1, None, False)]


async def test_rewind_to_zero_hides_everything_and_a_clear_removes_the_hidden_turns(
    tstore: Store[Any], sid: str
) -> None:
    session = tstore.session(sid)
    await commit_turns(session, 2, 1)
    assert await session.rewind(to_turn=0) == 2
    assert await session.get_items() == [] and await session.turns() == []
    await session.clear_session()
    await session.commit()
    assert await session.undo_rewind() == 0
    assert await session.get_items() == []


async def test_rewind_refuses_bad_arguments_staged_changes_and_a_stale_view(
    tstore: Store[Any], sid: str
) -> None:
    session = tstore.session(sid)
    await commit_turns(session, 1, 1)
    with pytest.raises(ValueError, match="to_turn must be from 0 to 2"):
        await session.rewind(to_turn=3)
    with pytest.raises(ValueError, match="to_turn must be >= 0"):
        await session.rewind(to_turn=-1)
    with pytest.raises(TypeError, match="to_turn must be an int"):
        await session.rewind(to_turn=None)  # type: ignore[arg-type]
    assert await session.rewind(to_turn=2) == 0  # nothing after turn 2
    await session.add_items([msg("staged")])
    with pytest.raises(SessionError, match="staged changes"):
        await session.rewind(to_turn=1)
    with pytest.raises(SessionError, match="staged changes"):
        await session.undo_rewind()
    assert len(await tstore.session(sid).get_items()) == 2


async def test_a_fork_of_a_rewound_session_copies_only_what_reads_see(
    tstore: Store[Any], sid: str
) -> None:
    session = tstore.session(sid)
    await commit_turns(session, 1, 2, 1)
    await session.rewind(to_turn=2)
    assert await session.fork(f"{sid}-f") == 2
    assert await tstore.session(f"{sid}-f").get_items() == await session.get_items()


async def commit_approval_turns(session: Any) -> list[Any]:
    """Turns as an approval commits them: 1 a question; 2 a tool call the run paused on;
    3 its output and the answer (the resumed run); 4 another question. The items."""
    fcall = {"type": "function_call", "call_id": "c1", "name": "f", "arguments": "{}"}
    fout = {"type": "function_call_output", "call_id": "c1", "output": "ok"}
    for part in ([msg("q")], [fcall], [fout, msg("a", "assistant")], [msg("q2")]):
        await session.add_items(part)
        await session.commit()
    return [msg("q"), fcall, fout, msg("a", "assistant"), msg("q2")]


async def test_rewind_never_splits_a_tool_call_from_its_output(
    tstore: Store[Any], sid: str
) -> None:
    """A pair within one turn goes or stays with it; a pair across turns (an approval:
    call in turn 2, output in turn 3) refuses the cut between them, nothing applied."""
    session = tstore.session(sid)
    fcall = {"type": "function_call", "call_id": "c0", "name": "f", "arguments": "{}"}
    fout = {"type": "function_call_output", "call_id": "c0", "output": "ok"}
    await session.add_items([msg("q")])
    await session.commit()
    await session.add_items([fcall, fout, msg("a", "assistant")])
    await session.commit()
    await session.rewind(to_turn=1)
    assert await session.get_items() == [msg("q")]
    await session.undo_rewind()
    assert await session.get_items(turns=1) == [fcall, fout, msg("a", "assistant")]

    other = tstore.session(f"{sid}-across")
    everything = await commit_approval_turns(other)
    before = shape(await other.turns())
    with pytest.raises(
        ValueError,
        match=r"rewind\(\): turn 2 of session .* splits a tool call from its output: "
        r"function_call 'c1' is in turn 2, its function_call_output in turn 3",
    ):
        await other.rewind(to_turn=2)
    for reader in (other, tstore.session(f"{sid}-across")):  # nothing applied
        assert await reader.get_items() == everything
        assert shape(await reader.turns()) == before
    assert await other.undo_rewind() == 0  # no rewind was recorded
    assert await other.rewind(to_turn=3) == 1  # after the output: the pair stays
    assert await other.get_items() == everything[:4]
    assert await other.undo_rewind() == 1
    assert await other.rewind(to_turn=1) == 3  # before the call: the pair goes
    assert await other.get_items() == everything[:1]
    assert await other.undo_rewind() == 3
    assert await other.get_items() == everything


async def test_fork_refuses_an_at_turn_that_splits_a_tool_call_from_its_output(
    tstore: Store[Any], sid: str
) -> None:
    session = tstore.session(sid)
    everything = await commit_approval_turns(session)
    with pytest.raises(
        ValueError,
        match=r"fork\(\): turn 2 of session .* splits a tool call from its output: "
        r"function_call 'c1' is in turn 2, its function_call_output in turn 3",
    ):
        await session.fork(f"{sid}-f2", at_turn=2)
    assert await tstore.session(f"{sid}-f2").get_items() == []  # nothing applied
    assert await tstore.session(f"{sid}-f2").turns() == []
    assert await session.branches() == []
    assert await session.fork(f"{sid}-f1", at_turn=1) == 1  # before the call
    assert await tstore.session(f"{sid}-f1").get_items() == everything[:1]
    assert await session.fork(f"{sid}-f3", at_turn=3) == 3  # after the output
    assert await tstore.session(f"{sid}-f3").get_items() == everything[:4]
    assert await session.fork(f"{sid}-f2", at_turn=4) == 4  # the refused id is free
    assert await tstore.session(f"{sid}-f2").get_items() == everything


async def test_an_output_stored_without_its_call_refuses_no_rewind_nor_fork(
    tstore: Store[Any], sid: str
) -> None:
    """``integrity="off"`` may store an orphan output: no cut splits it from a call."""
    session = tstore.session(sid, integrity="off")
    orphan = {"type": "function_call_output", "call_id": "gone", "output": "ok"}
    await commit_turns(session, 1)
    await session.add_items([orphan, msg("a", "assistant")])
    await session.commit()
    assert await session.fork(f"{sid}-f", at_turn=1) == 1
    assert await session.rewind(to_turn=1) == 1
    assert await session.get_items() == [msg("t1.0")]


@pytest.mark.parametrize("kind", sorted(CALL_OUTPUT))
async def test_get_items_turns_never_starts_with_an_output_whose_call_is_in_an_earlier_turn(
    tstore: Store[Any], sid: str, kind: str
) -> None:
    """The rule of ``limit=``: the window starts after the orphan output (trimmed, not
    widened to the call's turn); ``integrity="off"`` returns it as is, as ``limit=``."""
    session = tstore.session(sid)
    await session.add_items([msg("q"), call(kind, "k1")])
    await session.commit()
    answer = [output(CALL_OUTPUT[kind], "k1"), msg("a", "assistant")]
    await session.add_items(answer)
    await session.commit()
    assert await session.get_items(turns=1) == [msg("a", "assistant")]
    assert await session.get_items(turns=1) == await session.get_items(2)
    assert await session.get_items(turns=2) == [msg("q"), call(kind, "k1"), *answer]
    await session.add_items([msg("q2")])  # the pending turn counts as one
    assert await session.get_items(turns=2) == [msg("a", "assistant"), msg("q2")]
    await session.rollback()
    unchecked = tstore.session(sid, integrity="off")
    assert await unchecked.get_items(turns=1) == answer
    assert await unchecked.get_items(turns=1) == await unchecked.get_items(2)


@pytest.mark.sdk_flow
async def test_after_an_approval_get_items_turns_1_is_input_the_api_takes(
    tstore: Store[Any], sid: str
) -> None:
    """A real approval flow: the call is committed with the paused run (turn 1), its output
    with the resumed one (turn 2). ``get_items(turns=1)`` holds no orphan output, and
    rewind and fork refuse the cut between the two turns."""
    need_sdk("approvals")

    agent = approval_agent()
    await pause_for_approval(tstore.session(sid), agent)
    later = tstore.session(sid)  # the next request
    await approve_and_resume(later, agent)

    turns = await later.turns()
    assert len(turns) == 2
    everything = await later.get_items()
    first, second = everything[: turns[0].items], everything[turns[0].items :]
    assert "function_call" in [item.get("type") for item in first]
    assert [item.get("type") for item in second][0] == "function_call_output"  # across turns
    window = await later.get_items(turns=1)
    assert window and check_history(window) == []  # no orphan output: the API takes it
    assert window == await later.get_items(len(second))  # as limit= trims it
    with pytest.raises(ValueError, match="turn 1 of session .* splits a tool call"):
        await later.rewind(to_turn=1)
    with pytest.raises(ValueError, match="turn 1 of session .* splits a tool call"):
        await later.fork(f"{sid}-paused", at_turn=1)
    assert len(await later.turns()) == 2


# ---------------------------------------------------------------- usage per turn (issue 15)


def usage_of(requests: int, tokens: int) -> TurnUsage:
    return TurnUsage(requests, tokens, tokens // 2, tokens // 4, tokens // 8)


async def test_usage_is_recorded_with_its_turn_and_summed_per_session_and_store(
    tstore: Store[Any], sid: str
) -> None:
    before = datetime.now(timezone.utc)
    session = tstore.session(sid)
    await session.add_items([msg("q1")])
    session.record_usage(usage_of(1, 80))
    session.record_usage(usage_of(1, 16))  # twice for one turn: added up
    await session.commit()
    await commit_turns(session, 1)  # a turn without usage
    other = tstore.session(f"{sid}-other")
    await other.add_items([msg("q")])
    other.record_usage(usage_of(2, 800))
    await other.commit()
    turns = await tstore.session(sid).turns()
    assert [t.usage for t in turns] == [usage_of(1, 80) + usage_of(1, 16), None]
    assert await session.usage() == usage_of(2, 96)
    assert await session.usage(since=datetime.now(timezone.utc) + timedelta(hours=1)) == (
        TurnUsage()
    )
    total = await tstore.usage(since=before - timedelta(seconds=5))
    assert total.requests >= 4 and total.input_tokens >= 896  # other tests' sessions too
    assert await tstore.usage(since=datetime.now(timezone.utc) + timedelta(hours=1)) == (
        TurnUsage()
    )


async def test_a_rollback_drops_the_staged_usage(tstore: Store[Any], sid: str) -> None:
    session = tstore.session(sid)
    await session.add_items([msg("q")])
    session.record_usage(usage_of(1, 10))
    await session.rollback()
    assert await session.usage() == TurnUsage()
    await session.add_items([msg("q")])
    session.record_usage(usage_of(1, 10))
    await session.commit()
    assert await session.usage() == usage_of(1, 10)


async def test_rewound_turns_still_count_and_forks_do_not_copy_usage(
    tstore: Store[Any], sid: str
) -> None:
    session = tstore.session(sid)
    for n in range(2):
        await session.add_items([msg(f"q{n}")])
        session.record_usage(usage_of(1, 100))
        await session.commit()
    await session.rewind(to_turn=1)
    assert await session.usage() == usage_of(1, 100) + usage_of(1, 100)
    await session.fork(f"{sid}-f")
    assert await tstore.session(f"{sid}-f").usage() == TurnUsage()


async def test_record_usage_needs_staged_items_and_a_usage(tstore: Store[Any], sid: str) -> None:
    session = tstore.session(sid)
    with pytest.raises(SessionError, match="no staged items"):
        session.record_usage(usage_of(1, 1))
    await session.add_items([msg("q")])
    with pytest.raises(TypeError, match="usage must be an agents Usage or a TurnUsage"):
        session.record_usage({"requests": 1})
    with pytest.raises(TypeError, match="input_tokens is -1"):
        session.record_usage(TurnUsage(1, -1))
    with pytest.raises(TypeError, match="since must be a datetime"):
        await session.usage(since="yesterday")  # type: ignore[arg-type]


async def test_a_runs_usage_from_the_sdk_is_stored_with_its_turn(
    tstore: Store[Any], sid: str
) -> None:
    model = ScriptedModel([[assistant_message("hello")]])
    agent = Agent(name="a", model=model)
    session = tstore.session(sid)
    async with session.transaction():
        result = await Runner.run(
            agent, "hi", session=session, run_config=RunConfig(tracing_disabled=True)
        )
        session.record_usage(result.context_wrapper.usage)
    sdk = result.context_wrapper.usage
    (turn,) = await session.turns()
    assert turn.usage is not None and turn.usage.requests == sdk.requests >= 1
    assert turn.usage.input_tokens == sdk.input_tokens
    assert turn.usage.output_tokens == sdk.output_tokens


async def test_commits_sharing_one_group_transaction_each_record_their_own_turn(
    store: Store[Any], target: Target
) -> None:
    """Group commit formed for certain (the write lock held meanwhile, as in
    test_group_commit.py): one transaction, and still one turn per commit, with its own
    range, run id and usage; three writers of one session make three turns."""
    from tests.contract.proxy import install_proxy
    from tests.contract.test_group_commit import EARLY, transactions_of, until

    run = uuid.uuid4().hex[:8]
    early = [f"t-{run}-early-{i}" for i in range(EARLY)]
    good = [f"t-{run}-good-{i}" for i in range(3)]
    shared = f"t-{run}-shared"
    proxy = install_proxy(store)
    sessions = [store.session(sid) for sid in early + good]
    writers = [store.session(shared) for _ in range(3)]
    for n, session in enumerate(sessions + writers):
        session.set_run_id(f"r{n}")
        await session.add_items([msg(f"{n}.{i}") for i in range(n % 3 + 1)])
        session.record_usage(TurnUsage(1, n, 0, 0, 0))
    everyone = sessions + writers
    async with target.writes_held():
        tasks = [asyncio.ensure_future(s.commit()) for s in everyone]
        await until(lambda: proxy.apply_calls == len(tasks), "every commit reached the backend")
    await asyncio.gather(*tasks)
    assert await transactions_of(target, [*good, shared]) == 1
    for n, session in enumerate(sessions):
        (turn,) = await store.session(session.session_id).turns()
        assert (turn.items, turn.run_id) == (n % 3 + 1, f"r{n}")
        assert turn.usage == TurnUsage(1, n, 0, 0, 0)
    turns = await store.session(shared).turns()
    assert sorted(t.run_id or "" for t in turns) == sorted(
        f"r{len(sessions) + k}" for k in range(3)
    )
    items = await store.session(shared).get_items()
    for turn in turns:  # each writer's turn covers exactly its own items
        n = int((turn.run_id or "r0")[1:])
        start = items.index(msg(f"{n}.0"))
        assert items[start : start + turn.items] == [msg(f"{n}.{i}") for i in range(turn.items)]
        assert turn.items == n % 3 + 1
