"""The run context (``wrapper=``), which the SDK's runner passes (openai-agents 0.20+) to a
session whose ``get_items``, ``add_items``, ``pop_item`` and ``clear_session`` take it.

Our sessions take it (so the runner passes it); ``TransactionalSession`` hands it on to a
wrapped session that takes it: with a read at once, with the writes when they are
applied. The wrapped session here routes every call by the tenant in the run context,
and refuses a call without one, so a context that is not handed on fails the test.
"""

from __future__ import annotations

from collections import defaultdict
from contextlib import AsyncExitStack
from pathlib import Path
from typing import Any

import pytest
from agents import Agent, RunConfig, Runner

from sessions import SQLiteStore, TransactionalSession
from tests.flows import need_sdk
from tests.helpers import ListSession
from tests.sdk import ScriptedModel, assistant_message

pytestmark = pytest.mark.sdk_flow

NO_TRACE = RunConfig(tracing_disabled=True)


class TenantRouted:
    """A session that keeps one history per tenant, the tenant read from the run context."""

    def __init__(self, session_id: str) -> None:
        self.session_id = session_id
        self.histories: dict[str, list[Any]] = defaultdict(list)
        self.calls: list[tuple[str, str]] = []

    def _tenant(self, operation: str, wrapper: Any) -> list[Any]:
        if wrapper is None:
            raise RuntimeError(f"{operation}() without a run context: no tenant to route to")
        tenant: str = wrapper.context["tenant"]
        self.calls.append((operation, tenant))
        return self.histories[tenant]

    async def get_items(self, limit: int | None = None, wrapper: Any = None) -> list[Any]:
        items = self._tenant("get_items", wrapper)
        return list(items if limit is None else items[max(0, len(items) - limit) :])

    async def add_items(self, items: list[Any], wrapper: Any = None) -> None:
        self._tenant("add_items", wrapper).extend(items)

    async def pop_item(self, wrapper: Any = None) -> Any:
        items = self._tenant("pop_item", wrapper)
        return items.pop() if items else None

    async def clear_session(self, wrapper: Any = None) -> None:
        self._tenant("clear_session", wrapper).clear()


class Plain(ListSession):
    """A session whose methods do not take the run context (the SDK's original protocol)."""


async def run(session: TransactionalSession, text: str, tenant: str, answer: str) -> Any:
    agent = Agent(name="a", model=ScriptedModel([[assistant_message(answer)]]))
    async with AsyncExitStack() as stack:
        if not session.autocommit:
            await stack.enter_async_context(session.transaction())
        return await Runner.run(
            agent, text, session=session, context={"tenant": tenant}, run_config=NO_TRACE
        )


@pytest.mark.parametrize("autocommit", [True, False], ids=["autocommit", "buffered"])
async def test_the_wrapper_hands_the_run_context_to_a_session_that_routes_by_it(
    autocommit: bool,
) -> None:
    need_sdk("session_run_context")
    inner = TenantRouted("shared-id")
    session = TransactionalSession(inner, autocommit=autocommit)
    await run(session, "hello from acme", "acme", "hi acme")
    await run(session, "hello from globex", "globex", "hi globex")
    assert [item.get("content") for item in inner.histories["acme"]][0] == "hello from acme"
    assert [item.get("content") for item in inner.histories["globex"]][0] == "hello from globex"
    assert len(inner.histories["acme"]) == len(inner.histories["globex"]) == 2
    # Every call carried the tenant of its own run: reads, and the writes of the commit.
    assert {op for op, _ in inner.calls} >= {"get_items", "add_items"}
    assert all(tenant in ("acme", "globex") for _, tenant in inner.calls)
    # A second acme turn sees acme's history only.
    model = ScriptedModel([[assistant_message("again")]])
    async with AsyncExitStack() as stack:
        if not autocommit:
            await stack.enter_async_context(session.transaction())
        await Runner.run(
            Agent(name="a", model=model),
            "and again",
            session=session,
            context={"tenant": "acme"},
            run_config=NO_TRACE,
        )
    assert "globex" not in str(model.calls[0].input)
    assert "hello from acme" in str(model.calls[0].input)
    await session.close()


async def test_the_wrapper_hands_the_context_of_pops_and_clears_on() -> None:
    need_sdk("session_run_context")
    inner = TenantRouted("s")

    class Context:
        def __init__(self, tenant: str) -> None:
            self.context = {"tenant": tenant}

    acme = Context("acme")
    session = TransactionalSession(inner)
    await session.add_items([{"role": "user", "content": "one"}], wrapper=acme)
    await session.add_items([{"role": "user", "content": "two"}], wrapper=acme)
    await session.commit()
    assert await session.pop_item(wrapper=acme) == {"role": "user", "content": "two"}
    await session.commit()
    assert [i["content"] for i in inner.histories["acme"]] == ["one"]
    await session.clear_session(wrapper=acme)
    await session.commit()
    assert inner.histories["acme"] == [] and set(inner.histories) == {"acme"}
    await session.close()


async def test_a_wrapped_session_without_the_parameter_is_called_without_it() -> None:
    need_sdk("session_run_context")
    inner = Plain("plain")
    session = TransactionalSession(inner, autocommit=True)
    agent = Agent(name="a", model=ScriptedModel([[assistant_message("fine")]]))
    result = await Runner.run(agent, "hi", session=session, context={"x": 1}, run_config=NO_TRACE)
    assert result.final_output == "fine"
    assert [item.get("content") for item in inner.items][0] == "hi"
    await session.close()


async def test_our_sessions_take_the_run_context_so_the_runner_passes_it(tmp_path: Path) -> None:
    need_sdk("session_run_context")
    from agents.memory.session import _session_accepts_wrapper  # what the runner asks

    store = await SQLiteStore.open(tmp_path / "s.db")
    try:
        assert _session_accepts_wrapper(store.session("a"))
        assert _session_accepts_wrapper(TransactionalSession(Plain("p")))
        session = store.session("a", autocommit=True)
        context = object()
        await session.add_items([{"role": "user", "content": "x"}], wrapper=context)
        assert await session.get_items(wrapper=context) == [{"role": "user", "content": "x"}]
        assert await session.pop_item(wrapper=context) == {"role": "user", "content": "x"}
        await session.clear_session(wrapper=context)
    finally:
        await store.close()
