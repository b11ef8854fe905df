"""Group commit, on every backend: commits of several sessions that arrive together share
one transaction, and each still succeeds or fails alone.

To make a group form for certain, the database's write lock is held by another
connection (SQLite: ``BEGIN IMMEDIATE``; PostgreSQL: a ``SHARE ROW EXCLUSIVE`` lock on
the batch table) while more commits are started than a backend sends on its own; once
every commit has reached the backend, the lock is released. Whether commits shared a
transaction is read back from the database: every batch record's ``committed_at`` is
one value per transaction (SQLite: the group's clock reading; PostgreSQL: ``now()``).
"""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import Callable
from typing import Any

import pytest

from sessions import Store
from sessions.errors import CommitError
from tests.conftest import Target
from tests.contract.proxy import install_proxy
from tests.helpers import msg

# More commits than any backend sends at once on its own, so that the rest must wait
# and leave together.
EARLY = 8


async def transactions_of(target: Target, session_ids: list[str]) -> int:
    """How many transactions recorded these sessions' batches."""
    marks = ", ".join(target.param(n) for n in range(1, len(session_ids) + 1))
    found = await target.fetch_value(
        f"SELECT count(DISTINCT committed_at) FROM txs_batches WHERE session_id IN ({marks})",
        *session_ids,
    )
    return int(found)


async def until(condition: Callable[[], bool], what: str) -> None:
    for _ in range(1000):
        if condition():
            return
        await asyncio.sleep(0.01)
    raise AssertionError(f"timed out waiting until {what}")


async def stored(target: Target, session_id: str) -> list[Any]:
    other = await target.open()
    return await other.session(session_id).get_items()


async def test_a_failing_commit_in_a_group_fails_alone_and_the_others_share_one_transaction(
    store: Store[Any], target: Target
) -> None:
    run = uuid.uuid4().hex[:8]
    early = [f"g-{run}-early-{i}" for i in range(EARLY)]
    good = [f"g-{run}-good-{i}" for i in range(3)]
    bad = f"g-{run}-bad"
    order = early + good[:2] + [bad] + good[2:]
    proxy = install_proxy(store)
    sessions = {sid: store.session(sid) for sid in order}
    for sid, session in sessions.items():
        await session.add_items([msg(sid), msg("poison" if sid == bad else "fine")])
    await target.add_poison_trigger(bad)
    try:
        async with target.writes_held():
            tasks = {sid: asyncio.ensure_future(sessions[sid].commit()) for sid in order}
            await until(lambda: proxy.apply_calls == len(order), "every commit reached the backend")
        results = await asyncio.gather(*tasks.values(), return_exceptions=True)
        outcomes = dict(zip(order, results, strict=True))
    finally:
        await target.drop_poison_trigger()

    failure = outcomes.pop(bad)
    assert isinstance(failure, CommitError), failure
    assert failure.outcome_known is True and "poison" in str(failure)
    assert all(outcome is None for outcome in outcomes.values()), outcomes
    for sid in early + good:
        assert await stored(target, sid) == [msg(sid), msg("fine")], sid
    assert await stored(target, bad) == []
    assert sessions[bad].pending.items == 2  # still staged, to retry or roll back
    # The group really formed: the good commits, started after the early ones had taken
    # every free send, were stored by ONE transaction although one of their group failed.
    assert await transactions_of(target, good) == 1
    await sessions[bad].commit()  # the trigger is gone: applies now, once
    assert await stored(target, bad) == [msg(bad), msg("poison")]


async def test_commits_of_one_session_in_one_group_each_stay_whole_and_contiguous(
    store: Store[Any], target: Target
) -> None:
    run = uuid.uuid4().hex[:8]
    sid = f"g-{run}-shared"
    early = [f"g-{run}-early-{i}" for i in range(EARLY)]
    proxy = install_proxy(store)
    writers = [store.session(sid) for _ in range(3)]
    for n, writer in enumerate(writers):
        await writer.add_items([msg(f"w{n}.{i}") for i in range(4)])
    others = [store.session(s) for s in early]
    for other in others:
        await other.add_items([msg("x")])
    async with target.writes_held():
        tasks = [asyncio.ensure_future(s.commit()) for s in others + writers]
        await until(lambda: proxy.apply_calls == len(tasks), "every commit reached the backend")
    await asyncio.gather(*tasks)
    texts = [item["content"] for item in await stored(target, sid)]
    assert sorted(texts) == sorted(f"w{n}.{i}" for n in range(3) for i in range(4))
    for n in range(3):  # each writer's batch is contiguous and in order
        start = texts.index(f"w{n}.0")
        assert texts[start : start + 4] == [f"w{n}.{i}" for i in range(4)], texts
    assert await transactions_of(target, [sid]) == 1


@pytest.mark.parametrize("count", [1, 2])
async def test_commits_one_after_another_are_not_held_back(
    store: Store[Any], target: Target, count: int
) -> None:
    """Sequential commits never wait for company: each is its own transaction."""
    sid = f"g-{uuid.uuid4().hex}"
    session = store.session(sid)
    for i in range(count * 3):
        await session.add_items([msg(str(i))])
        await session.commit()
    assert await transactions_of(target, [sid]) == count * 3


async def test_callers_cancelled_while_their_commits_wait_in_a_group_get_it_after_every_commit_landed(
    store: Store[Any], target: Target
) -> None:
    """Every other caller is cancelled (twice) while the group waits for the write lock:
    those callers get ``CancelledError`` only once their commit is stored, nothing of any
    commit is lost or doubled, and the callers left alone are not disturbed."""
    run = uuid.uuid4().hex[:8]
    order = [f"c-{run}-{i}" for i in range(EARLY + 6)]
    proxy = install_proxy(store)
    sessions = {sid: store.session(sid) for sid in order}
    for sid, session in sessions.items():
        await session.add_items([msg(sid), msg("second")])
    async with target.writes_held():
        tasks = {sid: asyncio.ensure_future(sessions[sid].commit()) for sid in order}
        await until(lambda: proxy.apply_calls == len(order), "every commit reached the backend")
        cancelled = order[1::2]
        for _ in range(2):
            for sid in cancelled:
                tasks[sid].cancel()
            await asyncio.sleep(0.05)
        # Held: no caller is released while the database still holds its commit back.
        assert not any(task.done() for task in tasks.values())
    outcomes = await asyncio.gather(*tasks.values(), return_exceptions=True)
    results = dict(zip(order, outcomes, strict=True))
    for sid in order:
        if sid in cancelled:
            assert isinstance(results[sid], asyncio.CancelledError), (sid, results[sid])
        else:
            assert results[sid] is None, (sid, results[sid])
        assert await stored(target, sid) == [msg(sid), msg("second")], sid
        assert sessions[sid].pending.items == 0, sid  # known applied: nothing left staged
