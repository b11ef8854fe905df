"""``TransactionalSession``: the guarantees docs/wrapper.md claims, over real inner sessions.

Inner sessions: the SDK's ``agents.SQLiteSession`` (a file), our own SQLite and
PostgreSQL sessions (autocommit, so that every inner call is durable by itself), and
the SDK's ``RedisSession`` against the local Redis. ``Proxy`` wraps any of them to
inject a gate or a failure at one call; it changes nothing else.
"""

from __future__ import annotations

import asyncio
import logging
import os
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path
from typing import Any

import pytest
from agents import Agent, RunConfig, Runner
from agents import SQLiteSession as SDKSQLiteSession

from sessions import SQLiteStore, TransactionalSession
from sessions.errors import (
    CommitConflictError,
    CommitError,
    SessionClosedError,
    SessionError,
    UncommittedChangesWarning,
)
from sessions.wrapper import InnerSessionWriteError
from tests.conftest import IN_CI, Target, make_target
from tests.helpers import msg
from tests.sdk import ScriptedModel, assistant_message, sdk_import

INNER_KINDS = ["sdk-sqlite", "txs-sqlite", "txs-postgres", "sdk-redis"]
REDIS_URL = os.environ.get("SESSIONS_TEST_REDIS_URL", "redis://127.0.0.1:6379/0")


def texts(items: list[Any]) -> list[str]:
    return [item["content"] for item in items]


class Inner:
    """Opens handles on one kind of inner session; each handle is a separate writer."""

    def __init__(self, kind: str) -> None:
        self.kind = kind
        self.cleanups: list[Callable[[], Awaitable[None]]] = []
        self.open: Callable[[str], Awaitable[Any]]


@pytest.fixture(params=INNER_KINDS)
def inner_kind(request: pytest.FixtureRequest, tmp_path: Path) -> tuple[str, Target | None]:
    """Sync on purpose: probing PostgreSQL must happen outside the running loop."""
    kind: str = request.param
    if kind.startswith("txs-"):
        return kind, make_target(kind.removeprefix("txs-"), tmp_path, request)
    return kind, None


async def _sdk_sqlite(box: Inner, target: Target | None, tmp_path: Path) -> None:
    path = tmp_path / "sdk.db"

    async def open_sdk(sid: str) -> Any:
        session = SDKSQLiteSession(sid, path)

        async def close() -> None:
            session.close()

        box.cleanups.append(close)
        return session

    box.open = open_sdk


async def _ours(box: Inner, target: Target | None, tmp_path: Path) -> None:
    assert target is not None
    store = await target.open()
    box.cleanups.append(target.close_all)

    async def open_txs(sid: str) -> Any:
        return store.session(sid, autocommit=True)

    box.open = open_txs


async def _sdk_redis(box: Inner, target: Target | None, tmp_path: Path) -> None:
    pytest.importorskip("redis")
    from redis.asyncio import Redis

    RedisSession = sdk_import(
        "RedisSession", "agents.extensions.memory.redis_session", "RedisSession"
    )

    client = Redis.from_url(REDIS_URL)
    try:
        await client.ping()
    except Exception as exc:  # noqa: BLE001 - reported as the skip reason
        await client.aclose()
        reason = f"no Redis at {REDIS_URL}: {type(exc).__name__}: {exc}"
        if IN_CI:
            pytest.fail(f"CI is set, so Redis tests must run: {reason}", pytrace=False)
        pytest.skip(reason)
    prefix = f"txs-test-{uuid.uuid4().hex}"

    async def drop() -> None:
        keys = [key async for key in client.scan_iter(match=f"{prefix}:*")]
        if keys:
            await client.delete(*keys)
        await client.aclose()

    box.cleanups.append(drop)

    async def open_redis(sid: str) -> Any:
        return RedisSession(sid, redis_client=client, key_prefix=prefix)

    box.open = open_redis


#: How each kind of inner session is opened.
OPENERS = {
    "sdk-sqlite": _sdk_sqlite,
    "txs-sqlite": _ours,
    "txs-postgres": _ours,
    "sdk-redis": _sdk_redis,
}


@pytest.fixture
async def inner(inner_kind: tuple[str, Target | None], tmp_path: Path) -> AsyncIterator[Inner]:
    kind, target = inner_kind
    box = Inner(kind)
    await OPENERS[kind](box, target, tmp_path)
    yield box
    for cleanup in reversed(box.cleanups):
        await cleanup()


class Proxy:
    """Delegates to an inner session; can hold ``add_items`` at a gate or fail calls."""

    def __init__(self, inner: Any) -> None:
        self.inner = inner
        self.session_id = inner.session_id
        self.session_settings = getattr(inner, "session_settings", None)
        self.gate: asyncio.Event | None = None
        self.entered = asyncio.Event()
        self.add_plan: list[bool] = []  # per add_items call: True = raise before writing
        self.fail_reads = False
        self.calls: list[str] = []

    async def get_items(self, limit: int | None = None) -> list[Any]:
        if self.fail_reads:
            raise ConnectionError("read refused by the test")
        return list(await self.inner.get_items(limit))

    async def add_items(self, items: list[Any]) -> None:
        self.calls.append(f"add_items({len(items)})")
        if self.add_plan and self.add_plan.pop(0):
            raise ConnectionError("write refused by the test")
        if self.gate is not None:
            self.entered.set()
            await self.gate.wait()
        await self.inner.add_items(items)

    async def pop_item(self) -> Any:
        self.calls.append("pop_item")
        return await self.inner.pop_item()

    async def clear_session(self) -> None:
        self.calls.append("clear_session")
        await self.inner.clear_session()


def sid() -> str:
    return f"w-{uuid.uuid4().hex}"


# ----------------------------------------------------------------------------- staging


async def test_writes_are_staged_until_commit_and_reads_see_them(inner: Inner) -> None:
    raw = await inner.open(sid())
    await raw.add_items([msg("a"), msg("b")])
    w = TransactionalSession(raw)
    assert w.session_id == raw.session_id

    await w.add_items([msg("c"), msg("d")])
    assert texts(await raw.get_items()) == ["a", "b"]  # nothing reached the inner session
    assert texts(await w.get_items()) == ["a", "b", "c", "d"]
    assert texts(await w.get_items(3)) == ["b", "c", "d"]
    assert texts(await w.get_items(1)) == ["d"]
    assert await w.get_items(0) == []
    assert w.pending.items == 2

    await w.commit()
    assert not w.has_pending
    assert texts(await raw.get_items()) == ["a", "b", "c", "d"]
    await w.close()


async def test_commit_applies_clear_then_pops_then_adds_in_order(inner: Inner) -> None:
    raw = await inner.open(sid())
    await raw.add_items([msg("a"), msg("b"), msg("c")])
    w = TransactionalSession(raw)

    assert (await w.pop_item())["content"] == "c"
    assert (await w.pop_item())["content"] == "b"
    await w.add_items([msg("d")])
    assert texts(await w.get_items()) == ["a", "d"]
    assert texts(await raw.get_items()) == ["a", "b", "c"]
    await w.commit()
    assert texts(await raw.get_items()) == ["a", "d"]

    await w.add_items([msg("e")])
    await w.clear_session()
    await w.add_items([msg("x"), msg("y")])
    assert texts(await w.get_items()) == ["x", "y"]
    assert texts(await raw.get_items()) == ["a", "d"]
    await w.commit()
    assert texts(await raw.get_items()) == ["x", "y"]

    await w.add_items([msg("z")])
    assert (await w.pop_item())["content"] == "z"  # a staged item pops without I/O
    assert not w.has_pending
    await w.close()


async def test_add_items_never_suspends(inner: Inner) -> None:
    """The seed's bug needs add_items to suspend; without autocommit it cannot."""
    w = TransactionalSession(await inner.open(sid()))
    for i in range(20):
        coro = w.add_items([msg(f"m{i}")])
        with pytest.raises(StopIteration):  # finished on its first step
            coro.send(None)
    assert len(await w.get_items()) == 20
    await w.rollback()
    await w.close()


async def test_rollback_and_transaction(inner: Inner) -> None:
    raw = await inner.open(sid())
    await raw.add_items([msg("kept")])
    w = TransactionalSession(raw)

    await w.add_items([msg("gone")])
    await w.clear_session()
    await w.rollback()
    assert texts(await w.get_items()) == ["kept"]

    with pytest.raises(RuntimeError, match="tool blew up"):
        async with w.transaction():
            await w.add_items([msg("half a turn")])
            raise RuntimeError("tool blew up")
    assert texts(await raw.get_items()) == ["kept"]
    assert not w.has_pending

    async with w.transaction() as tx:
        assert tx is w
        await w.add_items([msg("q"), msg("r", "assistant")])
    assert texts(await raw.get_items()) == ["kept", "q", "r"]
    await w.close()


async def test_commit_is_shielded_from_its_callers_cancellation(inner: Inner) -> None:
    raw = await inner.open(sid())
    proxy = Proxy(raw)
    proxy.gate = asyncio.Event()
    w = TransactionalSession(proxy)
    await w.add_items([msg(f"m{i}") for i in range(5)])

    committing = asyncio.create_task(w.commit())
    await proxy.entered.wait()  # the inner add_items is in flight
    committing.cancel()
    await asyncio.sleep(0)
    committing.cancel()  # repeated cancellation changes nothing
    await asyncio.sleep(0)
    assert not committing.done()
    proxy.gate.set()
    with pytest.raises(asyncio.CancelledError):
        await committing
    assert texts(await raw.get_items()) == [f"m{i}" for i in range(5)]  # whole batch
    assert not w.has_pending
    await w.close()


async def test_transaction_cancelled_mid_block_writes_nothing(inner: Inner) -> None:
    raw = await inner.open(sid())
    w = TransactionalSession(raw)
    started = asyncio.Event()

    async def turn() -> None:
        async with w.transaction():
            await w.add_items([msg("user")])
            started.set()
            await asyncio.Event().wait()  # the "model" never answers

    task = asyncio.create_task(turn())
    await started.wait()
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    assert await raw.get_items() == []
    assert not w.has_pending
    await w.close()


# ----------------------------------------------------------------------------- failures


async def test_tail_changed_by_another_writer_is_a_conflict_and_nothing_is_popped(
    inner: Inner,
) -> None:
    session_id = sid()
    raw = await inner.open(session_id)
    await raw.add_items([msg("a"), msg("b")])
    w = TransactionalSession(raw)
    assert (await w.pop_item())["content"] == "b"

    other = await inner.open(session_id)
    await other.add_items([msg("c")])  # another writer appends after our read

    with pytest.raises(CommitConflictError) as info:
        await w.commit()
    assert info.value.outcome_known
    assert texts(await raw.get_items()) == ["a", "b", "c"]  # "c" was not popped instead
    assert w.pending.pops == 1  # still staged
    await w.rollback()
    assert texts(await w.get_items()) == ["a", "b", "c"]
    await w.close()


async def test_failure_before_any_write_has_a_known_outcome(inner: Inner) -> None:
    raw = await inner.open(sid())
    await raw.add_items([msg("a")])
    proxy = Proxy(raw)
    w = TransactionalSession(proxy)
    await w.pop_item()
    proxy.fail_reads = True  # the pop check reads the tail again first
    with pytest.raises(CommitError) as info:
        await w.commit()
    assert info.value.outcome_known
    assert "ConnectionError" in str(info.value)
    assert texts(await raw.get_items()) == ["a"]
    assert proxy.calls == []
    proxy.fail_reads = False
    await w.commit()
    assert await raw.get_items() == []
    await w.close()


async def test_failure_mid_commit_is_reported_unknown_and_done_batches_never_repeat(
    inner: Inner,
) -> None:
    raw = await inner.open(sid())
    proxy = Proxy(raw)
    w = TransactionalSession(proxy)

    await w.add_items([msg("a")])
    proxy.add_plan = [True]
    with pytest.raises(CommitError) as first:
        await w.commit()
    assert first.value.outcome_known is False  # add_items raised: the wrapper cannot tell
    assert isinstance(first.value.__cause__, InnerSessionWriteError)
    assert await raw.get_items() == []

    await w.add_items([msg("b")])
    proxy.add_plan = [False, True]  # batch "a" goes in, batch "b" fails
    with pytest.raises(CommitError) as second:
        await w.commit()
    assert second.value.outcome_known is False
    cause = second.value.__cause__
    assert isinstance(cause, InnerSessionWriteError)
    assert cause.done == ("add_items(1 item(s))",)
    assert "committing again may repeat" in str(cause)
    assert texts(await raw.get_items()) == ["a"]

    # The batch seen applied in full is neither shown twice nor written twice.
    assert texts(await w.get_items()) == ["a", "b"]
    await w.commit()
    assert texts(await raw.get_items()) == ["a", "b"]
    await w.close()


async def test_pops_staged_before_a_half_applied_commit_are_never_applied_again(
    inner: Inner,
) -> None:
    raw = await inner.open(sid())
    await raw.add_items([msg("a"), msg("b"), msg("c")])
    proxy = Proxy(raw)
    w = TransactionalSession(proxy)
    assert (await w.pop_item())["content"] == "c"
    await w.add_items([msg("d")])
    proxy.add_plan = [True]  # the pop goes through, then add_items fails
    with pytest.raises(CommitError) as first:
        await w.commit()
    assert first.value.outcome_known is False
    assert isinstance(first.value.__cause__, InnerSessionWriteError)
    assert first.value.__cause__.done == ("pop_item()",)
    assert texts(await raw.get_items()) == ["a", "b"]

    # Reading re-learns the positions; committing again must still not pop "b" in
    # place of the "c" already gone.
    assert texts(await w.get_items()) == ["a", "b", "d"]
    with pytest.raises(CommitConflictError, match="rollback"):
        await w.commit()
    assert texts(await raw.get_items()) == ["a", "b"]
    await w.rollback()
    assert texts(await w.get_items()) == ["a", "b"]
    await w.close()


async def test_autocommit_makes_every_write_its_own_commit(inner: Inner) -> None:
    raw = await inner.open(sid())
    w = TransactionalSession(raw, autocommit=True)
    assert w.autocommit
    await w.add_items([msg("a"), msg("b")])
    assert texts(await raw.get_items()) == ["a", "b"]
    assert (await w.pop_item())["content"] == "b"
    assert texts(await raw.get_items()) == ["a"]
    await w.clear_session()
    assert await raw.get_items() == []
    assert not w.has_pending
    await w.close()


# ----------------------------------------------------------------------------- lifecycle


async def test_closing_the_wrapper_never_closes_the_inner_session(inner: Inner) -> None:
    raw = await inner.open(sid())
    async with TransactionalSession(raw) as w:
        await w.add_items([msg("a")])
        await w.commit()
    assert w.closed
    with pytest.raises(SessionClosedError):
        await w.get_items()
    await raw.add_items([msg("b")])  # the caller's session still works
    assert texts(await raw.get_items()) == ["a", "b"]

    again = TransactionalSession(raw)
    await again.add_items([msg("never committed")])
    with pytest.warns(UncommittedChangesWarning, match="1 staged item"):
        await again.close()
    assert texts(await raw.get_items()) == ["a", "b"]


@pytest.mark.sdk_flow
async def test_a_streamed_agent_run_commits_whole_turns(inner: Inner) -> None:
    raw = await inner.open(sid())
    w = TransactionalSession(raw)
    model = ScriptedModel([[assistant_message("one")], [assistant_message("two")]])
    agent = Agent(name="assistant", model=model)
    config = RunConfig(tracing_disabled=True)
    for text in ("hello", "again"):
        async with w.transaction():
            result = Runner.run_streamed(agent, text, session=w, run_config=config)
            async for _ in result.stream_events():
                pass
    history = await raw.get_items()
    assert [item["role"] for item in history] == ["user", "assistant"] * 2
    assert history[2]["content"] == "again"
    # The second run saw the first turn as history.
    assert model.calls[1].input[0]["content"] == "hello"
    await w.close()


# ----------------------------------------------------------------------------- settings


@pytest.mark.sdk_flow
async def test_session_settings_default_to_the_inner_sessions(tmp_path: Path) -> None:
    SessionSettings = sdk_import(
        "SessionSettings", "agents.memory.session_settings", "SessionSettings"
    )
    raw: Any = SDKSQLiteSession("s", tmp_path / "x.db", session_settings=SessionSettings(limit=2))
    try:
        await raw.add_items([msg("a"), msg("b"), msg("c")])
        w = TransactionalSession(raw)
        assert w.session_settings is not None and w.session_settings.limit == 2
        await w.add_items([msg("d")])
        assert texts(await w.get_items()) == ["c", "d"]
        assert texts(await w.get_items(4)) == ["a", "b", "c", "d"]
        await w.rollback()

        wide = TransactionalSession(raw, session_settings=SessionSettings(limit=3))
        assert texts(await wide.get_items()) == ["a", "b", "c"]
        await wide.close()
        await w.close()
    finally:
        raw.close()


async def test_an_unreadable_inner_item_is_skipped_not_fatal(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    raw: Any = SDKSQLiteSession("s", tmp_path / "x.db")
    try:
        await raw.add_items([msg("a"), "not an object", msg("b")])
        w = TransactionalSession(raw)
        with caplog.at_level(logging.WARNING, logger="sessions"):
            assert texts(await w.get_items()) == ["a", "b"]
        assert "skipping corrupt stored item (key -2)" in caplog.text
        await w.close()
    finally:
        raw.close()


async def test_what_is_not_a_session_is_refused_by_name(tmp_path: Path) -> None:
    class NoPop:
        session_id = "s"

        async def get_items(self, limit: int | None = None) -> list[Any]:
            return []

        async def add_items(self, items: list[Any]) -> None:
            pass

    with pytest.raises(TypeError, match=r"NoPop lacks pop_item, clear_session"):
        TransactionalSession(NoPop())  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="lacks session_id"):
        TransactionalSession(object())  # type: ignore[arg-type]

    store = await SQLiteStore.open(tmp_path / "y.db")
    try:
        w = TransactionalSession(store.session("s", autocommit=True))
        assert w.store is not None
        with pytest.raises(SessionError, match="serves that one session"):
            w.store.session("other")
        await w.close()
    finally:
        await store.close()


async def test_commit_into_a_hung_inner_session_releases_its_cancelled_caller_within_the_bound(
    tmp_path: Path,
) -> None:
    """The SDK's SQLiteSession waits (up to its 5 s busy timeout, shielding itself from
    cancellation) while another connection holds the file's write lock: a real hang. The
    wrapper's caller is released at its own commit_timeout all the same."""
    import sqlite3

    path = tmp_path / "locked.db"
    inner = SDKSQLiteSession("s", path)
    await inner.add_items([msg("before")])
    wrapper = TransactionalSession(inner, commit_timeout=0.5)
    locker = sqlite3.connect(path, isolation_level=None)
    locker.execute("BEGIN EXCLUSIVE")
    try:
        await wrapper.add_items([msg("a"), msg("b")])
        task = asyncio.create_task(wrapper.commit())
        await asyncio.sleep(0.1)  # the inner add_items is now waiting for the lock
        task.cancel()
        done, _ = await asyncio.wait({task}, timeout=0.5 + 1.0)
        assert task in done, "the wrapper held its cancelled caller past commit_timeout + 1 s"
        assert task.cancelled()
    finally:
        locker.execute("ROLLBACK")
        locker.close()
    # The inner write is one transaction: whenever it ends, it is all there or not at all.
    for _ in range(100):
        if texts(await inner.get_items()) == ["before", "a", "b"]:
            break
        await asyncio.sleep(0.1)
    assert texts(await inner.get_items()) in (["before"], ["before", "a", "b"])
    await wrapper.rollback()
    inner.close()
