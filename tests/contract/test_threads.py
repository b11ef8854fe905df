"""Threads that each run an event loop of their own, sharing one session object.

The one-liners ``SQLiteSession(id, path)`` and ``PostgresSession(id, dsn)`` open one
store per event loop, on first use there, and serialize their operations across loops
with one lock (``sessions._engine.locks.CrossLoopLock``); their staged changes are shared by
every thread. A ``Store`` belongs to the loop it was opened on and refuses any other at
once, naming both. Every wait here is bounded: a thread that does not finish fails
the test instead of hanging it.
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Callable, Coroutine
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import pytest
from agents import Agent, RunConfig, Runner

from sessions import BufferedSession, SQLiteSession
from sessions._engine.locks import CrossLoopLock, _Waiter
from sessions.errors import WrongEventLoopError
from tests.conftest import Target, make_target
from tests.helpers import msg
from tests.sdk import ScriptedModel, assistant_message, has

THREADS = 5
PER_THREAD = 8
JOIN = 60.0  # seconds a thread may take before the test fails (never hangs)


def in_threads(work: Callable[[int], Coroutine[Any, Any, Any]], n: int = THREADS) -> list[Any]:
    """Run ``work(i)`` in ``n`` threads, each with ``asyncio.run`` (its own loop), at once."""
    results: list[Any] = [None] * n
    errors: list[BaseException] = []
    start = threading.Barrier(n)

    def main(i: int) -> None:
        try:
            start.wait(JOIN)
            results[i] = asyncio.run(work(i))
        except BaseException as exc:  # noqa: BLE001 - reported below
            errors.append(exc)

    threads = [threading.Thread(target=main, args=(i,), daemon=True) for i in range(n)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(JOIN)
    stuck = [t.name for t in threads if t.is_alive()]
    assert not stuck, f"threads still running after {JOIN}s: {stuck}"
    if errors:
        raise errors[0]
    return results


def one_liner(target: Target, sid: str, **options: Any) -> BufferedSession:
    return target.session(sid, **options)


@pytest.fixture(params=["sqlite", "postgres"])
def place(request: pytest.FixtureRequest, tmp_path: Path) -> Target:
    """Sync on purpose: probing PostgreSQL must happen outside the running loop."""
    return make_target(request.param, tmp_path, request)


async def schema_ready(target: Target) -> None:
    """Create the tables once, so that the threads do not all migrate at once."""
    store = await target.open()
    await store.close()
    target.opened.clear()


@pytest.mark.parametrize("autocommit", [True, False], ids=["autocommit", "buffered"])
async def test_five_threads_with_their_own_loops_share_one_session_and_lose_nothing(
    place: Target, sid: str, autocommit: bool
) -> None:
    await schema_ready(place)
    session = one_liner(place, sid, autocommit=autocommit)
    stores: list[Any] = [None] * THREADS

    async def work(i: int) -> None:
        for n in range(PER_THREAD):
            await session.add_items([msg(f"t{i}-{n}")])
            if not autocommit:
                await session.commit()
        stores[i] = session.store  # this loop's own store
        assert len(await session.get_items()) >= PER_THREAD

    await asyncio.to_thread(in_threads, work)
    # One store per loop, each closed when its asyncio.run() ended.
    assert len({id(store) for store in stores}) == THREADS
    assert all(store.closed for store in stores)
    items = await session.get_items()  # this loop gets a store of its own
    assert len(items) == THREADS * PER_THREAD
    for i in range(THREADS):  # each thread's items in its order
        mine = [item["content"] for item in items if item["content"].startswith(f"t{i}-")]
        assert mine == [f"t{i}-{n}" for n in range(PER_THREAD)]
    assert not session.has_pending
    await session.close()


async def test_staged_writes_from_several_threads_are_one_shared_transaction(
    place: Target, sid: str
) -> None:
    await schema_ready(place)
    session = one_liner(place, sid)

    async def work(i: int) -> None:
        await session.add_items([msg(f"t{i}")])
        assert len(await session.get_items()) >= 1  # reads see staged writes

    await asyncio.to_thread(in_threads, work)
    assert session.pending.items == THREADS
    await session.commit()  # from this loop: everything the threads staged
    assert sorted(item["content"] for item in await session.get_items()) == [
        f"t{i}" for i in range(THREADS)
    ]
    await session.close()


async def test_run_sync_from_a_thread_pool_shares_one_session(place: Target, sid: str) -> None:
    await schema_ready(place)
    session = one_liner(place, sid, autocommit=True)
    loops: list[asyncio.AbstractEventLoop] = []

    def turn(i: int) -> str:
        if not has("run_sync_in_any_thread"):
            # Before openai-agents 0.5, run_sync needs the thread to have an event loop
            # set (what an application on those releases does in a worker thread).
            try:
                asyncio.get_event_loop_policy().get_event_loop()
            except RuntimeError:
                asyncio.set_event_loop(asyncio.new_event_loop())
        # Item ids unique, as the API's are (one repeated would be quarantined at commit).
        answer = assistant_message(f"answer {i}", item_id=f"msg_{i}")
        agent = Agent(name="a", model=ScriptedModel([[answer]]))
        result = Runner.run_sync(
            agent, f"question {i}", session=session, run_config=RunConfig(tracing_disabled=True)
        )
        loops.append(asyncio.get_event_loop_policy().get_event_loop())  # run_sync's own
        return str(result.final_output)

    def pool() -> list[str]:
        with ThreadPoolExecutor(THREADS) as executor:
            futures = [executor.submit(turn, i) for i in range(THREADS)]
            return [future.result(JOIN) for future in futures]

    assert await asyncio.wait_for(asyncio.to_thread(pool), JOIN) == [
        f"answer {i}" for i in range(THREADS)
    ]
    items = await session.get_items()
    assert len(items) == 2 * THREADS
    assert sorted(i["content"] for i in items if i.get("role") == "user") == [
        f"question {i}" for i in range(THREADS)
    ]
    # run_sync leaves each thread's loop open and idle: close() closes those stores too.
    await session.close()
    for loop in loops:
        loop.close()


test_run_sync_from_a_thread_pool_shares_one_session = pytest.mark.sdk_flow(
    test_run_sync_from_a_thread_pool_shares_one_session
)


async def test_close_reaches_stores_of_loops_running_or_idle_in_other_threads(
    place: Target, sid: str
) -> None:
    await schema_ready(place)
    session = one_liner(place, sid, autocommit=True)
    running = asyncio.new_event_loop()
    idle = asyncio.new_event_loop()
    runner = threading.Thread(target=running.run_forever, daemon=True)
    runner.start()
    try:
        store_of_running = asyncio.run_coroutine_threadsafe(
            _write_and_get_store(session, "from a running loop"), running
        ).result(JOIN)

        def use_idle() -> Any:
            return idle.run_until_complete(_write_and_get_store(session, "from an idle loop"))

        store_of_idle = await asyncio.to_thread(use_idle)  # the loop stays open, not running
        assert not store_of_running.closed and not store_of_idle.closed
        await asyncio.wait_for(session.close(), JOIN)
        assert store_of_running.closed and store_of_idle.closed
    finally:
        running.call_soon_threadsafe(running.stop)
        runner.join(JOIN)
        running.close()
        idle.close()
    check = one_liner(place, sid)
    assert [i["content"] for i in await check.get_items()] == [
        "from a running loop",
        "from an idle loop",
    ]
    await check.close()


async def _write_and_get_store(session: BufferedSession, text: str) -> Any:
    await session.add_items([msg(text)])
    return session.store


async def test_a_store_used_from_another_loop_refuses_at_once_naming_both_loops(
    place: Target, sid: str
) -> None:
    store = await place.open()
    await store.session(sid).get_items()  # bound to this loop

    async def elsewhere(i: int) -> str:
        with pytest.raises(WrongEventLoopError) as info:
            await store.session(sid).get_items()
        with pytest.raises(WrongEventLoopError):
            await store.list_sessions()
        return str(info.value)

    try:
        (message,) = await asyncio.to_thread(in_threads, elsewhere, 1)
    finally:
        await place.close_all()
    assert "from event loop" in message and "belongs to event loop" in message
    assert f"{id(asyncio.get_running_loop()):#x}" in message
    assert message.startswith(f"get_items() on session {sid!r} on "), message  # one "()"


async def test_a_private_in_memory_session_refuses_a_second_loop(sid: str) -> None:
    session = SQLiteSession(sid)  # its database lives in its one connection
    await session.add_items([msg("here")])
    await session.commit()  # opened here, on this loop

    async def elsewhere(i: int) -> str:
        with pytest.raises(WrongEventLoopError) as info:
            await session.get_items()
        return str(info.value)

    (message,) = await asyncio.to_thread(in_threads, elsewhere, 1)
    assert "in-memory database" in message and "from event loop" in message
    assert f"opened on event loop {type(asyncio.get_running_loop()).__name__}" in message
    assert await session.get_items() == [msg("here")]
    await session.close()


# --------------------------------------------------------------------------- the lock


def test_the_cross_loop_lock_excludes_tasks_of_different_loops() -> None:
    lock = CrossLoopLock()
    inside = 0
    most = 0
    order: list[int] = []

    async def work(i: int) -> None:
        nonlocal inside, most
        for _ in range(20):
            async with lock:
                inside += 1
                most = max(most, inside)
                order.append(i)
                await asyncio.sleep(0)  # other tasks of this loop run meanwhile
                inside -= 1

    async def several(i: int) -> None:
        await asyncio.gather(*(work(i) for _ in range(3)))

    in_threads(several)
    assert most == 1
    assert len(order) == THREADS * 3 * 20
    assert not lock.locked()


async def test_a_waiter_cancelled_as_the_lock_is_handed_to_it_passes_it_on() -> None:
    lock = CrossLoopLock()
    await lock.acquire()
    first = asyncio.ensure_future(lock.acquire())
    second = asyncio.ensure_future(lock.acquire())
    await asyncio.sleep(0)
    lock.release()  # handed to `first` (its wake-up is scheduled)...
    first.cancel()  # ...which is cancelled before it runs: `second` must get it
    with pytest.raises(asyncio.CancelledError):
        await first
    await asyncio.wait_for(second, 5)
    assert lock.locked()
    lock.release()
    assert not lock.locked()


def test_a_waiter_whose_loop_closed_is_skipped() -> None:
    """A thread queued for the lock, then its loop closed (the thread is gone)."""
    lock = CrossLoopLock()
    here = asyncio.new_event_loop()
    dead = asyncio.new_event_loop()
    try:
        here.run_until_complete(lock.acquire())
        stranded = _Waiter(dead.create_future())
        lock._waiters.append(stranded)  # as acquire() queues a waiter of that loop
        dead.close()

        async def next_in_line() -> None:
            mine = asyncio.ensure_future(lock.acquire())
            await asyncio.sleep(0)
            lock.release()  # skips the waiter of the closed loop
            await asyncio.wait_for(mine, 5)
            lock.release()

        here.run_until_complete(next_in_line())
        assert not lock.locked() and stranded.state == "skipped"
    finally:
        here.close()
