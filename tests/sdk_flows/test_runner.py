"""Our sessions as ``session=`` of the SDK's Runner: run, run_sync and run_streamed.

Every run uses ``agents.testing.ScriptedModel`` (offline; ``tests.sdk`` supplies a
stand-in on releases before 0.21.0). An ``add_items`` spy records
exactly what the SDK wrote (and whether the ``transaction()`` block had already ended);
histories are read back through a second store (a separate connection), so the
assertions are about what is durable, not about read-your-writes.
"""

from __future__ import annotations

import asyncio
import gc
import inspect
import json
import logging
import uuid
import weakref
from typing import Any

import pytest
from agents import Agent, RunConfig, Runner, function_tool
from agents.items import RunItemBase
from agents.result import RunResultBase, RunResultStreaming
from pydantic import BaseModel

from sessions import BufferedSession, Store
from tests.conftest import Target
from tests.sdk import (
    ScriptedModel,
    assistant_message,
    function_call,
    has,
    need_sdk,
    run_task,
)

pytestmark = pytest.mark.sdk_flow

NO_TRACE = RunConfig(tracing_disabled=True)
WAIT = 10.0  # upper bound (seconds) for a background run task to finish; never reached


@function_tool
def add(a: int, b: int) -> int:
    """Add two integers."""
    return a + b


Items = list[dict[str, Any]]


def plain(items: Any) -> Items:
    data: Items = json.loads(json.dumps(items))
    return data


class Spy:
    """Wraps ``session.add_items``; records each call's items and when it was issued."""

    def __init__(self, session: BufferedSession) -> None:
        self.calls: list[tuple[bool, Items]] = []
        self.block_ended = False
        self._inner = session.add_items
        session.add_items = self.add_items  # type: ignore[method-assign]

    async def add_items(self, items: list[Any]) -> None:
        self.calls.append((self.block_ended, plain(items)))
        await self._inner(items)

    def written(self, *, late: bool | None = None) -> Items:
        return [i for was_late, c in self.calls if late is None or was_late == late for i in c]

    @property
    def late_calls(self) -> int:
        return sum(1 for was_late, _ in self.calls if was_late)


def tool_script(tag: str) -> list[Any]:
    """Two tool calls, then a final message: 3 model calls, 3 add_items batches."""
    return [
        [function_call("add", {"a": 1, "b": 2}, call_id=f"{tag}-c1")],
        [function_call("add", {"a": 3, "b": 4}, call_id=f"{tag}-c2")],
        [assistant_message(f"{tag}: done", item_id=f"{tag}-m")],
    ]


def tool_agent(model: ScriptedModel) -> Agent[Any]:
    return Agent(name="calc", model=model, tools=[add])


async def durable(target: Target, sid: str) -> Items:
    """What a separate store (another connection or pool) reads for ``sid``."""
    reader = await target.open()
    try:
        return plain(await reader.session(sid).get_items())
    finally:
        await reader.close()
        target.opened.remove(reader)


def assert_pairs_complete(items: Items) -> None:
    outputs = {i["call_id"] for i in items if i.get("type") == "function_call_output"}
    calls = [i["call_id"] for i in items if i.get("type") == "function_call"]
    assert set(calls) <= outputs, f"tool call(s) without result in {items}"


async def drive(entry: str, agent: Agent[Any], prompt: str, session: BufferedSession) -> Any:
    if entry == "run":
        return await Runner.run(agent, prompt, session=session, run_config=NO_TRACE)
    result = Runner.run_streamed(agent, prompt, session=session, run_config=NO_TRACE)
    async for _ in result.stream_events():
        pass
    return result


async def follow_up(session: BufferedSession, prior: Items, *, autocommit: bool = False) -> None:
    """A following run on ``session`` sees ``prior`` and appends one whole turn."""
    model = ScriptedModel([[assistant_message("again", item_id=f"m-{uuid.uuid4().hex}")]])
    agent = Agent(name="next", model=model, tools=[add])
    if autocommit:
        await Runner.run(agent, "follow-up", session=session, run_config=NO_TRACE)
    else:
        async with session.transaction():
            await Runner.run(agent, "follow-up", session=session, run_config=NO_TRACE)
    assert model.first_call is not None
    seen = plain(model.first_call.input)
    assert seen == [*prior, {"content": "follow-up", "role": "user"}]
    stored = plain(await session.get_items())
    assert stored[: len(prior)] == prior
    assert [i.get("role") for i in stored[len(prior) :]] == ["user", "assistant"]


# --------------------------------------------------------------------------- run / streamed


@pytest.mark.parametrize("entry", ["run", "streamed"])
@pytest.mark.parametrize("autocommit", [False, True], ids=["buffered", "autocommit"])
async def test_runner_history_is_what_the_sdk_added(
    target: Target, sid: str, entry: str, autocommit: bool
) -> None:
    store = await target.open()
    session = store.session(sid, autocommit=autocommit)
    spy = Spy(session)
    model = ScriptedModel(tool_script("t1"))
    agent = tool_agent(model)

    if autocommit:
        result = await drive(entry, agent, "first", session)
        assert not session.has_pending
    else:
        async with session.transaction():
            result = await drive(entry, agent, "first", session)
            assert session.pending.items == len(spy.written()) == 6
            assert await durable(target, sid) == []  # nothing durable before commit
        assert not session.has_pending
    assert result.final_output == "t1: done"
    # Per-turn saves (0.3.0 on): the input, each tool turn, the final message; before,
    # the whole run in one add_items at its end.
    assert [len(c) for _, c in spy.calls] == ([1, 2, 2, 1] if has("per_turn_saves") else [6])
    first = await durable(target, sid)
    assert first == spy.written()
    assert_pairs_complete(first)

    # A following run (a fresh session object on the same store) sees the turn.
    again = store.session(sid, autocommit=autocommit)
    spy2 = Spy(again)
    model2 = ScriptedModel(tool_script("t2"))
    if autocommit:
        await drive(entry, tool_agent(model2), "second", again)
    else:
        async with again.transaction():
            await drive(entry, tool_agent(model2), "second", again)
    assert model2.first_call is not None
    assert plain(model2.first_call.input) == [*first, {"content": "second", "role": "user"}]
    # ... and every later model call of that run sees the whole history so far.
    assert model2.last_call is not None
    assert plain(model2.last_call.input)[: len(first)] == first
    assert await durable(target, sid) == first + spy2.written()


# --------------------------------------------------------------------------- run_sync


def _sync_runs(target: Target, sid: str, autocommit: bool) -> Any:
    """Two ``Runner.run_sync`` turns on a session that opens its own store in run_sync's
    loop (this thread's default loop). Runs in a worker thread: no loop is running here."""
    loop = asyncio.new_event_loop()
    asyncio.set_event_loop(loop)
    session = target.session(sid, autocommit=autocommit)
    try:
        spy = Spy(session)
        model = ScriptedModel([*tool_script("s1"), *tool_script("s2")])
        agent = tool_agent(model)
        first = Runner.run_sync(agent, "first", session=session, run_config=NO_TRACE)
        if not autocommit:
            assert session.has_pending
            loop.run_until_complete(session.commit())
        n_calls = len(model.calls)
        second = Runner.run_sync(agent, "second", session=session, run_config=NO_TRACE)
        if not autocommit:
            loop.run_until_complete(session.commit())
        assert not session.has_pending
        return (
            first.final_output,
            second.final_output,
            spy.calls,
            plain(model.calls[n_calls].input),
        )
    finally:
        loop.run_until_complete(session.close())
        loop.run_until_complete(loop.shutdown_default_executor())
        asyncio.set_event_loop(None)
        loop.close()


@pytest.mark.parametrize("autocommit", [False, True], ids=["buffered", "autocommit"])
async def test_run_sync(target: Target, sid: str, autocommit: bool) -> None:
    await durable(target, sid)  # creates the schema before the thread's store opens
    out1, out2, calls, second_input = await asyncio.to_thread(_sync_runs, target, sid, autocommit)
    assert (out1, out2) == ("s1: done", "s2: done")
    written = [i for _, c in calls for i in c]
    assert len(calls) == (8 if has("per_turn_saves") else 2) and len(written) == 12
    stored = await durable(target, sid)
    assert stored == written
    half = [i for _, c in calls[: len(calls) // 2] for i in c]
    assert second_input == [*half, {"content": "second", "role": "user"}]


# --------------------------------------------------------------------------- tools, handoffs


@pytest.mark.parametrize("entry", ["run", "streamed"])
async def test_tool_call_and_handoff(target: Target, sid: str, entry: str) -> None:
    store = await target.open()
    session = store.session(sid)
    spy = Spy(session)
    billing_model = ScriptedModel([[assistant_message("billing: refunded", item_id="b-m")]])
    billing = Agent(name="billing", model=billing_model, tools=[add])
    triage_model = ScriptedModel(
        [
            [function_call("add", {"a": 40, "b": 2}, call_id="tr-c1")],
            [function_call("transfer_to_billing", {}, call_id="tr-h1")],
        ]
    )
    triage = Agent(name="triage", model=triage_model, tools=[add], handoffs=[billing])

    async with session.transaction():
        result = await drive(entry, triage, "refund please", session)
    assert result.last_agent is billing
    assert result.final_output == "billing: refunded"
    stored = await durable(target, sid)
    assert stored == spy.written()
    kinds = [i.get("type", i.get("role")) for i in stored]
    assert kinds == [
        "user",
        "function_call",
        "function_call_output",
        "function_call",
        "function_call_output",
        "message",
    ]
    assert stored[3]["name"] == "transfer_to_billing"
    assert stored[2]["output"] == "42"
    assert_pairs_complete(stored)
    # billing's model saw everything up to the handoff
    assert billing_model.first_call is not None
    assert plain(billing_model.first_call.input) == stored[:5]
    await follow_up(store.session(sid), stored)


# --------------------------------------------------------------------------- cancellation


async def _count_events() -> int:
    """How many events a full streamed run of ``tool_script`` produces (no session)."""
    result = Runner.run_streamed(
        tool_agent(ScriptedModel(tool_script("count"))), "go", run_config=NO_TRACE
    )
    n = 0
    async for _ in result.stream_events():
        n += 1
    assert result.is_complete and result.final_output == "count: done"
    return n


async def _wait_run_task(result: Any) -> None:
    task = run_task(result)
    if task is not None:
        done, _ = await asyncio.wait({task}, timeout=WAIT)
        assert done, "the background run task did not finish"


async def _check_whole(store: Store[Any], target: Target, session_id: str, spy: Spy) -> Items:
    session = store.session(session_id)
    stored = await durable(target, session_id)
    # Exactly the batches issued inside the block, each whole, contiguous, in order;
    # every batch issued after the block ended absent.
    assert stored == spy.written(late=False)
    assert_pairs_complete(stored)
    assert plain(await session.get_items()) == stored
    return stored


def _tool_run_streamed(session: Any, tag: str) -> Any:
    """A streamed run of the tool agent's script ``tag``, "go", into ``session``."""
    return Runner.run_streamed(
        tool_agent(ScriptedModel(tool_script(tag))), "go", session=session, run_config=NO_TRACE
    )


def _cancel(result: Any, mode: str) -> None:
    """``result.cancel(mode=...)``; before 0.4.0 ``cancel()`` had no mode and was immediate."""
    if has("cancel_mode"):
        result.cancel(mode=mode)
    else:
        assert mode == "immediate"
        result.cancel()


@pytest.mark.parametrize("mode", ["immediate", "after_turn"])
async def test_result_cancel_after_every_event(target: Target, sid: str, mode: str) -> None:
    if mode != "immediate":
        has_mode = "mode" in inspect.signature(RunResultStreaming.cancel).parameters
        need_sdk("cancel_mode", present=has_mode)
    store = await target.open()
    total = await _count_events()
    assert total > 10
    lengths: set[int] = set()
    for k in range(total + 2):  # k = total + 1: never cancelled
        session_id = f"{sid}-{k}"
        session = store.session(session_id)
        spy = Spy(session)
        result: Any = None
        seen = 0
        async with session.transaction():
            result = _tool_run_streamed(session, f"k{k}")
            if k == 0:
                _cancel(result, mode)
            async for _ in result.stream_events():
                seen += 1
                if seen == k:
                    _cancel(result, mode)
        spy.block_ended = True
        assert not session.has_pending, f"k={k}: staged changes survived the transaction"
        await _wait_run_task(result)
        assert not session.has_pending, f"k={k}: a late write was staged"
        stored = await _check_whole(store, target, session_id, spy)
        lengths.add(len(stored))
        await follow_up(session, stored)
    # The cancellations really cut runs short at different points (and some ran whole);
    # a release that saves a run only at its end stores all of it or nothing.
    if has("per_turn_saves"):
        assert len(lengths) >= 3, lengths
    else:
        assert lengths == {0, 6}, lengths
    assert 6 in lengths


@pytest.mark.parametrize("where", ["in-body", "in-stream"])
async def test_consumer_cancelled_mid_stream(
    target: Target, sid: str, where: str, caplog: pytest.LogCaptureFixture
) -> None:
    """The consumer task dies inside ``transaction()`` while the run keeps going.

    The block rolls back; what the still-running run adds afterwards is refused and
    never reaches a later commit.
    """
    if where == "in-stream":
        # Before 0.7.0 stream_events() swallowed its consumer's cancellation (and ended
        # the stream), so the consumer never dies there.
        need_sdk("stream_events_reraises_cancel")
    caplog.set_level(logging.WARNING, logger="sessions")
    store = await target.open()
    total = await _count_events()
    late_total = late_during = 0
    for k in range(1, total + 1):
        session_id = f"{sid}-{k}"
        session = store.session(session_id)
        spy = Spy(session)
        started: asyncio.Future[Any] = asyncio.get_running_loop().create_future()
        reached = asyncio.Event()

        async def consumer(
            session: BufferedSession = session,
            started: asyncio.Future[Any] = started,
            reached: asyncio.Event = reached,
            k: int = k,
        ) -> None:
            async with session.transaction():
                result = _tool_run_streamed(session, f"c{k}")
                started.set_result(result)
                seen = 0
                async for _ in result.stream_events():
                    seen += 1
                    if seen == k:
                        reached.set()
                        if where == "in-body":
                            await asyncio.Event().wait()

        task = asyncio.create_task(consumer())
        waiter = asyncio.create_task(reached.wait())
        await asyncio.wait({task, waiter}, return_when=asyncio.FIRST_COMPLETED)
        waiter.cancel()
        assert not task.done(), f"k={k}: the run finished before the consumer was cancelled"
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
        spy.block_ended = True
        assert not session.has_pending, f"k={k}: rollback left changes staged"
        # Rolled back: nothing of the run is stored, not even what it added in time.
        assert await durable(target, session_id) == []
        # A later transaction on the same session, open while the old run goes on
        # writing: its commit carries only its own item, never the late writes.
        marker = {"role": "user", "content": f"marker {k}"}
        late_before = spy.late_calls
        async with session.transaction():
            await session.add_items([marker])
            await _wait_run_task(started.result())
        late_during += spy.late_calls - late_before
        late_total += spy.late_calls
        assert not session.has_pending, f"k={k}: a late write was staged"
        assert await durable(target, session_id) == [marker]
        await follow_up(session, [marker])
    if where == "in-body":
        # The run really did write after its block had ended, also while the later
        # block was open, and those writes were refused.
        assert late_total > 0 and late_during > 0, (late_total, late_during)
        assert "refused add_items()" in caplog.text


# --------------------------------------------------------------------------- plain data only


_LIVE = (Agent, RunResultBase, RunItemBase, BaseModel, ScriptedModel)


def _reachable_live_objects(session: BufferedSession) -> list[str]:
    """Live SDK objects reachable from the session's own state (its store excluded)."""
    skip = {"_store", "_store_factory", "_lock", "_open_lock"}
    todo: list[Any] = [v for k, v in vars(session).items() if k not in skip]
    found: list[str] = []
    seen: set[int] = set()
    while todo:
        obj = todo.pop()
        if id(obj) in seen or isinstance(obj, (type, Store)) or callable(obj):
            continue
        seen.add(id(obj))
        if isinstance(obj, _LIVE):
            found.append(type(obj).__name__)
        todo.extend(gc.get_referents(obj))
    return found


@pytest.mark.parametrize("entry", ["run", "streamed"])
async def test_session_holds_plain_data_only(target: Target, sid: str, entry: str) -> None:
    store = await target.open()
    session = store.session(sid)
    model = ScriptedModel(tool_script("p"))
    agent: Agent[Any] | None = tool_agent(model)
    assert agent is not None
    agent_ref = weakref.ref(agent)
    async with session.transaction():
        result = await drive(entry, agent, "go", session)
        assert session.has_pending
        _, _, staged = session._staging.view()
        assert staged and all(type(item) is str for item in staged)
        assert _reachable_live_objects(session) == []
    if entry == "streamed":
        await _wait_run_task(result)
    assert _reachable_live_objects(session) == []
    result_ref = weakref.ref(result)
    del agent, result, model
    for _ in range(3):
        gc.collect()
    assert result_ref() is None, "the run result outlived the run"
    assert agent_ref() is None, "the agent outlived the run"
    assert not session.closed
    stored = plain(await session.get_items())
    assert len(stored) == 6 and all(isinstance(i, dict) for i in stored)
