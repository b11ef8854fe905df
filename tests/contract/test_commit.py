"""Contract lines 4-7, 9, 10, the parts that need backend internals (raw SQL, a proxy
backend) or are the core's own: a failure mid-batch, retries, warnings, late writes,
errors. Every test runs on every backend.

The rest of these lines (the shielded commit, durability, exactly-once after an unknown
outcome, contiguous batches of concurrent writers and processes, ``transaction()``) are
spec checks of ``sessions.testing``, run on every backend by ``tests/conformance/``.
"""

from __future__ import annotations

import asyncio
import gc
import logging
from collections.abc import Awaitable, Callable
from typing import Any

import pytest

from sessions import BufferedSession, RetryPolicy, SQLiteSession, Store
from sessions.errors import (
    CommitConflictError,
    CommitError,
    InvalidHistoryError,
    InvalidSessionIdError,
    SessionClosedError,
    SessionError,
    StoreClosedError,
    TransientStorageError,
    UncommittedChangesWarning,
)
from tests.conftest import Target
from tests.contract import raw
from tests.contract.proxy import gate_apply, install_proxy
from tests.helpers import committed, msg


async def stored(target: Target, session_id: str) -> list[Any]:
    other = await target.open()
    return await other.session(session_id).get_items()


# ------------------------------------------------------------------ line 4: one transaction


async def test_commit_is_all_or_nothing_when_the_database_fails_mid_batch(
    store: Store[Any], target: Target, sid: str
) -> None:
    session = await committed(store, sid, "before")
    await target.add_poison_trigger(sid)
    try:
        await session.pop_item()  # a staged pop of committed history...
        await session.add_items([msg("a"), msg("b"), msg("poison"), msg("c")])  # ...and inserts
        with pytest.raises(CommitError) as info:
            await session.commit()
        assert info.value.outcome_known is True
        assert "poison" in str(info.value)
        # Nothing of the batch is visible: the pop was not applied, no item was inserted.
        assert await stored(target, sid) == [msg("before")]
        # ...and the staged changes are still there.
        assert session.pending.items == 4 and session.pending.pops == 1
    finally:
        await target.drop_poison_trigger()
    await session.commit()
    assert await stored(target, sid) == [msg("a"), msg("b"), msg("poison"), msg("c")]
    assert not session.has_pending


async def test_commit_with_nothing_staged_is_a_no_op(store: Store[Any], sid: str) -> None:
    session = store.session(sid)
    proxy = install_proxy(store)
    await session.commit()
    await session.commit()
    assert proxy.apply_calls == 0


@pytest.mark.parametrize("where", ["first", "middle"])
async def test_commit_is_shielded_from_cancellation_while_the_database_is_mid_commit(
    store: Store[Any], target: Target, sid: str, where: str
) -> None:
    """Cancelled (twice) while the database is inside the commit's transaction: held
    there for real (``hang()`` of ``tests/provision/``) at its first write or between two of
    its statements. The commit runs to its outcome, then ``CancelledError``."""
    session = store.session(sid)
    await session.add_items([msg("0")])
    await session.commit()  # the session exists: its row is updated mid-commit
    await session.add_items([msg("1"), msg("2"), msg("3")])
    async with target.hang(store, sid, where) as h:
        task = asyncio.create_task(session.commit())
        await h.reached()  # the database call is in flight, stopped mid-transaction
        task.cancel()
        await asyncio.sleep(0)
        task.cancel()  # cancelled twice while the commit is in flight
        await asyncio.sleep(0.05)
        assert not task.done(), "commit returned before its outcome was known"
        assert await raw.stored_rows(target, sid) == 1, "a reader saw part of the batch"
        h.release()
        with pytest.raises(asyncio.CancelledError):
            await task
    assert not session.has_pending
    assert await stored(target, sid) == [msg("0"), msg("1"), msg("2"), msg("3")]


# ------------------------------------------------------------------ line 5: idempotent


async def test_retry_after_an_attempt_that_reached_the_database_does_not_duplicate(
    store: Store[Any], target: Target, sid: str
) -> None:
    session = store.session(sid)
    proxy = install_proxy(store)
    failures = iter([True, True])

    async def lose_the_reply() -> None:
        if next(failures, False):
            raise TransientStorageError("connection lost after COMMIT", outcome_known=False)

    proxy.after_apply = lose_the_reply  # the batch is stored, then the caller sees a failure
    await session.add_items([msg("1"), msg("2")])
    await session.commit()
    assert proxy.apply_calls == 3
    assert await stored(target, sid) == [msg("1"), msg("2")]


@pytest.mark.parametrize(("attempts", "failures"), [(3, 2), (2, 2)])
async def test_a_transient_failure_of_the_read_a_commit_is_judged_against_is_retried(
    target: Target, sid: str, attempts: int, failures: int
) -> None:
    """A commit that pops reads the stored history to judge its batch first. That read
    gets the commit's attempts too (a pooled connection found dead after the server
    dropped it, say): ``failures`` transient failures in a row within ``attempts``
    attempts and the commit applies; as many as the attempts and it fails before
    sending anything (outcome known, the changes still staged), then applies once."""
    store = await target.open(retry=RetryPolicy(attempts=attempts, initial_delay=0.001))
    try:
        await committed(store, sid, "a", "b")
        session = store.session(sid)
        await session.pop_item()  # read before the hook: the pop is staged
        proxy = install_proxy(store)
        left = failures

        async def lost() -> None:
            nonlocal left
            if left:
                left -= 1
                raise TransientStorageError("connection lost", outcome_known=True)

        proxy.before_load = lost
        if failures < attempts:
            await session.commit()
        else:
            with pytest.raises(CommitError, match="the history it is checked against") as info:
                await session.commit()
            assert info.value.outcome_known is True and session.has_pending
            assert proxy.apply_calls == 0
            await session.commit()  # the read answers now
        assert left == 0 and proxy.apply_calls == 1 and not session.has_pending
        assert await stored(target, sid) == [msg("a")]
    finally:
        await store.close()


@pytest.mark.parametrize(
    "case", ["known", "unknown, resolved: not applied", "unknown, resolved: applied", "unknown"]
)
async def test_exhausted_retries_say_whether_the_outcome_is_known(
    target: Target, sid: str, case: str
) -> None:
    """Every attempt fails. ``known``: each failed before the database (busy). The
    others: each attempt's outcome is unknown, so the commit asks the database by
    batch id before giving up; it learns "not applied" (the attempts never got there),
    "applied" (they did: the commit returns), or nothing (the check fails too: the
    error says UNKNOWN). Either way the changes stay staged and land exactly once."""
    store = await target.open(retry=RetryPolicy(attempts=3, initial_delay=0.001))
    session = store.session(sid)
    proxy = install_proxy(store)

    async def fail_unknown() -> None:
        raise TransientStorageError("connection lost", outcome_known=case == "known")

    async def check_fails() -> None:
        raise TransientStorageError("still no connection", outcome_known=True)

    if case in ("known", "unknown, resolved: not applied"):
        proxy.before_apply = fail_unknown  # never reaches the database
    else:
        proxy.after_apply = fail_unknown  # reaches it; the answer is lost
    if case == "unknown":
        proxy.before_applied = check_fails
    await session.add_items([msg("1")])
    if case == "unknown, resolved: applied":
        await session.commit()  # the check found the batch: the commit succeeded
        assert proxy.apply_calls == 3 and not session.has_pending
        assert await stored(target, sid) == [msg("1")]
        return
    with pytest.raises(CommitError) as info:
        await session.commit()
    assert info.value.attempts == 3
    if case == "unknown":
        assert info.value.outcome_known is False
        assert "outcome UNKNOWN" in str(info.value)
        assert await stored(target, sid) == [msg("1")]  # it did land (3 tries, once)
    else:
        assert info.value.outcome_known is True
        assert "nothing applied" in str(info.value)
        assert await stored(target, sid) == []
    assert session.pending.items == 1
    proxy.before_apply = proxy.after_apply = proxy.before_applied = None
    await session.commit()
    assert not session.has_pending
    assert await stored(target, sid) == [msg("1")]


# ------------------------------------------------------------------ line 7: leak warnings


async def test_close_with_staged_changes_warns_and_writes_nothing(
    store: Store[Any], target: Target, sid: str, caplog: pytest.LogCaptureFixture
) -> None:
    session = store.session(sid)
    await session.add_items([msg("1"), msg("2")])
    with (
        caplog.at_level(logging.WARNING, logger="sessions"),
        pytest.warns(UncommittedChangesWarning, match=sid),
    ):
        await session.close()
    assert any(sid in r.getMessage() and "2 staged item" in r.getMessage() for r in caplog.records)
    assert await stored(target, sid) == []
    await session.close()  # idempotent, and no second warning


async def test_garbage_collected_session_with_staged_changes_warns(
    store: Store[Any], sid: str, caplog: pytest.LogCaptureFixture
) -> None:
    session = store.session(sid)
    await session.add_items([msg("1")])
    with (
        caplog.at_level(logging.WARNING, logger="sessions"),
        pytest.warns(UncommittedChangesWarning, match=sid),
    ):
        del session
        gc.collect()
    assert any(sid in r.getMessage() for r in caplog.records)


async def test_clean_close_does_not_warn(store: Store[Any], sid: str) -> None:
    session = await committed(store, sid, "1")
    await session.close()  # filterwarnings=error would fail the test on any warning


# ------------------------------------------------------------------ transaction()


async def test_transaction_does_not_nest(store: Store[Any], sid: str) -> None:
    session = store.session(sid)
    with pytest.raises(SessionError, match="does not nest"):
        async with session.transaction():
            async with session.transaction():
                pass


Block = Callable[[BufferedSession], Awaitable[None]]


async def _refuse_with_invalid_history(
    store: Store[Any], target: Target, sid: str
) -> tuple[BufferedSession, Block, type[Exception]]:
    """The block stages a tool output without its call (``integrity="reject"``)."""

    async def block(session: BufferedSession) -> None:
        orphan = {"type": "function_call_output", "call_id": "c1", "output": "42"}
        await session.add_items([msg("question"), orphan])

    return store.session(sid, integrity="reject"), block, InvalidHistoryError


async def _refuse_with_a_pop_conflict(
    store: Store[Any], target: Target, sid: str
) -> tuple[BufferedSession, Block, type[Exception]]:
    """The block pops a stored item that another writer removes before the block ends."""
    session = store.session(sid)
    await session.add_items([msg("stored 1"), msg("stored 2")])
    await session.commit()
    other = (await target.open()).session(sid, autocommit=True)

    async def block(session: BufferedSession) -> None:
        assert await session.pop_item() == msg("stored 2")
        await session.add_items([msg("answer")])
        assert await other.pop_item() == msg("stored 2")

    return session, block, CommitConflictError


async def _refuse_with_a_run_state_version_conflict(
    store: Store[Any], target: Target, sid: str
) -> tuple[BufferedSession, Block, type[Exception]]:
    """The block saves a run state; another writer saved one after this session read
    the stored version."""
    session = store.session(sid)
    other = (await target.open()).session(sid)

    async def block(session: BufferedSession) -> None:
        assert (await session.run_state_record()).version == 0
        await session.add_items([msg("answer")])
        session.stage_run_state("{}", label="ours")
        other.stage_run_state("{}", label="theirs")
        await other.commit()

    return session, block, CommitConflictError


@pytest.mark.parametrize(
    "refusal",
    [
        _refuse_with_invalid_history,
        _refuse_with_a_pop_conflict,
        _refuse_with_a_run_state_version_conflict,
    ],
    ids=["invalid-history", "pop-conflict", "run-state-version-conflict"],
)
async def test_a_transaction_whose_commit_is_refused_rolls_back_and_the_next_commits_its_own_items(
    store: Store[Any],
    target: Target,
    sid: str,
    refusal: Any,
    caplog: pytest.LogCaptureFixture,
) -> None:
    """The refused batch can never commit: the block leaves nothing staged (nothing
    applied), and the next transaction on the same object commits only its own items."""
    session, block, error = await refusal(store, target, sid)
    with caplog.at_level(logging.WARNING, logger="sessions"), pytest.raises(error) as info:
        async with session.transaction():
            await block(session)
            before = await stored(target, sid)
    assert not session.has_pending, session.pending
    assert await stored(target, sid) == before
    assert any("rolled back" in r.getMessage() and sid in r.getMessage() for r in caplog.records)
    if hasattr(info.value, "__notes__"):  # Python 3.11+
        assert any("rolled the staged changes" in note for note in info.value.__notes__)
    async with session.transaction():
        await session.add_items([msg("next request")])
    assert await stored(target, sid) == [*before, msg("next request")]
    assert not session.has_pending


async def test_a_commit_refused_outside_a_transaction_keeps_its_changes_staged(
    store: Store[Any], target: Target, sid: str
) -> None:
    """``commit()`` by hand is not ``transaction()``: its changes stay staged, to fix
    or roll back."""
    session, block, error = await _refuse_with_invalid_history(store, target, sid)
    await block(session)
    with pytest.raises(error):
        await session.commit()
    assert session.pending.items == 2
    await session.rollback()


# ------------------------------------------------------------------ line 9: late writes


async def test_writes_from_a_finished_transaction_are_refused(
    store: Store[Any], target: Target, sid: str, caplog: pytest.LogCaptureFixture
) -> None:
    session = store.session(sid)
    go = asyncio.Event()
    late: asyncio.Task[None] | None = None

    async def background_run() -> None:  # like a streamed run still going after the block
        await go.wait()
        await session.add_items([msg("late")])
        await session.pop_item()
        await session.clear_session()

    with pytest.raises(asyncio.CancelledError):
        async with session.transaction():
            await session.add_items([msg("in time")])
            late = asyncio.create_task(background_run())
            raise asyncio.CancelledError  # the consumer is cancelled: rollback
    assert late is not None
    with caplog.at_level(logging.WARNING, logger="sessions"):
        go.set()
        await late
    assert not session.has_pending
    assert sum("refused" in r.getMessage() for r in caplog.records) == 3
    await session.add_items([msg("next turn")])  # the caller's own later writes are fine
    await session.commit()
    assert await stored(target, sid) == [msg("next turn")]


async def test_tasks_inside_a_live_transaction_can_write(
    store: Store[Any], target: Target, sid: str
) -> None:
    session = store.session(sid)
    async with session.transaction():
        await asyncio.create_task(session.add_items([msg("from a child task")]))
    assert await stored(target, sid) == [msg("from a child task")]


# ------------------------------------------------------------------ autocommit


async def test_autocommit_makes_each_write_its_own_commit(
    store: Store[Any], target: Target, sid: str
) -> None:
    session = store.session(sid, autocommit=True)
    await session.add_items([msg("1"), msg("2"), msg("3")])
    assert not session.has_pending
    assert await stored(target, sid) == [msg("1"), msg("2"), msg("3")]
    assert await session.pop_item() == msg("3")
    assert await stored(target, sid) == [msg("1"), msg("2")]
    await session.clear_session()
    assert await stored(target, sid) == []


async def test_autocommit_pop_is_shielded(store: Store[Any], target: Target, sid: str) -> None:
    session = store.session(sid, autocommit=True)
    await session.add_items([msg("1"), msg("2")])
    proxy = install_proxy(store)
    entered, release = gate_apply(proxy)
    task = asyncio.create_task(session.pop_item())
    await entered.wait()
    task.cancel()
    release.set()
    with pytest.raises(asyncio.CancelledError):
        await task
    assert await stored(target, sid) == [msg("1")]
    assert not session.has_pending


# ------------------------------------------------------------------ line 10: errors, corruption


async def test_closed_session_refuses_every_operation(store: Store[Any], sid: str) -> None:
    session = store.session(sid)
    await session.close()
    for call in (
        session.get_items(),
        session.add_items([msg("x")]),
        session.pop_item(),
        session.clear_session(),
        session.commit(),
        session.rollback(),
    ):
        with pytest.raises(SessionClosedError, match="closed"):
            await call


async def test_session_on_a_closed_store_fails_loudly(target: Target, sid: str) -> None:
    store = await target.open()
    session = store.session(sid)
    await store.close()
    with pytest.raises(StoreClosedError, match="store is closed"):
        await session.get_items()
    with pytest.raises(StoreClosedError):
        store.session(sid)


async def test_a_borrowed_store_is_not_closed_by_its_sessions(store: Store[Any], sid: str) -> None:
    session = store.session(sid)
    await session.close()
    assert not store.closed
    other = store.session(sid)
    assert await other.get_items() == []


@pytest.mark.parametrize("bad", ["", "x" * 5000, "nul\x00inside", 42, None, b"bytes", "\ud800"])
async def test_invalid_session_id_is_refused_at_construction(store: Store[Any], bad: Any) -> None:
    with pytest.raises(InvalidSessionIdError):
        store.session(bad)
    with pytest.raises(InvalidSessionIdError):
        SQLiteSession(bad)


async def test_corrupt_row_is_skipped_with_a_warning_and_hides_nothing(
    store: Store[Any], target: Target, sid: str, caplog: pytest.LogCaptureFixture
) -> None:
    session = store.session(sid)
    await session.add_items([msg("1"), msg("2"), msg("3")])
    await session.commit()
    await raw.corrupt_newest(target, sid)
    with caplog.at_level(logging.WARNING, logger="sessions"):
        assert await session.get_items() == [msg("1"), msg("2")]
        assert await session.get_items(limit=2) == [msg("1"), msg("2")]
        assert await session.pop_item() == msg("2")
    assert any("corrupt" in r.getMessage() for r in caplog.records)
    await session.commit()
    assert await session.get_items() == [msg("1")]


async def test_a_cancellation_swallowed_inside_a_transaction_rolls_it_back_on_3_11_and_later(
    store: Store[Any], target: Target, sid: str
) -> None:
    """openai-agents before 0.7 swallowed a consumer's cancellation in stream_events():
    the block then ended normally with a turn cut short. From Python 3.11 the pending
    cancellation is visible (Task.cancelling) and the block rolls back and re-raises;
    on 3.10 it cannot be seen, and the block commits what was staged."""
    import sys

    session = store.session(sid)
    inside = asyncio.Event()

    async def handler() -> None:
        async with session.transaction():
            await session.add_items([msg("half a turn")])
            inside.set()
            try:
                await asyncio.sleep(30)
            except asyncio.CancelledError:
                pass  # swallowed without uncancel(), as the old SDK did

    task = asyncio.create_task(handler())
    await inside.wait()
    task.cancel()
    await asyncio.wait({task}, timeout=10)
    assert task.done()
    if sys.version_info >= (3, 11):
        assert task.cancelled()
        assert await stored(target, sid) == []
        assert not session.has_pending
    else:
        assert not task.cancelled()
        assert await stored(target, sid) == [msg("half a turn")]


async def test_a_timeout_handled_inside_a_transaction_still_commits(
    store: Store[Any], target: Target, sid: str
) -> None:
    """asyncio.wait_for/timeout un-count their own cancellations: a handled timeout is
    not a cancellation of the block."""
    session = store.session(sid)
    async with session.transaction():
        await session.add_items([msg("kept")])
        try:
            await asyncio.wait_for(asyncio.sleep(30), 0.01)
        except asyncio.TimeoutError:
            pass
    assert await stored(target, sid) == [msg("kept")]
