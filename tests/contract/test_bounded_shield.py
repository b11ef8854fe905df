"""The shield is bounded: a hung database never holds a caller past ``commit_timeout``.

Each test hangs the real database inside a commit (``hang()`` of ``tests/provision/``) and
checks three things: the caller is released within the bound (plus at most 1 s); no
reader ever sees part of the batch; once the database moves again, the session resolves
the unknown outcome by batch id and the history holds the batch exactly once.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import pytest

from sessions import Store
from sessions.errors import CommitError
from tests.conftest import Target
from tests.helpers import msg

BOUND = 1.0  # commit_timeout of these tests, seconds
SLACK = 1.0  # how much later than the bound the caller may be released


BEFORE = [msg("before")]
BATCH = [msg("a"), msg("b"), msg("c"), msg("d")]


async def stored(target: Target, session_id: str) -> list[Any]:
    other = await target.open()
    try:
        return await other.session(session_id).get_items()
    finally:
        await other.close()
        target.opened.remove(other)


async def released_within_bound(task: asyncio.Task[Any]) -> None:
    done, _ = await asyncio.wait({task}, timeout=BOUND + SLACK)
    assert task in done, f"the caller was still held {BOUND + SLACK}s after commit() began"


async def settle_and_check(target: Target, session: Any, sid: str) -> None:
    """After the hang: never torn, resolved exactly once, durable after commit()."""
    assert await stored(target, sid) in (BEFORE, BEFORE + BATCH), "a reader saw a torn batch"
    assert await session.get_items() == BEFORE + BATCH  # resolved by batch id, no doubles
    await session.commit()
    assert not session.has_pending
    assert await stored(target, sid) == BEFORE + BATCH


@asynccontextmanager
async def hung_commit(
    target: Target, sid: str, where: str
) -> AsyncIterator[tuple[Any, asyncio.Task[Any]]]:
    """A session whose ``commit()`` (the returned task) is hung in the database at ``where``."""
    store = await target.open(commit_timeout=BOUND)
    session = await start_hung_commit(target, store, sid)
    async with target.hang(store, sid, where) as h:
        task = asyncio.create_task(session.commit())
        await h.reached()
        yield session, task


async def start_hung_commit(target: Target, store: Store[Any], sid: str) -> Any:
    session = store.session(sid)
    await session.add_items(BEFORE)
    await session.commit()
    await session.add_items(BATCH)
    return session


@pytest.mark.parametrize("where", ["first", "middle"])
async def test_a_cancelled_caller_of_commit_into_a_hung_database_is_released_within_the_bound(
    target: Target, sid: str, where: str
) -> None:
    async with hung_commit(target, sid, where) as (session, task):
        task.cancel()
        await released_within_bound(task)
        assert task.cancelled(), "the caller's CancelledError was not re-raised"
        assert session.pending.items == len(BATCH)  # nothing lost: still staged
    await settle_and_check(target, session, sid)


@pytest.mark.parametrize("where", ["first", "middle"])
async def test_commit_into_a_hung_database_raises_an_unknown_outcome_at_the_bound(
    target: Target, sid: str, where: str
) -> None:
    async with hung_commit(target, sid, where) as (session, task):
        await released_within_bound(task)
        with pytest.raises(CommitError) as info:
            task.result()
        assert info.value.outcome_known is False
        assert "commit_timeout=1s" in str(info.value)
    await settle_and_check(target, session, sid)


async def test_an_autocommit_write_into_a_hung_database_is_released_within_the_bound(
    target: Target, sid: str
) -> None:
    store = await target.open(commit_timeout=BOUND)
    session = store.session(sid, autocommit=True)
    await session.add_items(BEFORE)
    async with target.hang(store, sid, "middle") as h:
        task = asyncio.create_task(session.add_items(BATCH))
        await h.reached()
        task.cancel()
        await released_within_bound(task)
        assert task.cancelled()
    await settle_and_check(target, session, sid)


async def test_close_of_a_store_with_a_hung_commit_is_released_within_the_bound(
    target: Target, sid: str
) -> None:
    store = await target.open(commit_timeout=BOUND)
    session = await start_hung_commit(target, store, sid)
    async with target.hang(store, sid, "middle") as h:
        commit = asyncio.create_task(session.commit())
        await h.reached()
        closing = asyncio.create_task(store.close())
        await asyncio.sleep(0)
        closing.cancel()
        await released_within_bound(closing)
        await released_within_bound(commit)
    assert await stored(target, sid) in (BEFORE, BEFORE + BATCH)


async def test_a_transaction_whose_commit_outcome_is_unknown_keeps_its_changes_staged(
    target: Target, sid: str
) -> None:
    """Unlike a refused commit (rolled back by ``transaction()``), a commit of unknown
    outcome leaves the block's changes staged: the database hangs inside the commit at
    the block's exit, ``commit_timeout`` passes, and the next read resolves the batch
    by its id once the database moves again (stored exactly once)."""
    store = await target.open(commit_timeout=BOUND)
    session = store.session(sid)
    await session.add_items(BEFORE)
    await session.commit()

    async def request() -> None:
        async with session.transaction():
            await session.add_items(BATCH)

    async with target.hang(store, sid, "middle") as h:
        task = asyncio.create_task(request())
        await h.reached()
        await released_within_bound(task)
        with pytest.raises(CommitError) as info:
            task.result()
        assert info.value.outcome_known is False
        assert session.pending.items == len(BATCH)  # kept, to be resolved by batch id
    await settle_and_check(target, session, sid)
