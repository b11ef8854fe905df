"""One lifecycle for sessions and stores (OPEN -> CLOSING -> CLOSED) and event-loop binding."""

from __future__ import annotations

import asyncio
import threading
from typing import Any

import pytest

from sessions import Store
from sessions._engine.resource import Lifecycle
from sessions.errors import SessionClosedError, StoreClosedError, WrongEventLoopError
from tests.conftest import Target
from tests.contract.proxy import gate_apply, install_proxy
from tests.helpers import msg


async def test_a_store_is_closing_while_its_commits_finish_then_closed(
    target: Target, sid: str
) -> None:
    store = await target.open()
    session = store.session(sid)
    proxy = install_proxy(store)
    entered, release = gate_apply(proxy)
    await session.add_items([msg("1")])
    commit = asyncio.create_task(session.commit())
    await entered.wait()
    closing = asyncio.create_task(store.close())
    await asyncio.sleep(0)
    assert store.state is Lifecycle.CLOSING and store.closed
    with pytest.raises(StoreClosedError, match="its store is closing"):
        await session.get_items()
    with pytest.raises(StoreClosedError, match="the store is closing"):
        store.session(sid)
    release.set()
    await commit  # the commit in flight was not cut short by the close
    await closing
    assert store.state is Lifecycle.CLOSED
    with pytest.raises(StoreClosedError, match="the store is closed"):
        await store.list_sessions()
    target.opened.remove(store)
    other = await target.open()
    assert await other.session(sid).get_items() == [msg("1")]


async def test_close_is_idempotent_and_shared_by_concurrent_callers(
    store: Store[Any], sid: str
) -> None:
    session = store.session(sid)
    await asyncio.gather(session.close(), session.close(), session.close())
    assert session.state is Lifecycle.CLOSED
    with pytest.raises(SessionClosedError, match="the session is closed"):
        await session.add_items([msg("x")])
    await asyncio.gather(store.close(), store.close())
    await store.close()
    assert store.state is Lifecycle.CLOSED


async def test_a_store_used_from_another_event_loop_refuses_at_once_naming_both_loops(
    store: Store[Any], sid: str
) -> None:
    session = store.session(sid)
    await session.add_items([msg("1")])
    await session.commit()  # binds the store to this loop
    here = asyncio.get_running_loop()
    errors: list[BaseException] = []

    def use_from_another_loop() -> None:
        async def read() -> None:
            await asyncio.wait_for(store.session(sid).get_items(), 10)

        try:
            asyncio.run(read())
        except BaseException as exc:  # noqa: BLE001 - inspected below
            errors.append(exc)

    thread = threading.Thread(target=use_from_another_loop)
    thread.start()
    await asyncio.to_thread(thread.join, 20)
    assert not thread.is_alive()
    assert len(errors) == 1 and isinstance(errors[0], WrongEventLoopError), errors
    assert f"{id(here):#x}" in str(errors[0])  # names the store's own loop...
    assert str(errors[0]).count(" at 0x") == 2  # ...and the caller's
    assert await session.get_items() == [msg("1")]  # still fine on its own loop
