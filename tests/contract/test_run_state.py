"""A run state (a run waiting for a human's approval) saved with its history, atomically.

``stage_run_state`` / ``discard_run_state`` are staged with the turn's items and applied
by the same commit, in the same database transaction; ``load_run_state`` /
``run_state_record`` read the staged state, else the stored one. Every write is checked
against the version this session last read (compare and set). Every test runs on every
backend; the end-to-end approval flow with the SDK's runner is at the end.
"""

from __future__ import annotations

import json
from typing import Any

import pytest

from sessions import SQLiteSession, Store, TransactionalSession
from sessions.errors import CommitConflictError, CommitError, SessionError
from tests.conftest import Target
from tests.helpers import approval_agent, approve_and_resume, msg, pause_for_approval
from tests.sdk import need_sdk


def state(label: str) -> str:
    """Stands for ``RunState.to_string()`` (the API takes the text as well)."""
    return json.dumps({"$schemaVersion": "test", "label": label})


async def other(target: Target, sid: str) -> Any:
    """A second writer (another process, say): its own store on the same database."""
    return (await target.open()).session(sid)


async def saved(target: Target, sid: str) -> tuple[list[Any], str | None, int]:
    """What is durable: items, state text, state version."""
    session = await other(target, sid)
    record = await session.run_state_record()
    assert not record.staged
    return await session.get_items(), record.text, record.version


async def test_the_state_is_committed_with_the_items_of_its_turn(
    store: Store[Any], target: Target, sid: str
) -> None:
    session = store.session(sid)
    await session.add_items([msg("delete my account"), msg("needs approval", "assistant")])
    session.stage_run_state(state("waiting"), label="waiting for approval")
    assert await saved(target, sid) == ([], None, 0)  # nothing before the commit
    assert session.pending.run_state and session.has_pending
    record = await session.run_state_record()  # reads see the staged state
    assert (record.text, record.version, record.staged) == (state("waiting"), 0, True)
    assert record.label == "waiting for approval"
    await session.commit()
    items, text, version = await saved(target, sid)
    assert len(items) == 2 and text == state("waiting") and version == 1
    assert (await (await other(target, sid)).run_state_record()).label == "waiting for approval"
    assert not session.has_pending


async def test_rollback_drops_the_state_with_the_items(
    store: Store[Any], target: Target, sid: str
) -> None:
    session = store.session(sid)
    async with session.transaction():
        await session.add_items([msg("kept")])
        session.stage_run_state(state("kept"))
    with pytest.raises(RuntimeError):
        async with session.transaction():
            await session.add_items([msg("dropped")])
            session.discard_run_state()
            raise RuntimeError("the request failed")
    assert await saved(target, sid) == ([msg("kept")], state("kept"), 1)
    assert (await session.run_state_record()).text == state("kept")


async def test_a_commit_the_database_rejects_applies_neither(
    store: Store[Any], target: Target, sid: str
) -> None:
    session = store.session(sid)
    await target.add_poison_trigger(sid)
    try:
        await session.add_items([msg("poison")])
        session.stage_run_state(state("never"))
        with pytest.raises(CommitError):
            await session.commit()
    finally:
        await target.drop_poison_trigger()
    assert await saved(target, sid) == ([], None, 0)
    await session.rollback()


async def test_a_state_changed_since_it_was_read_makes_the_commit_conflict(
    store: Store[Any], target: Target, sid: str
) -> None:
    first = store.session(sid)
    first.stage_run_state(state("v1"))
    await first.commit()
    approver, rejecter = store.session(sid), await other(target, sid)
    assert (await approver.run_state_record()).version == 1
    assert (await rejecter.run_state_record()).version == 1
    await approver.add_items([msg("approved")])
    approver.stage_run_state(state("approved"))
    await approver.commit()
    await rejecter.add_items([msg("rejected")])
    rejecter.discard_run_state()
    with pytest.raises(CommitConflictError, match="version 2, not 1"):
        await rejecter.commit()
    # Nothing of the losing transaction: neither its state change nor its items.
    assert await saved(target, sid) == ([msg("approved")], state("approved"), 2)
    await rejecter.rollback()


async def test_removals_move_the_version_on_and_versions_are_never_reused(
    store: Store[Any], target: Target, sid: str
) -> None:
    session = store.session(sid)
    for action in ("write", "discard", "discard", "write"):
        await session.run_state_record()  # read: the next write is checked against it
        if action == "write":
            session.stage_run_state(state(action))
        else:
            session.discard_run_state()
        await session.commit()
    assert await saved(target, sid) == ([], state("write"), 4)


async def test_without_a_read_a_write_is_unconditional(
    store: Store[Any], target: Target, sid: str
) -> None:
    writer = await other(target, sid)
    writer.stage_run_state(state("theirs"))
    await writer.commit()
    session = store.session(sid)
    session.stage_run_state(state("mine"))  # never read: no version to check against
    await session.commit()
    assert (await saved(target, sid))[1:] == (state("mine"), 2)


async def test_deleting_a_session_deletes_its_state(
    store: Store[Any], target: Target, sid: str
) -> None:
    session = store.session(sid)
    await session.add_items([msg("x")])
    session.stage_run_state(state("x"))
    await session.commit()
    assert await store.delete_session(sid)
    assert await saved(target, sid) == ([], None, 0)


async def test_what_cannot_keep_a_state_with_its_history_refuses_it(
    store: Store[Any], sid: str
) -> None:
    autocommit = store.session(sid, autocommit=True)
    with pytest.raises(SessionError, match="autocommit"):
        autocommit.stage_run_state(state("x"))
    wrapper = TransactionalSession(SQLiteSession(sid))
    with pytest.raises(SessionError, match="no place to store a run state"):
        wrapper.stage_run_state(state("x"))
    with pytest.raises(SessionError, match="no place to store a run state"):
        await wrapper.run_state_record()
    with pytest.raises(TypeError, match="takes an agents RunState"):
        store.session(sid).stage_run_state(42)
    assert not autocommit.has_pending and not wrapper.has_pending
    await wrapper.close()
    await wrapper.inner.close()  # type: ignore[attr-defined]


# --------------------------------------------------------------------------- with the runner


@pytest.mark.sdk_flow
async def test_an_approval_flow_across_two_transactions(
    store: Store[Any], target: Target, sid: str
) -> None:
    """Run 1 stops for approval; its items and state commit together. Run 2 loads the
    state, approves, resumes; the tool output, the answer and the removal of the state
    commit together."""
    need_sdk("approvals")

    runs: list[str] = []
    agent = approval_agent(runs)
    session = store.session(sid)
    await pause_for_approval(session, agent)
    items, text, version = await saved(target, sid)
    assert text is not None and version == 1 and runs == []
    assert [item.get("type") for item in items][-1] == "function_call"

    later = (await target.open()).session(sid)  # the next request: a new session object
    await approve_and_resume(later, agent)
    items, text, version = await saved(target, sid)
    assert runs == ["ann"] and text is None and version == 2
    kinds = [item.get("type", item.get("role")) for item in items]
    assert kinds.count("function_call") == 1 and kinds.count("function_call_output") == 1
